/*
 * lsm-runner: run one command and make sure that, once it is over (or the
 * runner is told to stop), nothing it started is left running.
 *
 *   lsm-runner [--grace-ms N] [--cleanup-ms N] [--persist] [--cgroup DIR [--pids-max N]]
 *              [--proc-root DIR] [--force-ppid-scan] [--program-pdeathsig] -- PROGRAM [ARGS...]
 *
 * The runner marks itself a child subreaper, so every orphan in the tree
 * (setsid, double fork, nohup...) is re-parented to it rather than to init.
 * "Everything it started" is therefore exactly "every descendant of the
 * runner", which it enumerates from procfs, signals, and reaps until an
 * authoritative enumeration comes back empty.  Whenever that cannot be
 * established it fails closed with exit status 125.  With --cgroup the
 * command also runs in its own cgroup v2 group, and cleanup ends with
 * cgroup.kill, which no fork can outrun.  See README.md.
 *
 * The parts: util.c (messages, doubt, small helpers, the common globals),
 * enumerate.c (finding the descendants in procfs), cgroup.c (the command's
 * cgroup), supervise.c (running one command and its cleanup: the per-call
 * runner, and every supervisor of the server), serve.c (the long-lived
 * server, --serve) and main.c.
 */
#ifndef LSM_RUNNER_H
#define LSM_RUNNER_H

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

/* util.c */
extern const char *proc_root;
extern pid_t self_pid;
/* The nice value we started with; the command gets it back before exec.
 * In server mode it is taken once, before the server raises its own. */
extern int start_nice, start_nice_known;
/* Set by doubt(): the current enumeration is not authoritative, and why. */
extern int unsure;
extern char reason[512];
/* One bit per pid.  'seen' is scratch space for a single enumeration;
 * 'termed' remembers who already got SIGTERM so handlers only run once. */
extern unsigned char seen[PID_LIMIT / 8], termed[PID_LIMIT / 8];

static inline int bit_get(const unsigned char *m, pid_t p) { return (m[p >> 3] >> (p & 7)) & 1; }
static inline void bit_set(unsigned char *m, pid_t p) { m[p >> 3] |= (unsigned char)(1u << (p & 7)); }
static inline void bit_clr(unsigned char *m, pid_t p) { m[p >> 3] &= (unsigned char)~(1u << (p & 7)); }

void raise_priority(void);
void say(const char *fmt, ...);
void doubt(const char *fmt, ...);
void reset_doubt(void);
long now_ms(void);
int push(struct pids *s, pid_t p);
pid_t parse_pid(const char *s);
ssize_t read_prefix(int fd, char *buf, size_t size);
void unavailable(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* enumerate.c */
extern int enumeration_proven;
int enumerate(struct pids *out);
void prove_enumeration(int force_ppid);

/* cgroup.c: the command's own cgroup (--cgroup), or NULL */
extern const char *cg_dir;
extern int cg_created;
int cg_populated(void);
void cg_kill_all(void);
int cg_term_members(void);
void cg_restore_priority(void);
void cg_create(long pids_max);
pid_t fork_into_group(int dir_fd);
void cg_remove(void);

/* supervise.c */
struct opts {
	long grace_ms, cleanup_ms, pids_max, timeout_ms;
	int force_ppid, persist, program_pdeathsig;
};
extern int dispositions_clean;
void reset_dispositions(void);
void become_guardian(pid_t parent, sigset_t *set);
int parse_options(int argc, char **argv, struct opts *o);
int supervise(const struct opts *o, char **cmd, pid_t parent);

/* serve.c */
int serve(void);

#endif
