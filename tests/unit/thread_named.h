/* SPDX-License-Identifier: MIT */
/*
 * thread_named.h - find a thread of this process by its name, to read the
 * scheduling, nice value and CPUs a thread of the library gave itself
 * (test_reserve.c, test_fault.c).
 */
#ifndef RDMALLOC_TEST_THREAD_NAMED_H
#define RDMALLOC_TEST_THREAD_NAMED_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The id of a thread whose name starts with @name, or 0. */
static inline pid_t thread_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return 0;
	pid_t found = 0;
	for (struct dirent *e; !found && (e = readdir(d));) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f && fgets(comm, sizeof comm, f) && strncmp(comm, name, strlen(name)) == 0)
			found = (pid_t)atoi(e->d_name);
		if (f)
			fclose(f);
	}
	closedir(d);
	return found;
}

/* The id of the thread named @name once it exists, waiting up to 5 s; 0 if
 * it never does. */
static inline pid_t thread_named_wait(const char *name)
{
	pid_t tid = 0;
	for (int i = 0; i < 500 && !(tid = thread_named(name)); i++)
		usleep(10000);
	return tid;
}

#endif
