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
 */
#include "lsm-runner.h"

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--serve") == 0)
		return serve();
	pid_t parent = getppid();
	struct opts o;
	int at = parse_options(argc, argv, &o);
	return supervise(&o, argv + at, parent);
}
