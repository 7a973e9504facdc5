/*
 * lsm-runner: the command's own cgroup v2 group (--cgroup).
 * See lsm-runner.h for how the parts fit, and README.md for what they do.
 */
#include "lsm-runner.h"

/* The command's own cgroup (--cgroup), or NULL.  cg_kill: the kernel has
 * cgroup.kill; otherwise cleanup freezes the group and SIGKILLs its members. */
const char *cg_dir;
static int cg_kill = 1;
int cg_created; /* only a group we made may be removed on failure */

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
int cg_populated(void)
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
void cg_kill_all(void)
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
int cg_term_members(void)
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

/* Members back to nice 0 for the SIGKILL phase (a killed process still needs
 * the CPU to exit).  Best effort: only root may raise a priority. */
void cg_restore_priority(void)
{
	static char buf[1 << 20];
	if (cg_read("cgroup.procs", buf, sizeof buf) < 0)
		return;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		pid_t p = parse_pid(line);
		if (p > 0)
			setpriority(PRIO_PROCESS, (id_t)p, 0);
	}
}

/* Creates the command's group (which must not exist yet, so two runners can
 * never share one); exits 125 before anything runs if it cannot. */
void cg_create(long pids_max)
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
pid_t fork_into_group(int dir_fd)
{
	struct lsm_clone_args a;
	memset(&a, 0, sizeof a);
	a.flags = LSM_CLONE_INTO_CGROUP;
	a.exit_signal = SIGCHLD;
	a.cgroup = (uint64_t)dir_fd;
	return (pid_t)syscall(SYS_clone3, &a, sizeof a);
}

/* Removes the (empty) group; EBUSY right after the last exit is retried. */
void cg_remove(void)
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
