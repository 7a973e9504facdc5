/*
 * lsm-runner: finding the runner's descendants in procfs: the children files,
 * or the PPid scan.
 * See lsm-runner.h for how the parts fit, and README.md for what they do.
 */
#include "lsm-runner.h"

static int use_children_file = 1;

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
int enumerate(struct pids *out)
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

/* Set by a server once prove_enumeration() passed for it on /proc. */
int enumeration_proven;

/* Decides how to enumerate and proves it works before anything runs (exit
 * 125 if it does not): a runner that could not find the command's
 * descendants could never confirm them gone.  Only falls back to the PPid
 * scan for good if the kernel lacks the children file; any other failure
 * keeps both methods in play so errors get reported. */
void prove_enumeration(int force_ppid)
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
