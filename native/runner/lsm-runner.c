/*
 * lsm-runner: run one command and make sure that, once it is over (or the
 * runner is told to stop), nothing it started is left running.
 *
 *   lsm-runner [--grace-ms N] [--cleanup-ms N] [--persist] [--cgroup DIR [--pids-max N]]
 *              [--proc-root DIR] [--force-ppid-scan] -- PROGRAM [ARGS...]
 *
 * The runner marks itself a child subreaper, so every orphan in the tree
 * (setsid, double fork, nohup...) is re-parented to it rather than to init.
 * "Everything it started" is therefore exactly "every descendant of the
 * runner", which it enumerates from procfs, signals, and reaps until an
 * authoritative enumeration comes back empty.  Whenever that cannot be
 * established it fails closed with exit status 125.  With --cgroup the
 * command also runs in its own cgroup v2 group, and cleanup ends with
 * cgroup.kill, which no fork can outrun.  See README.md.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/resource.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_CONTAIN 125
#define PID_LIMIT (1 << 22)      /* PID_MAX_LIMIT on 64-bit kernels */
#define MAX_ROOT_LEN 1024
#define MAX_GRACE_MS 3600000L
#define EXTRA_CLEANUP_MS 5000L   /* default SIGKILL phase budget on top of the grace */
#define TICK_MS 20L              /* re-enumeration period when no SIGCHLD comes */
#define PERSIST_TICK_MS 250L     /* retry period once the budget is spent (--persist) */
#define MAX_CG_LEN 2048

struct pids {
	pid_t *v;
	size_t n, cap;
};

static const char *proc_root = "/proc";
static pid_t self_pid;
static pid_t main_pid = -1;
static int main_status, main_reaped;
static int use_children_file = 1;

/* The command's own cgroup (--cgroup), or NULL.  cg_kill: the kernel has
 * cgroup.kill; otherwise cleanup freezes the group and SIGKILLs its members. */
static const char *cg_dir;
static int cg_kill = 1;
static int cg_created; /* only a group we made may be removed on failure */

/* The nice value we started with; the command gets it back before exec.
 * In server mode it is taken once, before the server raises its own. */
static int start_nice, start_nice_known;

/* The runner mostly sleeps; a higher priority (root only) lets it act at
 * once when the deadline comes, even if the command keeps every CPU busy. */
static void raise_priority(void)
{
	if (start_nice_known)
		return;
	start_nice_known = 1;
	errno = 0;
	start_nice = getpriority(PRIO_PROCESS, 0);
	if (errno == 0 && start_nice > -10)
		setpriority(PRIO_PROCESS, 0, -10);
	else if (errno)
		start_nice = 0;
}

static void unavailable(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Set by doubt(): the current enumeration is not authoritative, and why. */
static int unsure;
static char reason[512];

/* One bit per pid.  'seen' is scratch space for a single enumeration;
 * 'termed' remembers who already got SIGTERM so handlers only run once. */
static unsigned char seen[PID_LIMIT / 8], termed[PID_LIMIT / 8];

static int bit_get(const unsigned char *m, pid_t p) { return (m[p >> 3] >> (p & 7)) & 1; }
static void bit_set(unsigned char *m, pid_t p) { m[p >> 3] |= (unsigned char)(1u << (p & 7)); }
static void bit_clr(unsigned char *m, pid_t p) { m[p >> 3] &= (unsigned char)~(1u << (p & 7)); }

static void say(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	for (char *p = buf; n > 0;) {
		ssize_t w = write(STDERR_FILENO, p, (size_t)n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (int)w;
	}
}

static void doubt(const char *fmt, ...)
{
	if (!unsure) { /* keep the first reason; later ones are usually fallout */
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(reason, sizeof reason, fmt, ap);
		va_end(ap);
	}
	unsure = 1;
}

static void reset_doubt(void)
{
	unsure = 0;
	reason[0] = '\0';
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int push(struct pids *s, pid_t p)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		if (cap > 2 * (size_t)PID_LIMIT)
			return -1;
		pid_t *v = realloc(s->v, cap * sizeof *v);
		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = p;
	return 0;
}

/* A decimal pid in (0, PID_LIMIT), or -1. */
static pid_t parse_pid(const char *s)
{
	long v = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
		if (v >= PID_LIMIT)
			return -1;
	}
	return v > 0 ? (pid_t)v : -1;
}

static int vanished(int err) { return err == ENOENT || err == ESRCH; }

/* A missing procfs entry only means "gone" if the kernel agrees: with
 * hidepid= mounts, entries of live processes can be invisible too. */
static int pid_gone(pid_t p) { return kill(p, 0) < 0 && errno == ESRCH; }

static void add_descendant(struct pids *out, long p)
{
	if (p <= 0 || p >= PID_LIMIT) {
		doubt("bad pid %ld in a children file", p);
		return;
	}
	if (bit_get(seen, (pid_t)p))
		return;
	bit_set(seen, (pid_t)p);
	if (push(out, (pid_t)p) < 0)
		doubt("out of memory");
}

/* ---- method 1: <proc>/<pid>/task/<tid>/children, breadth first -------- */

static void read_children_file(pid_t pid, pid_t tid, struct pids *out)
{
	char path[MAX_ROOT_LEN + 64], buf[4096];
	snprintf(path, sizeof path, "%s/%d/task/%d/children", proc_root, (int)pid, (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (vanished(err)) {
			/* Thread exited (fine), or the kernel has no children file
			 * (CONFIG_PROC_CHILDREN off): only the task dir tells them apart. */
			char dir[MAX_ROOT_LEN + 64];
			struct stat st;
			snprintf(dir, sizeof dir, "%s/%d/task/%d", proc_root, (int)pid, (int)tid);
			if (stat(dir, &st) < 0 && vanished(errno))
				return;
		}
		doubt("cannot open %s: %s", path, strerror(err));
		return;
	}
	long cur = -1; /* number being accumulated; may span two reads */
	for (;;) {
		ssize_t r = read(fd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			if (!vanished(errno) || !pid_gone(pid))
				doubt("cannot read %s: %s", path, strerror(errno));
			cur = -1;
			break;
		}
		if (r == 0)
			break;
		for (ssize_t i = 0; i < r; i++) {
			char c = buf[i];
			if (c >= '0' && c <= '9') {
				cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
				if (cur >= PID_LIMIT)
					goto malformed;
			} else if (c == ' ' || c == '\n') {
				if (cur >= 0)
					add_descendant(out, cur);
				cur = -1;
			} else {
				goto malformed;
			}
		}
	}
	if (cur >= 0)
		add_descendant(out, cur);
	close(fd);
	return;
malformed:
	doubt("malformed %s", path);
	close(fd);
}

static void scan_tasks(pid_t pid, struct pids *out)
{
	char path[MAX_ROOT_LEN + 32];
	snprintf(path, sizeof path, "%s/%d/task", proc_root, (int)pid);
	DIR *d = opendir(path);
	if (!d) {
		int err = errno;
		if (vanished(err) && pid != self_pid && pid_gone(pid))
			return;
		doubt("cannot open %s: %s", path, strerror(err));
		return;
	}
	int saw_self = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			int err = errno;
			if (err && !(vanished(err) && pid != self_pid && pid_gone(pid)))
				doubt("cannot list %s: %s", path, strerror(err));
			break;
		}
		pid_t tid = parse_pid(de->d_name);
		if (tid < 0)
			continue;
		if (tid == self_pid)
			saw_self = 1;
		read_children_file(pid, tid, out);
	}
	closedir(d);
	if (pid == self_pid && !saw_self)
		doubt("%s does not list the runner itself", path);
}

static int enum_by_children(struct pids *out)
{
	reset_doubt();
	out->n = 0;
	bit_set(seen, self_pid);
	scan_tasks(self_pid, out);
	for (size_t i = 0; i < out->n; i++) /* out grows while we walk it */
		scan_tasks(out->v[i], out);
	bit_clr(seen, self_pid);
	for (size_t i = 0; i < out->n; i++)
		bit_clr(seen, out->v[i]);
	return unsure ? -1 : 0;
}

/* Reads up to size - 1 bytes of an open file into buf (NUL-terminated) and
 * closes it: the length, or -1 with errno.  Every small procfs and cgroup
 * file is read through here. */
static ssize_t read_prefix(int fd, char *buf, size_t size)
{
	size_t len = 0;
	while (len < size - 1) {
		ssize_t r = read(fd, buf + len, size - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int err = errno;
			close(fd);
			errno = err;
			return -1;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	return (ssize_t)len;
}

/* ---- method 2: PPid: of every <proc>/<pid>/status ---------------------- */

/* 0 and *ppid set on success; 1 if the process is gone; -1 after doubt(). */
static int read_ppid(pid_t pid, pid_t *ppid)
{
	char path[MAX_ROOT_LEN + 32], buf[1024];
	snprintf(path, sizeof path, "%s/%d/status", proc_root, (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (vanished(err) && pid_gone(pid))
			return 1;
		doubt("cannot open %s: %s", path, strerror(err));
		return -1;
	}
	/* PPid: is within the first few hundred bytes; a prefix is enough. */
	ssize_t len = read_prefix(fd, buf, sizeof buf);
	if (len < 0) {
		int err = errno;
		if (vanished(err) && pid_gone(pid))
			return 1;
		doubt("cannot read %s: %s", path, strerror(err));
		return -1;
	}

	/* Name: is escaped by the kernel, so "\nPPid:" cannot be forged by it. */
	const char *p = strstr(buf, "\nPPid:");
	if (!p)
		goto malformed;
	p += 6;
	while (*p == ' ' || *p == '\t')
		p++;
	long v = 0;
	const char *digits = p;
	while (*p >= '0' && *p <= '9' && v < PID_LIMIT)
		v = v * 10 + (*p++ - '0');
	if (p == digits || *p != '\n' || v >= PID_LIMIT)
		goto malformed;
	*ppid = (pid_t)v;
	return 0;
malformed:
	doubt("malformed %s", path);
	return -1;
}

static int enum_by_ppid(struct pids *out)
{
	static struct pids pairs; /* pid, ppid, pid, ppid, ... */
	reset_doubt();
	out->n = 0;
	pairs.n = 0;

	DIR *d = opendir(proc_root);
	if (!d) {
		doubt("cannot open %s: %s", proc_root, strerror(errno));
		return -1;
	}
	int saw_self = 0;
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (!de) {
			if (errno)
				doubt("cannot list %s: %s", proc_root, strerror(errno));
			break;
		}
		pid_t pid = parse_pid(de->d_name), ppid;
		if (pid < 0 || read_ppid(pid, &ppid) != 0)
			continue;
		if (pid == self_pid)
			saw_self = 1;
		if (push(&pairs, pid) < 0 || push(&pairs, ppid) < 0) {
			doubt("out of memory");
			break;
		}
	}
	closedir(d);
	/* An empty or foreign directory would otherwise look like "no descendants". */
	if (!saw_self)
		doubt("runner (pid %d) not found in %s", (int)self_pid, proc_root);

	/* Propagate "descends from the runner" until a fixed point; one pass per
	 * tree level at most, which is cheap next to the procfs reads above. */
	bit_set(seen, self_pid);
	for (int changed = 1; changed;) {
		changed = 0;
		for (size_t i = 0; i + 1 < pairs.n; i += 2) {
			pid_t pid = pairs.v[i], ppid = pairs.v[i + 1];
			if (bit_get(seen, ppid) && !bit_get(seen, pid)) {
				bit_set(seen, pid);
				if (push(out, pid) < 0)
					doubt("out of memory");
				changed = 1;
			}
		}
	}
	bit_clr(seen, self_pid);
	for (size_t i = 0; i < out->n; i++)
		bit_clr(seen, out->v[i]);
	return unsure ? -1 : 0;
}

/* Fill 'out' with the runner's descendants.  Returns 0 if the answer is
 * authoritative.  On -1, 'out' still holds every pid that was observed, so
 * the caller can keep killing while it retries. */
static int enumerate(struct pids *out)
{
	static struct pids extra;
	char first[sizeof reason];

	if (!use_children_file)
		return enum_by_ppid(out);
	if (enum_by_children(out) == 0)
		return 0;
	memcpy(first, reason, sizeof first);
	int rc = enum_by_ppid(&extra);
	for (size_t i = 0; i < extra.n; i++)
		if (push(out, extra.v[i]) < 0)
			break;
	if (rc == 0)
		return 0;
	char second[sizeof reason];
	memcpy(second, reason, sizeof second);
	snprintf(reason, sizeof reason, "%.240s; ppid scan: %.240s", first, second);
	return -1;
}

/* ---- the command's cgroup (--cgroup) ----------------------------------- */

static int cg_write(const char *file, const char *text)
{
	char path[MAX_CG_LEN + 64];
	snprintf(path, sizeof path, "%s/%s", cg_dir, file);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = strlen(text);
	ssize_t w;
	do
		w = write(fd, text, len);
	while (w < 0 && errno == EINTR);
	int err = errno;
	close(fd);
	errno = err;
	return w == (ssize_t)len ? 0 : -1;
}

/* Reads a small cgroup file into buf; -1 with errno on failure. */
static int cg_read(const char *file, char *buf, size_t size)
{
	char path[MAX_CG_LEN + 64];
	snprintf(path, sizeof path, "%s/%s", cg_dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	return read_prefix(fd, buf, size) < 0 ? -1 : 0;
}

/* 1 if the group still has a live member, 0 if it is empty, -1 (after
 * doubt()) if that cannot be told. */
static int cg_populated(void)
{
	char buf[256];
	if (cg_read("cgroup.events", buf, sizeof buf) < 0) {
		doubt("cannot read %s/cgroup.events: %s", cg_dir, strerror(errno));
		return -1;
	}
	const char *p = strstr(buf, "populated ");
	if (!p || (p != buf && p[-1] != '\n') || (p[10] != '0' && p[10] != '1')) {
		doubt("malformed %s/cgroup.events", cg_dir);
		return -1;
	}
	return p[10] == '1';
}

/* SIGKILL every member of the group.  cgroup.kill does it atomically in the
 * kernel (5.14+); before that the group is frozen first so that no member
 * can fork while the member list is read and signalled. */
static void cg_kill_all(void)
{
	if (cg_kill) {
		if (cg_write("cgroup.kill", "1") < 0)
			doubt("cannot write %s/cgroup.kill: %s", cg_dir, strerror(errno));
		return;
	}
	static char buf[1 << 16];
	if (cg_write("cgroup.freeze", "1") < 0)
		doubt("cannot freeze %s: %s", cg_dir, strerror(errno));
	if (cg_read("cgroup.procs", buf, sizeof buf) < 0) {
		doubt("cannot read %s/cgroup.procs: %s", cg_dir, strerror(errno));
	} else {
		for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
			pid_t p = parse_pid(line);
			if (p > 0)
				kill(p, SIGKILL); /* frozen members still die on SIGKILL */
		}
	}
	cg_write("cgroup.freeze", "0");
}

/* SIGTERM (once each, as signal_one does) every member listed in
 * cgroup.procs: one read instead of a walk of every /proc entry, which
 * matters when a large tree competes with us for the CPU.  -1 after doubt(). */
static int cg_term_members(void)
{
	static char buf[1 << 20];
	if (cg_read("cgroup.procs", buf, sizeof buf) < 0) {
		doubt("cannot read %s/cgroup.procs: %s", cg_dir, strerror(errno));
		return -1;
	}
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		pid_t p = parse_pid(line);
		if (p > 0 && !bit_get(termed, p)) {
			bit_set(termed, p);
			setpriority(PRIO_PROCESS, (id_t)p, 19);
			kill(p, SIGTERM);
			kill(p, SIGCONT);
		}
	}
	return 0;
}

/* Creates the command's group (which must not exist yet, so two runners can
 * never share one); exits 125 before anything runs if it cannot. */
static void cg_create(long pids_max)
{
	char path[MAX_CG_LEN + 64];
	struct stat st;
	if (mkdir(cg_dir, 0755) < 0)
		unavailable("cannot create cgroup %s: %s", cg_dir, strerror(errno));
	cg_created = 1;
	snprintf(path, sizeof path, "%s/cgroup.kill", cg_dir);
	if (stat(path, &st) < 0) {
		cg_kill = 0;
		snprintf(path, sizeof path, "%s/cgroup.freeze", cg_dir);
		if (stat(path, &st) < 0) {
			rmdir(cg_dir);
			unavailable("cgroup %s has neither cgroup.kill nor cgroup.freeze", cg_dir);
		}
	}
	if (pids_max > 0) {
		char num[32];
		snprintf(num, sizeof num, "%ld", pids_max);
		if (cg_write("pids.max", num) < 0) {
			int err = errno;
			rmdir(cg_dir);
			unavailable("cannot set pids.max in %s: %s", cg_dir, strerror(err));
		}
	}
}

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#define LSM_CLONE_INTO_CGROUP 0x200000000ULL

/* The kernel's struct clone_args (v2, with 'cgroup'); spelled out because
 * musl's headers may not carry it. */
struct lsm_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
	uint64_t set_tid, set_tid_size, cgroup;
};

/* fork() straight into the group (Linux 5.7+): the child is a member from
 * birth, and no migration is needed (a write to cgroup.procs waits for an
 * RCU grace period, milliseconds per command).  -1 if the kernel cannot;
 * the caller then forks and the child joins by writing cgroup.procs. */
static pid_t fork_into_group(int dir_fd)
{
	struct lsm_clone_args a;
	memset(&a, 0, sizeof a);
	a.flags = LSM_CLONE_INTO_CGROUP;
	a.exit_signal = SIGCHLD;
	a.cgroup = (uint64_t)dir_fd;
	return (pid_t)syscall(SYS_clone3, &a, sizeof a);
}

/* Removes the (empty) group; EBUSY right after the last exit is retried. */
static void cg_remove(void)
{
	for (int i = 0; i < 100; i++) {
		if (rmdir(cg_dir) == 0 || errno == ENOENT)
			return;
		if (errno != EBUSY)
			break;
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	say("lsm-runner: note: cgroup %s not removed: %s", cg_dir, strerror(errno));
}

/* ---- process management ------------------------------------------------ */

#ifndef __WALL
#define __WALL 0x40000000
#endif

/* Reaps every child that has exited.  Returns 1 when the kernel says we have
 * no child at all (ECHILD), 0 when some remain.  __WALL: a child whatever its
 * exit signal, so "none" really means none. */
static int reap_all(void)
{
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			return errno == ECHILD;
		if (p == 0) /* children remain but none has exited */
			return 0;
		if (p == main_pid) {
			main_status = st;
			main_reaped = 1;
		}
	}
}

/* The authoritative short cut of cleanup: no child at all means no living
 * descendant.  We are a child subreaper, and the kernel re-parents a dying
 * process's children to us before that process becomes a zombie we could
 * reap, so every living descendant has a chain of parents (living, or zombies
 * not yet reaped) that ends in one of our children.  Beside that, the main
 * child's process group must be gone (a member outside our tree is
 * signalled by the full path) and the command's cgroup, if any, empty.
 * Returns 1 when all of that holds; 0 leaves the decision to the full path. */
static int tree_gone(pid_t pgid, int *group_gone)
{
	if (!reap_all())
		return 0;
	if (!*group_gone) {
		if (!(kill(-pgid, 0) < 0 && errno == ESRCH))
			return 0;
		*group_gone = 1;
	}
	if (cg_dir) {
		int pop = cg_populated();
		reset_doubt(); /* a doubt here is the full path's to find again */
		if (pop != 0)
			return 0;
	}
	return 1;
}

/* Sleep until SIGCHLD (blocked, so it stays pending) or the timeout. */
static void wait_chld(long ms)
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGCHLD);
	if (ms < 1)
		ms = 1;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	sigtimedwait(&s, NULL, &ts); /* timeout (EAGAIN) and EINTR are both fine */
}

static void signal_one(pid_t p, int sig)
{
	if (sig == SIGTERM) {
		if (bit_get(termed, p))
			return;
		bit_set(termed, p);
		/* A tree being stopped must not starve its stopper (or the
		 * server waiting for it): lowering a priority needs no privilege. */
		setpriority(PRIO_PROCESS, (id_t)p, 19);
		kill(p, SIGTERM);
		kill(p, SIGCONT); /* a stopped process could not act on SIGTERM */
	} else {
		kill(p, sig);
	}
}

/* Terminate every descendant: SIGTERM until the grace period is over, then
 * SIGKILL (and cgroup.kill), re-enumerating each round so late forks are
 * caught.  Returns 0 once two consecutive authoritative enumerations were
 * empty (one readdir is not atomic and can miss a just re-parented child)
 * and the command's cgroup, if any, reports no member.  After budget_ms it
 * returns -1, or with 'persist' says so on stderr and keeps going, slower,
 * until the tree is gone and then returns 1 (confirmed, but too late). */
static int cleanup(long grace_ms, long budget_ms, int persist, pid_t pgid)
{
	static struct pids found;
	long start = now_ms(), term_until = start + grace_ms;
	long give_up = start + budget_ms;
	int empties = 0, group_termed = 0, group_gone = 0, overdue = 0;

	/* The usual case, a command that left nothing behind, is settled by
	 * the kernel's word without a walk of procfs. */
	if (tree_gone(pgid, &group_gone))
		return 0;

	/* A large CPU-busy tree would otherwise starve the process that has to
	 * stop it.  Only root may raise its priority; elsewhere this fails, and
	 * the tree's own priority is lowered as it is signalled instead. */
	setpriority(PRIO_PROCESS, 0, -10);
	setpriority(PRIO_PGRP, (id_t)pgid, 19);

	for (;;) {
		if (tree_gone(pgid, &group_gone))
			return overdue ? 1 : 0;
		int populated = 0, pop = 0, sure;
		if (cg_dir)
			pop = cg_populated();
		if (pop == 1) {
			/* While the group has members, signal through the group and
			 * leave the procfs walk (costly for a big tree) for later:
			 * anything that left the group is still found by it once the
			 * group is empty. */
			populated = 1;
			sure = 1;
			found.n = 0;
			reset_doubt();
			if (now_ms() < term_until) {
				if (cg_term_members() < 0)
					sure = 0;
			}
		} else {
			sure = enumerate(&found) == 0 && pop == 0;
		}
		if (sure && found.n == 0 && !populated) {
			if (++empties >= 2)
				return overdue ? 1 : 0;
			/* The second scan only has to outlast a reparenting in
			 * flight; yielding is enough and costs no fixed delay. */
			sched_yield();
			continue;
		}
		empties = 0;
		long t = now_ms();
		int sig = t < term_until ? SIGTERM : SIGKILL;

		/* One write kills the whole group, including members forked
		 * after the enumeration above. */
		if (cg_dir && sig == SIGKILL)
			cg_kill_all();
		/* The main child's group may hold members that are not our
		 * descendants.  Stop using the pgid once it is gone, as the number
		 * could then be reused by an unrelated group. */
		if (!group_gone && (sig == SIGKILL || !group_termed)) {
			if (kill(-pgid, sig) < 0 && errno == ESRCH)
				group_gone = 1;
			else if (sig == SIGTERM)
				kill(-pgid, SIGCONT);
			group_termed = 1;
		}
		for (size_t i = 0; i < found.n; i++)
			signal_one(found.v[i], sig);

		if (t >= give_up && !overdue) {
			if (sure)
				snprintf(reason, sizeof reason, "%zu descendant(s)%s still alive after %ld ms",
					 found.n, populated ? " and a populated cgroup" : "", t - start);
			if (!persist)
				return -1;
			say("lsm-runner: containment cleanup unconfirmed: %s; still trying", reason);
			overdue = 1;
		}
		long nap = overdue ? PERSIST_TICK_MS : TICK_MS;
		if (sig == SIGTERM && term_until - t < nap)
			nap = term_until - t;
		wait_chld(nap);
	}
}

static void set_disposition(int sig, void (*handler)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(sig, &sa, NULL);
}

/* Every signal back to its default action (EINVAL for libc-reserved ones: fine). */
static void reset_dispositions(void)
{
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			set_disposition(s, SIG_DFL);
}

/* Set once the server has reset every disposition it inherited: a command's
 * child then only has to undo the runner's own SIGPIPE and SIGTTOU. */
static int dispositions_clean;

/* What the per-call runner and the server both are before they start anything:
 * signals they collect synchronously blocked (returned in *set), a subreaper
 * of what they start, and dead with `parent` (who must still be there once the
 * parent-death signal is armed).  A dead stderr reader must not kill us
 * mid-cleanup, and terminal handover (tcsetpgrp) must not stop us; a
 * command's child resets both. */
static void become_guardian(pid_t parent, sigset_t *set)
{
	set_disposition(SIGPIPE, SIG_IGN);
	set_disposition(SIGTTOU, SIG_IGN);
	/* Blocked before anything can send them: they stay pending and are
	 * collected synchronously (sigtimedwait, or the server's signalfd). */
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGQUIT);
	sigaddset(set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, set, NULL) < 0)
		unavailable("sigprocmask: %s", strerror(errno));
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		unavailable("PR_SET_CHILD_SUBREAPER: %s", strerror(errno));
	if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) < 0)
		unavailable("PR_SET_PDEATHSIG: %s", strerror(errno));
	if (getppid() != parent) /* it died before PDEATHSIG was armed */
		unavailable("parent exited during startup");
}

/* Set by a server once prove_enumeration() passed for it on /proc. */
static int enumeration_proven;

/* Decides how to enumerate and proves it works before anything runs (exit
 * 125 if it does not): a runner that could not find the command's
 * descendants could never confirm them gone.  Only falls back to the PPid
 * scan for good if the kernel lacks the children file; any other failure
 * keeps both methods in play so errors get reported. */
static void prove_enumeration(int force_ppid)
{
	if (force_ppid) {
		use_children_file = 0;
	} else {
		char path[MAX_ROOT_LEN + 64];
		struct stat st;
		snprintf(path, sizeof path, "%s/%d/task/%d", proc_root, (int)self_pid, (int)self_pid);
		if (stat(path, &st) == 0) {
			snprintf(path, sizeof path, "%s/%d/task/%d/children", proc_root, (int)self_pid,
				 (int)self_pid);
			if (stat(path, &st) < 0 && errno == ENOENT)
				use_children_file = 0;
		}
	}
	struct pids probe = { 0 };
	if (enumerate(&probe) != 0)
		unavailable("cannot enumerate processes: %s", reason);
	free(probe.v);
}

/* cg_procs: an open cgroup.procs of the command's group, or -1.  report: the
 * write end of a close-on-exec pipe on which a failed placement is told. */
static void run_child(char **cmd, int take_tty, int cg_procs, int report)
{
	/* Join the group before exec: nothing the command forks can exist
	 * before this write, so nothing can start outside the group. */
	if (cg_procs >= 0) {
		ssize_t w;
		do
			w = write(cg_procs, "0", 1);
		while (w < 0 && errno == EINTR);
		if (w != 1) {
			int err = errno;
			while (write(report, &err, sizeof err) < 0 && errno == EINTR)
				;
			_exit(EXIT_CONTAIN);
		}
		close(cg_procs);
	}
	setpriority(PRIO_PROCESS, 0, start_nice); /* undo our own boost */
	setpgid(0, 0);
	/* Our own process group would otherwise be "background" on a terminal
	 * and get SIGTTIN on read.  SIGTTOU is ignored (inherited), so this
	 * call cannot stop us. */
	if (take_tty)
		tcsetpgrp(STDIN_FILENO, getpid());
	if (dispositions_clean) { /* server mode: only our own two differ from the default */
		set_disposition(SIGPIPE, SIG_DFL);
		set_disposition(SIGTTOU, SIG_DFL);
	} else {
		reset_dispositions();
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);

	execvp(cmd[0], cmd);
	int err = errno;
	say("lsm-runner: cannot execute %s: %s", cmd[0], strerror(err));
	_exit(err == ENOENT ? 127 : 126);
}

static void unavailable(const char *fmt, ...)
{
	if (cg_dir && cg_created)
		rmdir(cg_dir); /* ours, and nothing ran in it yet */
	char buf[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	say("lsm-runner: containment unavailable: %s", buf);
	exit(EXIT_CONTAIN);
}

static void usage(const char *why)
{
	say("lsm-runner: %s", why);
	say("usage: lsm-runner [--grace-ms N] [--cleanup-ms N] [--timeout-ms N] [--persist] [--cgroup DIR [--pids-max N]] "
	    "[--proc-root DIR] [--force-ppid-scan] -- PROGRAM [ARGS...]");
	exit(EXIT_CONTAIN);
}

/* Value of option 'name' given as "name VALUE" or "name=VALUE", else NULL. */
static const char *opt_value(const char *name, int argc, char **argv, int *i)
{
	size_t len = strlen(name);
	if (strncmp(argv[*i], name, len) != 0)
		return NULL;
	if (argv[*i][len] == '=')
		return argv[*i] + len + 1;
	if (argv[*i][len] != '\0')
		return NULL;
	if (*i + 1 >= argc)
		usage("missing option value");
	return argv[++*i];
}

struct opts {
	long grace_ms, cleanup_ms, pids_max, timeout_ms;
	int force_ppid, persist;
};

/* Parses the options (setting cg_dir and proc_root too) and returns the
 * index of PROGRAM; exits 125 on bad usage. */
static int parse_options(int argc, char **argv, struct opts *o)
{
	long grace_ms = 2000, cleanup_ms = -1, pids_max = 0, timeout_ms = -1;
	int force_ppid = 0, persist = 0, i;
	const char *v;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if ((v = opt_value("--grace-ms", argc, argv, &i))) {
			char *end;
			errno = 0;
			grace_ms = strtol(v, &end, 10);
			if (errno || end == v || *end || grace_ms < 0 || grace_ms > MAX_GRACE_MS)
				usage("--grace-ms needs a number of milliseconds (0..3600000)");
		} else if ((v = opt_value("--cleanup-ms", argc, argv, &i))) {
			char *end;
			errno = 0;
			cleanup_ms = strtol(v, &end, 10);
			if (errno || end == v || *end || cleanup_ms < 0 || cleanup_ms > 2 * MAX_GRACE_MS)
				usage("--cleanup-ms needs a number of milliseconds (0..7200000)");
		} else if ((v = opt_value("--timeout-ms", argc, argv, &i))) {
			char *end;
			errno = 0;
			timeout_ms = strtol(v, &end, 10);
			if (errno || end == v || *end || timeout_ms < 0)
				usage("--timeout-ms needs a number of milliseconds");
		} else if ((v = opt_value("--pids-max", argc, argv, &i))) {
			char *end;
			errno = 0;
			pids_max = strtol(v, &end, 10);
			if (errno || end == v || *end || pids_max < 1 || pids_max > PID_LIMIT)
				usage("--pids-max needs a positive number of processes");
		} else if ((v = opt_value("--cgroup", argc, argv, &i))) {
			if (v[0] != '/' || strlen(v) > MAX_CG_LEN)
				usage("--cgroup needs an absolute directory path");
			cg_dir = v;
		} else if (strcmp(argv[i], "--persist") == 0) {
			persist = 1;
		} else if ((v = opt_value("--proc-root", argc, argv, &i))) {
			if (!*v || strlen(v) > MAX_ROOT_LEN)
				usage("--proc-root needs a directory path");
			proc_root = v;
		} else if (strcmp(argv[i], "--force-ppid-scan") == 0) {
			force_ppid = 1;
		} else {
			usage(argv[i][0] == '-' ? "unknown option" : "expected -- before PROGRAM");
		}
	}
	if (i + 1 >= argc)
		usage("missing -- PROGRAM");
	if (pids_max && !cg_dir)
		usage("--pids-max needs --cgroup");
	/* Total cleanup time: the grace plus a SIGKILL phase. */
	if (cleanup_ms < 0)
		cleanup_ms = grace_ms + EXTRA_CLEANUP_MS;
	if (cleanup_ms < grace_ms)
		usage("--cleanup-ms must not be shorter than --grace-ms");
	o->grace_ms = grace_ms;
	o->cleanup_ms = cleanup_ms;
	o->pids_max = pids_max;
	o->timeout_ms = timeout_ms;
	o->force_ppid = force_ppid;
	o->persist = persist;
	return i + 1;
}

/* Runs cmd under containment as this process's only job and returns the
 * exit status (see README.md).  parent: the process that asked for it, which
 * must still be there once the parent-death signal is armed. */
static int supervise(const struct opts *o, char **cmd, pid_t parent)
{
	long grace_ms = o->grace_ms, cleanup_ms = o->cleanup_ms, pids_max = o->pids_max;
	long timeout_ms = o->timeout_ms;
	int force_ppid = o->force_ppid, persist = o->persist;
	self_pid = getpid();

	sigset_t set;
	become_guardian(parent, &set);

	/* A server that proved enumeration on the real procfs at start needs no
	 * new proof from each supervisor it forks on that same procfs. */
	if (!(enumeration_proven && !force_ppid && strcmp(proc_root, "/proc") == 0))
		prove_enumeration(force_ppid);

	raise_priority();

	int cg_procs = -1, report[2] = { -1, -1 };
	if (cg_dir) {
		char path[MAX_CG_LEN + 64];
		cg_create(pids_max);
		snprintf(path, sizeof path, "%s/cgroup.procs", cg_dir);
		cg_procs = open(path, O_WRONLY | O_CLOEXEC);
		if (cg_procs < 0)
			unavailable("cannot open %s: %s", path, strerror(errno));
		if (pipe2(report, O_CLOEXEC) < 0)
			unavailable("pipe: %s", strerror(errno));
	}

	int take_tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
	pid_t child = -1;
	if (cg_dir) {
		int dir_fd = open(cg_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dir_fd >= 0) {
			child = fork_into_group(dir_fd);
			if (child == 0)
				run_child(cmd, take_tty, -1, report[1]); /* already a member */
			close(dir_fd);
		}
	}
	if (child < 0)
		child = fork();
	if (child < 0)
		unavailable("fork: %s", strerror(errno));
	if (child == 0)
		run_child(cmd, take_tty, cg_procs, report[1]);
	main_pid = child;
	if (cg_dir) {
		/* EOF: the child joined the group and exec'd (or failed to exec,
		 * still inside it).  An errno: it never ran the command. */
		int err = 0;
		ssize_t r;
		close(cg_procs);
		close(report[1]);
		do
			r = read(report[0], &err, sizeof err);
		while (r < 0 && errno == EINTR);
		close(report[0]);
		if (r == (ssize_t)sizeof err) {
			while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
				;
			unavailable("cannot join cgroup %s: %s", cg_dir, strerror(err));
		}
	}
	/* Also done in the child; doing it here too closes the window in which
	 * a kill(-pgid) during cleanup would miss a child not yet in its group. */
	setpgid(child, child);
	if (take_tty)
		tcsetpgrp(STDIN_FILENO, child);

	int runner_sig = 0;
	long stop_at = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
	while (!main_reaped) {
		int s;
		if (stop_at >= 0) {
			long left = stop_at - now_ms();
			if (left <= 0) {
				runner_sig = SIGTERM; /* as if the caller had sent it */
				break;
			}
			struct timespec ts = { left / 1000, (left % 1000) * 1000000L };
			s = sigtimedwait(&set, NULL, &ts);
		} else {
			s = sigwaitinfo(&set, NULL);
		}
		if (s < 0) /* timeout (EAGAIN, checked above) or EINTR after SIGSTOP/SIGCONT */
			continue;
		if (s == SIGCHLD)
			reap_all(); /* adopted orphans included */
		else {
			runner_sig = s;
			break;
		}
	}
	if (take_tty)
		tcsetpgrp(STDIN_FILENO, getpgrp());

	int cleaned = cleanup(grace_ms, cleanup_ms, persist, child);
	if (cleaned < 0) {
		say("lsm-runner: containment cleanup failed: %s", reason);
		return EXIT_CONTAIN;
	}
	if (cg_dir)
		cg_remove();
	if (cleaned > 0) {
		say("lsm-runner: containment cleanup confirmed late, after the budget");
		return EXIT_CONTAIN;
	}
	if (runner_sig)
		return 128 + runner_sig;
	if (WIFEXITED(main_status))
		return WEXITSTATUS(main_status);
	if (WIFSIGNALED(main_status))
		return 128 + WTERMSIG(main_status);
	return EXIT_CONTAIN;
}

/* ---- server mode (--serve) ---------------------------------------------
 *
 * One long-lived runner per server.  Requests arrive on stdin, replies leave
 * on stdout, both as frames: u32 length (of what follows, little endian),
 * one type byte, u32 command id, data.  For each 'R' request the server
 * forks a supervisor: a child that does exactly what a per-call runner does
 * (its own subreaper context, parent-death signal, cgroup, deadline,
 * cleanup, confirmation), so a command costs one fork+exec of the shell.
 * The server itself only relays output and exit statuses.  See README.md.
 */

#define FRAME_HEAD 9
#define MAX_REQUEST (64u << 20)
#define MAX_JOBS 4096
#define CHUNK 65536

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

extern char **environ;

struct job {
	uint32_t id;
	pid_t pid;  /* the supervisor; 0 once reaped */
	int fd[2];  /* read ends of its stdout and stderr; -1 once closed */
};

static struct job jobs[MAX_JOBS];
static size_t njobs;
static int server_gone; /* our stdout broke: nobody reads replies any more */

static void put_u32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Replies are gathered and written once per loop round: one wakeup of the
 * reader for an exit status and both ends of stream, not three.  Frames the
 * reader has no use for yet (a supervisor's pid, the end of a stream whose
 * supervisor is still exiting) wait for the next frame it needs, or for
 * HOLD_MS at most: the caller then wakes once per command's end, not twice. */
static unsigned char outbuf[4 * (FRAME_HEAD + CHUNK)];
static size_t outlen;
static int urgent; /* a frame in outbuf the reader is waiting for */
#define HOLD_MS 20

static void flush_replies(void)
{
	for (unsigned char *p = outbuf; outlen > 0 && !server_gone;) {
		ssize_t w = write(STDOUT_FILENO, p, outlen);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			server_gone = 1;
			break;
		}
		p += w;
		outlen -= (size_t)w;
	}
	outlen = 0;
	urgent = 0;
}

/* A frame that may wait in outbuf (see above). */
static void reply_later(char type, uint32_t id, const void *data, size_t len);

static void reply(char type, uint32_t id, const void *data, size_t len)
{
	reply_later(type, id, data, len);
	urgent = 1;
}

static void reply_later(char type, uint32_t id, const void *data, size_t len)
{
	if (server_gone || len > CHUNK)
		return;
	if (outlen + FRAME_HEAD + len > sizeof outbuf)
		flush_replies();
	unsigned char *out = outbuf + outlen;
	put_u32(out, (uint32_t)(len + 5));
	out[4] = (unsigned char)type;
	put_u32(out + 5, id);
	if (len)
		memcpy(out + FRAME_HEAD, data, len);
	outlen += FRAME_HEAD + len;
}

/* 'N': the command was not started, and why. */
static void refuse(uint32_t id, const char *why) { reply('N', id, why, strlen(why)); }

static struct job *job_by_id(uint32_t id)
{
	for (size_t i = 0; i < njobs; i++)
		if (jobs[i].id == id)
			return &jobs[i];
	return NULL;
}

static int live_jobs(void)
{
	int n = 0;
	for (size_t i = 0; i < njobs; i++)
		n += jobs[i].pid > 0;
	return n;
}

static void close_job_fds(struct job *j)
{
	for (int s = 0; s < 2; s++)
		if (j->fd[s] >= 0) {
			close(j->fd[s]);
			j->fd[s] = -1;
		}
}

/* A job is dropped once its supervisor is reaped and both pipes are closed. */
static void drop_if_done(struct job *j)
{
	if (j->pid == 0 && j->fd[0] < 0 && j->fd[1] < 0)
		*j = jobs[--njobs];
}

/* Everything but 0, 1 and 2: a supervisor must not keep the server's pipes
 * or another command's output open. */
static void close_from(int lo)
{
	if (syscall(SYS_close_range, (unsigned)lo, ~0u, 0) == 0)
		return;
	long max = sysconf(_SC_OPEN_MAX);
	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = lo; fd < max; fd++)
		close(fd);
}

/* A request's parts, pointing into its data: argv[0] is "lsm-runner". */
struct request {
	char *cwd;
	char **env;  /* NULL-terminated */
	int argc;
	char **argv; /* NULL-terminated */
	char **strs; /* what to free, with env */
};

static void free_request(struct request *rq)
{
	free(rq->strs);
	free(rq->env);
}

/* 'R' data is "CWD\0ENVC\0" then ENVC "NAME=value\0" entries, then the
 * per-call runner's arguments ("--timeout-ms\0N\0...--\0PROGRAM\0ARGS...\0").
 * NULL on success, else why the request cannot be served. */
static const char *parse_request(char *data, size_t len, struct request *rq)
{
	if (len == 0 || data[len - 1] != '\0')
		return "malformed request";
	size_t nstr = 0;
	for (size_t i = 0; i < len; i++)
		nstr += data[i] == '\0';
	char **strs = malloc((nstr + 2) * sizeof *strs);
	if (!strs)
		return "out of memory";
	size_t k = 0;
	for (char *p = data; p < data + len; p += strlen(p) + 1)
		strs[k++] = p;
	char *end;
	errno = 0;
	long envc = nstr >= 2 ? strtol(strs[1], &end, 10) : -1;
	if (errno || envc < 0 || (size_t)envc + 2 > nstr || *end) {
		free(strs);
		return "malformed request";
	}
	/* Shift the arguments up one to make room for argv[0]. */
	size_t argc0 = 2 + (size_t)envc;
	memmove(strs + argc0 + 1, strs + argc0, (nstr - argc0) * sizeof *strs);
	strs[argc0] = "lsm-runner";
	char **envp = malloc(((size_t)envc + 1) * sizeof *envp);
	if (!envp) {
		free(strs);
		return "out of memory";
	}
	memcpy(envp, strs + 2, (size_t)envc * sizeof *envp);
	envp[envc] = NULL;
	rq->cwd = strs[0];
	rq->env = envp;
	rq->argc = (int)(nstr - argc0 + 1);
	rq->argv = strs + argc0;
	rq->argv[rq->argc] = NULL;
	rq->strs = strs;
	return NULL;
}

/* In the forked supervisor, stdio in place: take the request's environment
 * and directory, then run the command exactly as a per-call runner would. */
static void run_request(struct request *rq, pid_t server)
{
	environ = rq->env;
	if (chdir(rq->cwd) < 0) {
		say("lsm-runner: no working directory %s: %s", rq->cwd, strerror(errno));
		_exit(EXIT_CONTAIN);
	}
	struct opts o;
	int at = parse_options(rq->argc, rq->argv, &o);
	_exit(supervise(&o, rq->argv + at, server));
}

/* /dev/null on stdin, the pipes on stdout and stderr, and req (if >= 0) on
 * descriptor 3; everything else closed, so a supervisor holds neither the
 * server's pipes nor another command's output. */
static void supervisor_stdio(int out_w, int err_w, int req)
{
	/* Out of the way of 0..3 first, whatever numbers the pipes got. */
	if (req >= 0 && (req = fcntl(req, F_DUPFD_CLOEXEC, 10)) < 0)
		_exit(EXIT_CONTAIN);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || dup2(null, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 ||
	    dup2(err_w, STDERR_FILENO) < 0 || (req >= 0 && dup2(req, 3) < 0))
		_exit(EXIT_CONTAIN);
	close_from(req >= 0 ? 4 : 3);
}

/* Reads exactly len bytes; 0, or -1 on error or early end of file. */
static int read_full(int fd, void *buf, size_t len)
{
	for (char *p = buf; len > 0;) {
		ssize_t r = read(fd, p, len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	for (const char *p = buf; len > 0;) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* ---- the waiting supervisor ---------------------------------------------
 *
 * The fork of a supervisor (and its own setup) would sit between a request
 * and its command's start.  So the server keeps one supervisor forked ahead,
 * waiting on a pipe of its own for the request (u32 length, then the 'R'
 * data), and forks the next one after the round in which it handed one over.
 * A waiting supervisor has started nothing: it is killed outright if the
 * server stops, and it exits by itself when its request pipe closes first.
 */

static struct {
	pid_t pid;  /* 0: none waiting */
	int req;    /* write end of its request pipe */
	int fd[2];  /* read ends of its stdout and stderr */
} waiting = { 0, -1, { -1, -1 } };

static void waiting_child(int out_w, int err_w, int req_r, pid_t server)
{
	supervisor_stdio(out_w, err_w, req_r);
	uint32_t len;
	char *data;
	if (read_full(3, &len, sizeof len) < 0 || len == 0 || len > MAX_REQUEST || !(data = malloc(len)) ||
	    read_full(3, data, len) < 0)
		_exit(EXIT_CONTAIN); /* no request came: the server is gone or gave up on us */
	close(3);
	struct request rq;
	const char *why = parse_request(data, len, &rq);
	if (why) { /* the server checked it already */
		say("lsm-runner: %s", why);
		_exit(EXIT_CONTAIN);
	}
	run_request(&rq, server);
}

/* Forks the next waiting supervisor; on failure there is none, and requests
 * fork their own supervisor as they come. */
static void fork_waiting(void)
{
	int out[2], err[2], req[2];
	if (pipe2(out, O_CLOEXEC) < 0)
		return;
	if (pipe2(err, O_CLOEXEC) < 0)
		goto close_out;
	if (pipe2(req, O_CLOEXEC) < 0)
		goto close_err;
	pid_t server = getpid();
	pid_t pid = fork();
	if (pid == 0)
		waiting_child(out[1], err[1], req[0], server);
	close(out[1]);
	close(err[1]);
	close(req[0]);
	if (pid < 0) {
		close(out[0]);
		close(err[0]);
		close(req[1]);
		return;
	}
	waiting.pid = pid;
	waiting.req = req[1];
	waiting.fd[0] = out[0];
	waiting.fd[1] = err[0];
	return;
close_err:
	close(err[0]);
	close(err[1]);
close_out:
	close(out[0]);
	close(out[1]);
}

/* Lets go of the waiting supervisor (its pipes closed; killed unless it took
 * a request).  Reaped like any other child. */
static void drop_waiting(int kill_it)
{
	if (waiting.pid > 0 && kill_it)
		kill(waiting.pid, SIGKILL);
	if (waiting.req >= 0)
		close(waiting.req);
	waiting.pid = 0;
	waiting.req = -1;
	waiting.fd[0] = waiting.fd[1] = -1;
}

/* Gives the request to the waiting supervisor; 0 if it took it. */
static int hand_over(uint32_t id, const char *data, size_t len)
{
	unsigned char head[4];
	put_u32(head, (uint32_t)len);
	if (waiting.pid <= 0)
		return -1;
	if (write_full(waiting.req, head, 4) < 0 || write_full(waiting.req, data, len) < 0) {
		/* It died waiting (killed from outside): nothing ran. */
		close(waiting.fd[0]);
		close(waiting.fd[1]);
		drop_waiting(1);
		return -1;
	}
	jobs[njobs++] = (struct job){ .id = id, .pid = waiting.pid, .fd = { waiting.fd[0], waiting.fd[1] } };
	drop_waiting(0);
	return 0;
}

static void start_job(uint32_t id, char *data, size_t len)
{
	if (njobs >= MAX_JOBS) {
		refuse(id, "too many commands at once");
		return;
	}
	if (job_by_id(id)) {
		refuse(id, "malformed request");
		return;
	}
	struct request rq;
	const char *why = parse_request(data, len, &rq);
	if (why) {
		refuse(id, why);
		return;
	}
	unsigned char p[4];
	if (hand_over(id, data, len) == 0) {
		free_request(&rq);
		put_u32(p, (uint32_t)jobs[njobs - 1].pid);
		reply_later('S', id, p, 4);
		return;
	}

	int out[2], err[2];
	if (pipe2(out, O_CLOEXEC) < 0) {
		free_request(&rq);
		refuse(id, "pipe failed");
		return;
	}
	if (pipe2(err, O_CLOEXEC) < 0) {
		close(out[0]);
		close(out[1]);
		free_request(&rq);
		refuse(id, "pipe failed");
		return;
	}
	pid_t server = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		supervisor_stdio(out[1], err[1], -1);
		run_request(&rq, server);
	}
	free_request(&rq);
	close(out[1]);
	close(err[1]);
	if (pid < 0) {
		close(out[0]);
		close(err[0]);
		refuse(id, "fork failed");
		return;
	}
	jobs[njobs++] = (struct job){ .id = id, .pid = pid, .fd = { out[0], err[0] } };
	put_u32(p, (uint32_t)pid);
	reply_later('S', id, p, 4);
}

/* Processes re-parented to the server escaped a supervisor that died before
 * it confirmed its tree gone (killed from outside): nobody else will stop
 * them, so every child that is not a supervisor is killed.  Each one that
 * dies re-parents its own children here and brings us back. */
static void kill_strays(void)
{
	static char buf[1 << 16];
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)self_pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read_prefix(fd, buf, sizeof buf) < 0)
		return;
	for (char *tok = strtok(buf, " \n"); tok; tok = strtok(NULL, " \n")) {
		pid_t p = parse_pid(tok);
		int mine = p == waiting.pid;
		for (size_t i = 0; i < njobs && !mine; i++)
			mine = jobs[i].pid == p;
		if (p > 0 && !mine)
			kill(p, SIGKILL);
	}
}

static void reap_jobs(void)
{
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p < 0 && errno == EINTR)
			continue;
		if (p <= 0)
			break;
		if (p == waiting.pid) { /* died waiting (killed from outside): nothing ran */
			close(waiting.fd[0]);
			close(waiting.fd[1]);
			drop_waiting(0);
			continue;
		}
		for (size_t i = 0; i < njobs; i++) {
			if (jobs[i].pid != p)
				continue;
			unsigned char b[4];
			put_u32(b, (uint32_t)st);
			jobs[i].pid = 0;
			reply('X', jobs[i].id, b, 4);
			drop_if_done(&jobs[i]);
			break;
		}
	}
	kill_strays();
}

/* Relays one read from a job's pipe: data as 'O'/'E', end of stream as 'C'. */
static void relay(struct job *j, int s)
{
	static char buf[CHUNK];
	ssize_t r;
	do
		r = read(j->fd[s], buf, sizeof buf);
	while (r < 0 && errno == EINTR);
	if (r > 0) {
		reply(s ? 'E' : 'O', j->id, buf, (size_t)r);
		return;
	}
	close(j->fd[s]);
	j->fd[s] = -1;
	unsigned char which = (unsigned char)s;
	/* The supervisor holds both pipes to its end, so the end of a stream
	 * means it is exiting: its exit status follows at once. */
	if (j->pid > 0)
		reply_later('C', j->id, &which, 1);
	else
		reply('C', j->id, &which, 1);
	drop_if_done(j);
}

/* Handles every complete frame at the start of buf; returns the bytes used,
 * or -1 on a malformed frame. */
static ssize_t handle_requests(unsigned char *buf, size_t len)
{
	size_t used = 0;
	while (len - used >= FRAME_HEAD) {
		uint32_t flen = get_u32(buf + used);
		if (flen < 5 || flen > MAX_REQUEST)
			return -1;
		if (len - used < 4 + (size_t)flen)
			break;
		char type = (char)buf[used + 4];
		uint32_t id = get_u32(buf + used + 5);
		char *data = (char *)buf + used + FRAME_HEAD;
		size_t dlen = flen - 5;
		struct job *j = job_by_id(id);
		if (type == 'R') {
			start_job(id, data, dlen);
		} else if (type == 'K') { /* stop it: the supervisor cleans up as on SIGTERM */
			if (j && j->pid > 0)
				kill(j->pid, SIGTERM);
		} else if (type == 'F') { /* the caller stopped reading its output */
			if (j) {
				close_job_fds(j);
				drop_if_done(j);
			}
		} else {
			return -1;
		}
		used += 4 + (size_t)flen;
	}
	return (ssize_t)used;
}

static int serve(void)
{
	pid_t parent = getppid();
	self_pid = getpid();
	reset_dispositions();
	dispositions_clean = 1;
	sigset_t set;
	become_guardian(parent, &set);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC);
	if (sfd < 0)
		unavailable("signalfd: %s", strerror(errno));
	prove_enumeration(0);
	enumeration_proven = 1;
	raise_priority();
	reply('H', 0, "1", 1);
	flush_replies();
	fork_waiting();

	static struct pollfd pfd[2 + 2 * MAX_JOBS];
	static unsigned char in[FRAME_HEAD + MAX_REQUEST];
	size_t inlen = 0;
	int stopping = 0, stop_sig = 0;
	long held_since = 0; /* when the oldest frame waiting in outbuf was queued */
	for (;;) {
		if (stopping && live_jobs() == 0)
			break;
		nfds_t n = 0;
		pfd[n++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = stopping ? -1 : STDIN_FILENO, .events = POLLIN };
		for (size_t i = 0; i < njobs; i++)
			for (int s = 0; s < 2; s++)
				pfd[n++] = (struct pollfd){ .fd = jobs[i].fd[s], .events = POLLIN };
		if (poll(pfd, n, outlen ? HOLD_MS : -1) < 0) {
			if (errno == EINTR)
				continue;
			unavailable("poll: %s", strerror(errno));
		}
		if (pfd[0].revents) {
			struct signalfd_siginfo si;
			int chld = 0;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
				if (si.ssi_signo == SIGCHLD) {
					chld = 1;
				} else if (!stopping) {
					stopping = 1;
					stop_sig = (int)si.ssi_signo;
				}
				struct pollfd more = { .fd = sfd, .events = POLLIN };
				if (poll(&more, 1, 0) <= 0)
					break;
			}
			if (chld)
				reap_jobs();
		}
		/* Output first: the jobs array may shrink below, which moves entries. */
		size_t seen_jobs = (n - 2) / 2;
		for (size_t i = seen_jobs; i-- > 0;) {
			if (i >= njobs)
				continue;
			for (int s = 0; s < 2; s++) {
				struct pollfd *p = &pfd[2 + 2 * i + s];
				if (p->fd >= 0 && p->fd == jobs[i].fd[s] && p->revents)
					relay(&jobs[i], s);
			}
		}
		if (!stopping && pfd[1].revents) {
			ssize_t r = read(STDIN_FILENO, in + inlen, sizeof in - inlen);
			if (r < 0 && errno == EINTR) {
				/* read again next round */
			} else if (r <= 0) {
				stopping = 1; /* the server closed our stdin: it is gone */
			} else {
				inlen += (size_t)r;
				ssize_t used = handle_requests(in, inlen);
				if (used < 0) {
					say("lsm-runner: malformed request from the server; stopping");
					stopping = 1;
					inlen = 0;
				} else {
					memmove(in, in + used, inlen - (size_t)used);
					inlen -= (size_t)used;
				}
			}
		}
		if (!outlen)
			held_since = 0;
		else if (!held_since)
			held_since = now_ms();
		if (outlen && (urgent || stopping || now_ms() - held_since >= HOLD_MS)) {
			flush_replies();
			held_since = 0;
		}
		if (server_gone)
			stopping = 1;
		if (stopping && waiting.pid > 0) {
			close(waiting.fd[0]);
			close(waiting.fd[1]);
			drop_waiting(1);
		} else if (!stopping && waiting.pid == 0 && njobs < MAX_JOBS) {
			fork_waiting(); /* after this round's replies went out */
		}
		if (stopping) /* every supervisor stops and confirms its own tree */
			for (size_t i = 0; i < njobs; i++)
				if (jobs[i].pid > 0)
					kill(jobs[i].pid, SIGTERM);
	}
	return stop_sig ? 128 + stop_sig : 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--serve") == 0)
		return serve();
	pid_t parent = getppid();
	struct opts o;
	int at = parse_options(argc, argv, &o);
	return supervise(&o, argv + at, parent);
}
