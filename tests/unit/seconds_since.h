/* SPDX-License-Identifier: MIT */
/* seconds_since.h - how long a call took, for the tests that check a wait's
 * bound (fork's go-ahead). */
#ifndef SECONDS_SINCE_H
#define SECONDS_SINCE_H

#include <time.h>

/* Now, for seconds_since(). */
static inline struct timespec time_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t;
}

/* Seconds from @t0 (time_now()) to now. */
static inline double seconds_since(struct timespec t0)
{
	struct timespec t1 = time_now();
	return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

#endif
