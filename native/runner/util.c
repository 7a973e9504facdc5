/*
 * lsm-runner: messages, doubt, and the small helpers every part uses.
 * See lsm-runner.h for how the parts fit, and README.md for what they do.
 */
#include "lsm-runner.h"

const char *proc_root = "/proc";
pid_t self_pid;
int start_nice, start_nice_known;
int unsure;
char reason[512];
unsigned char seen[PID_LIMIT / 8], termed[PID_LIMIT / 8];

/* The runner mostly sleeps; a higher priority (root only) lets it act at
 * once when the deadline comes, even if the command keeps every CPU busy. */
void raise_priority(void)
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

void say(const char *fmt, ...)
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

void doubt(const char *fmt, ...)
{
	if (!unsure) { /* keep the first reason; later ones are usually fallout */
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(reason, sizeof reason, fmt, ap);
		va_end(ap);
	}
	unsure = 1;
}

void reset_doubt(void)
{
	unsure = 0;
	reason[0] = '\0';
}

long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int push(struct pids *s, pid_t p)
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
pid_t parse_pid(const char *s)
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

/* Reads up to size - 1 bytes of an open file into buf (NUL-terminated) and
 * closes it: the length, or -1 with errno.  Every small procfs and cgroup
 * file is read through here. */
ssize_t read_prefix(int fd, char *buf, size_t size)
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

void unavailable(const char *fmt, ...)
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
