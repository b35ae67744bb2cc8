/* SPDX-License-Identifier: MIT */
/*
 * in_child.h - how the preload tests run a case that must abort (a double
 * free, foreign memory): in a child, its stderr kept, one "ok"/"FAIL" line
 * per case.
 */
#ifndef RDMALLOC_TEST_IN_CHILD_H
#define RDMALLOC_TEST_IN_CHILD_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Run @fn(@arg) in a child, which exits 0 if it returns; what it writes to
 * stderr (the first @len - 1 bytes) in @out.  Its wait status, or -1. */
static inline int in_child(void (*fn)(void *), void *arg, char *out, size_t len)
{
	int pfd[2];
	out[0] = '\0';
	if (pipe(pfd))
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	if (pid == 0) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		fn(arg);
		_exit(0);
	}
	close(pfd[1]);
	size_t got = 0;
	ssize_t n;
	char rest[256];
	/* Past @len - 1 bytes the rest is read and dropped: closed early, the
	 * pipe would kill a child still writing with SIGPIPE, hiding how it
	 * ended. */
	for (;;) {
		int full = got == len - 1;
		n = full ? read(pfd[0], rest, sizeof(rest)) : read(pfd[0], out + got, len - 1 - got);
		if (n <= 0)
			break;
		if (!full)
			got += (size_t)n;
	}
	out[got] = '\0';
	close(pfd[0]);
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return st;
}

/* Status @st is an abort, and @out says @a and @b (NULL: anything). */
static inline int aborted_saying(int st, const char *out, const char *a, const char *b)
{
	return st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && (!a || strstr(out, a)) &&
	       (!b || strstr(out, b));
}

/* The case's line: @what, how the child ended and what it said. */
static inline void in_child_report(int ok, const char *what, int st, const char *out)
{
	printf("%s %s: %s %d%s%s", ok ? "ok  " : "FAIL", what, st != -1 && WIFSIGNALED(st) ? "signal" : "exit",
	       st == -1 ? -1 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), *out ? ", said: " : "\n", out);
}

#endif
