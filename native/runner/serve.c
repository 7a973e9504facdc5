/*
 * lsm-runner: the long-lived server (--serve).
 * See lsm-runner.h for how the parts fit, and README.md for what they do.
 */
#include "lsm-runner.h"

/* ---- server mode (--serve) ---------------------------------------------
 *
 * One long-lived runner per server.  Requests arrive on stdin, replies leave
 * on stdout, both as frames: u32 length (of what follows, little endian),
 * one type byte, u32 command id, data.  Each 'R' request goes to a
 * supervisor, forked ahead of it (see "the waiting supervisor" below): a
 * child that does exactly what a per-call runner does (its own subreaper
 * context, parent-death signal, cgroup, deadline, cleanup, confirmation), so
 * a command costs one fork+exec of the shell once its request is in.
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
 * reader for an exit status and both ends of stream, not three.  Frames that
 * can wait (a supervisor's pid, output, the end of a stream whose supervisor
 * is still exiting) are held for the next frame that cannot (an exit status,
 * a refusal), for HOLD_MS at most, or until the buffer is full: a short
 * command then costs the caller one wakeup, and a chatty one a wakeup per
 * HOLD_MS or per buffer, not one per chunk. */
static unsigned char outbuf[4 * (FRAME_HEAD + CHUNK)];
static size_t outlen;
static int urgent; /* a frame in outbuf the reader is waiting for */
#define HOLD_MS 20
/* How long after a hand-over the next waiting supervisor is forked while the
 * command still runs (at once when it has ended). */
#define FORK_AHEAD_MS 3

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
		reply_later(s ? 'E' : 'O', j->id, buf, (size_t)r);
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

int serve(void)
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
	long handed_at = 0;  /* when the waiting supervisor was used up, until the next is forked */
	for (;;) {
		if (stopping && live_jobs() == 0)
			break;
		nfds_t n = 0;
		pfd[n++] = (struct pollfd){ .fd = sfd, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = stopping ? -1 : STDIN_FILENO, .events = POLLIN };
		for (size_t i = 0; i < njobs; i++)
			for (int s = 0; s < 2; s++)
				pfd[n++] = (struct pollfd){ .fd = jobs[i].fd[s], .events = POLLIN };
		long hold = -1; /* held frames go out HOLD_MS after the first of them was queued */
		if (outlen) {
			hold = HOLD_MS - (now_ms() - held_since);
			if (hold < 1)
				hold = 1;
		}
		if (handed_at && !stopping) { /* wake to fork the next waiting supervisor (below) */
			long left = FORK_AHEAD_MS - (now_ms() - handed_at);
			if (left < 1)
				left = 1;
			if (hold < 0 || left < hold)
				hold = left;
		}
		if (poll(pfd, n, (int)hold) < 0) {
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
					reply('Q', 0, "signal", 6);
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
				reply('Q', 0, "request pipe closed", 19);
			} else {
				inlen += (size_t)r;
				ssize_t used = handle_requests(in, inlen);
				if (used < 0) {
					say("lsm-runner: malformed request from the server; stopping");
					/* Before the exit statuses of the commands it stops: the
					 * caller must not read those as the commands' own. */
					reply('Q', 0, "malformed request", 17);
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
			/* Not while the command just handed over is starting: on a
			 * machine with few cores the fork and the new child's setup
			 * would compete with it.  Once nothing runs (its exit status
			 * went out above), or FORK_AHEAD_MS after the hand-over for a
			 * longer command. */
			if (!handed_at)
				handed_at = now_ms();
			if (live_jobs() == 0 || now_ms() - handed_at >= FORK_AHEAD_MS) {
				fork_waiting();
				handed_at = 0;
			}
		}
		if (stopping) /* every supervisor stops and confirms its own tree */
			for (size_t i = 0; i < njobs; i++)
				if (jobs[i].pid > 0)
					kill(jobs[i].pid, SIGTERM);
	}
	return stop_sig ? 128 + stop_sig : 0;
}
