/* SPDX-License-Identifier: MIT */
/* log.c - messages to stderr, filtered by RDMALLOC_LOG_LEVEL. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sigpipe.h"
#include "nocancel.h"

static atomic_int log_level = RDMALLOC_LOG_WARN;

const char *rdmalloc_strerror(int err)
{
	static RDMALLOC_TLS char buf[32];
	const char *s = strerrordesc_np(err);
	if (s)
		return s;
	snprintf(buf, sizeof(buf), "unknown error %d", err);
	return buf;
}

void rdmalloc_log_set_level(int level)
{
	atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int rdmalloc_log_level(void)
{
	return atomic_load_explicit(&log_level, memory_order_relaxed);
}

static const char *const level_names[] = {
	[RDMALLOC_LOG_NONE] = "", [RDMALLOC_LOG_ERROR] = "error",
	[RDMALLOC_LOG_WARN] = "warning", [RDMALLOC_LOG_INFO] = "info",
	[RDMALLOC_LOG_DEBUG] = "debug",
};

static void vlog(int level, const char *fmt, va_list ap)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "rdmalloc: %s: ", level_names[level]);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	buf[len++] = '\n';
	/* One write so lines of concurrent threads do not interleave; a failed
	 * write to stderr has nowhere else to be reported, and a stderr with
	 * no reader left must not kill the program (sigpipe.h).  The caller's
	 * errno is kept. */
	int saved = errno, cancel = rdmalloc_cancel_off(); /* the release may sigtimedwait */
	struct rdmalloc_sigpipe_hold h;
	rdmalloc_sigpipe_hold(&h);
	ssize_t w = write(STDERR_FILENO, buf, len);
	rdmalloc_sigpipe_release(&h, w < 0 && errno == EPIPE);
	rdmalloc_cancel_on(cancel);
	errno = saved;
}

void rdmalloc_log(int level, const char *fmt, ...)
{
	if (level > rdmalloc_log_level() || level <= RDMALLOC_LOG_NONE)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void rdmalloc_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(RDMALLOC_LOG_ERROR, fmt, ap);
	va_end(ap);
	abort();
}
