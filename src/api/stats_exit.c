/* SPDX-License-Identifier: MIT */
/*
 * stats_exit.c - the stats at exit (RDMALLOC_STATS): to a copy of
 * standard error taken at start (programs, coreutils among them, close
 * stderr in exit handlers that run before ours), or appended to
 * RDMALLOC_STATS_FILE, whose %p is the pid and %h the host name at exit
 * (a fork child writes its own file).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "init.h"
#include "log.h"
#include "options.h"
#include "rdma_malloc.h"
#include "sigpipe.h"

static int stderr_copy = -1;

/* @pattern with %p and %h expanded (%% is %); 0, or -1 when too long. */
static int expand(char *out, size_t len, const char *pattern)
{
	size_t n = 0;
	for (const char *p = pattern; *p; p++) {
		char part[256];
		const char *add = part;
		if (p[0] == '%' && p[1] == 'p') {
			snprintf(part, sizeof(part), "%ld", (long)getpid());
			p++;
		} else if (p[0] == '%' && p[1] == 'h') {
			if (gethostname(part, sizeof(part)))
				snprintf(part, sizeof(part), "unknown");
			part[sizeof(part) - 1] = '\0';
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			add = "%";
			p++;
		} else {
			part[0] = *p;
			part[1] = '\0';
		}
		size_t a = strlen(add);
		if (n + a >= len)
			return -1;
		memcpy(out + n, add, a + 1);
		n += a;
	}
	if (!n)
		out[0] = '\0';
	return 0;
}

static void print_at_exit(void)
{
	enum rdma_malloc_stats_format format = rdmalloc_opts.stats == RDMALLOC_STATS_ON_JSON ? RDMA_MALLOC_STATS_JSON
											    : RDMA_MALLOC_STATS_TEXT;
	if (format == RDMA_MALLOC_STATS_TEXT && rdmalloc_opts.stats_all)
		format = (enum rdma_malloc_stats_format)(format | RDMA_MALLOC_STATS_ALL_ROWS);
	int fd = -1;
	char path[2 * RDMALLOC_PATH_MAX];
	if (rdmalloc_opts.stats_file[0]) {
		if (expand(path, sizeof(path), rdmalloc_opts.stats_file)) {
			rdmalloc_log(RDMALLOC_LOG_ERROR, "RDMALLOC_STATS_FILE \"%s\" is too long once expanded; "
				     "the stats go to standard error", rdmalloc_opts.stats_file);
		} else {
			/* Appended: processes that share a file do not clobber each other. */
			fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
			if (fd < 0)
				rdmalloc_log(RDMALLOC_LOG_ERROR, "cannot open RDMALLOC_STATS_FILE \"%s\": %s; "
					     "the stats go to standard error", path, rdmalloc_strerror(errno));
		}
	}
	if (fd < 0 && stderr_copy >= 0)
		fd = dup(stderr_copy);
	FILE *out = fd >= 0 ? fdopen(fd, "a") : NULL;
	if (!out && fd >= 0)
		close(fd);
	/* Whole, in one write where it fits: reports of processes appending to
	 * one file do not interleave. */
	static char buf[16384];
	if (out)
		setvbuf(out, buf, _IOFBF, sizeof(buf));
	/* Stats to a stderr with no reader left must not turn the program's
	 * own exit status into a death by SIGPIPE (sigpipe.h). */
	struct rdmalloc_sigpipe_hold h;
	rdmalloc_sigpipe_hold(&h);
	int err = rdma_malloc_stats_print(out ? out : stderr, format);
	int raised = err == EPIPE;
	if (out && fclose(out) == EOF && errno == EPIPE)
		raised = 1;
	rdmalloc_sigpipe_release(&h, raised);
	if (err)
		rdmalloc_log(RDMALLOC_LOG_ERROR, "printing the stats at exit failed: %s", rdmalloc_strerror(err));
}

void rdmalloc_stats_at_exit(void)
{
	if (rdmalloc_opts.stats == RDMALLOC_STATS_OFF)
		return;
	stderr_copy = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	atexit(print_at_exit);
}
