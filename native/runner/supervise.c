/*
 * lsm-runner: running one command under containment and stopping its tree: the
 * per-call runner, and each supervisor the server forks.
 * See lsm-runner.h for how the parts fit, and README.md for what they do.
 */
#include "lsm-runner.h"

static pid_t main_pid = -1;
static int main_status, main_reaped;

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
		/* Dying takes CPU too: give back the priority SIGTERM took. */
		if (bit_get(termed, p)) {
			bit_clr(termed, p);
			setpriority(PRIO_PROCESS, (id_t)p, 0);
		}
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
	int empties = 0, group_termed = 0, group_gone = 0, overdue = 0, reniced = 0;

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

		/* A killed process still needs the CPU to exit, and many of a
		 * tree's members wait in the kernel for one another (a shared file
		 * position, say): at nice 19 on a busy machine each hand-over took
		 * up to a second and the tree outlived the budget by minutes.  Once
		 * nothing can spin any more, the group gets its priority back
		 * (only root can; elsewhere this fails and nothing changes). */
		if (sig == SIGKILL && !reniced) {
			if (!group_gone)
				setpriority(PRIO_PGRP, (id_t)pgid, 0);
			if (cg_dir)
				cg_restore_priority();
			reniced = 1;
		}
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
void reset_dispositions(void)
{
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			set_disposition(s, SIG_DFL);
}

/* Set once the server has reset every disposition it inherited: a command's
 * child then only has to undo the runner's own SIGPIPE and SIGTTOU. */
int dispositions_clean;

/* What the per-call runner and the server both are before they start anything:
 * signals they collect synchronously blocked (returned in *set), a subreaper
 * of what they start, and dead with `parent` (who must still be there once the
 * parent-death signal is armed).  A dead stderr reader must not kill us
 * mid-cleanup, and terminal handover (tcsetpgrp) must not stop us; a
 * command's child resets both. */
void become_guardian(pid_t parent, sigset_t *set)
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

/* cg_procs: an open cgroup.procs of the command's group, or -1.  report: the
 * write end of a close-on-exec pipe on which a failed placement is told. */
static int program_pdeathsig;

static void run_child(char **cmd, int take_tty, int cg_procs, int report)
{
	/* --program-pdeathsig: PROGRAM itself ends with a SIGKILLed runner (nobody
	 * would clean up then).  Armed before exec, which keeps it (not setuid);
	 * a runner already gone before it was armed means: never run at all. */
	if (program_pdeathsig) {
		if (prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0) < 0 || getppid() != self_pid)
			_exit(EXIT_CONTAIN);
	}
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

static void usage(const char *why)
{
	say("lsm-runner: %s", why);
	say("usage: lsm-runner [--grace-ms N] [--cleanup-ms N] [--timeout-ms N] [--persist] [--cgroup DIR [--pids-max N]] "
	    "[--proc-root DIR] [--force-ppid-scan] [--program-pdeathsig] -- PROGRAM [ARGS...]");
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

/* Parses the options (setting cg_dir and proc_root too) and returns the
 * index of PROGRAM; exits 125 on bad usage. */
int parse_options(int argc, char **argv, struct opts *o)
{
	long grace_ms = 2000, cleanup_ms = -1, pids_max = 0, timeout_ms = -1;
	int force_ppid = 0, persist = 0, pdeathsig = 0, i;
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
		} else if (strcmp(argv[i], "--program-pdeathsig") == 0) {
			pdeathsig = 1;
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
	o->program_pdeathsig = pdeathsig;
	return i + 1;
}

/* Runs cmd under containment as this process's only job and returns the
 * exit status (see README.md).  parent: the process that asked for it, which
 * must still be there once the parent-death signal is armed. */
int supervise(const struct opts *o, char **cmd, pid_t parent)
{
	long grace_ms = o->grace_ms, cleanup_ms = o->cleanup_ms, pids_max = o->pids_max;
	long timeout_ms = o->timeout_ms;
	int force_ppid = o->force_ppid, persist = o->persist;
	self_pid = getpid();
	program_pdeathsig = o->program_pdeathsig;

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
