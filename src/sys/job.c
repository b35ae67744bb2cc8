/* SPDX-License-Identifier: MIT */
/* job.c - messages said once per job, through an inherited environment
 * variable (job.h). */
#include "job.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "nocancel.h"

int rdmalloc_job_has(const char *list, const char *key)
{
	size_t n = strlen(key);
	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == n && !strncmp(p, key, n))
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}

/* 1 if this process has one thread (/proc/self/stat's 20th field):
 * then setenv() races no getenv().  No allocation. */
static int single_threaded(void)
{
	char buf[1024];
	int cancel = rdmalloc_cancel_off();
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	rdmalloc_cancel_on(cancel);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	for (int field = 2; p && field < 20; field++)
		p = strchr(p + 1, ' ');
	return p && strtol(p + 1, NULL, 10) == 1;
}

void rdmalloc_log_job_once(const char *key, const char *fmt, ...)
{
	const char *noted = getenv(RDMALLOC_JOB_NOTED);
	int first = !rdmalloc_job_has(noted, key);
	int level = first ? RDMALLOC_LOG_WARN : RDMALLOC_LOG_INFO;
	if (level > rdmalloc_log_level())
		return; /* not shown: the children may still say it */
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (first) {
		char value[1024];
		int n = snprintf(value, sizeof(value), "%s%s%s", noted && *noted ? noted : "",
				 noted && *noted ? "," : "", key);
		/* Too long a list, or other threads that may read the
		 * environment meanwhile: the children say it again, nothing
		 * worse. */
		if (n > 0 && (size_t)n < sizeof(value) && single_threaded())
			setenv(RDMALLOC_JOB_NOTED, value, 1);
	}
	rdmalloc_log(level, "%s", msg);
}
