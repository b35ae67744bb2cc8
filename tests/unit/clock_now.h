/* SPDX-License-Identifier: MIT */
/* clock_now.h - now on CLOCK_MONOTONIC, the clock of rdmalloc_now_ns()
 * (src/sys/os.c): for the library's tick times and the tests that check a
 * wait's bound (fork's go-ahead). */
#ifndef CLOCK_NOW_H
#define CLOCK_NOW_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double now_s(void)
{
	return (double)now_ns() / 1e9;
}

#endif
