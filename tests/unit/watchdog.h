/* SPDX-License-Identifier: MIT */
/* watchdog.h - a thread that lets a test's held-up call go after 20 s, so
 * that a test of "this never waits for that" fails instead of hanging, and
 * says whether it had to. */
#ifndef WATCHDOG_H
#define WATCHDOG_H

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>

struct watchdog {
	sem_t done;
	pthread_t thread;
	atomic_int fired;
	void (*release)(void);
};

static void *watchdog_run(void *arg)
{
	struct watchdog *w = arg;
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 20;
	int rc;
	while ((rc = sem_clockwait(&w->done, CLOCK_MONOTONIC, &until)) && errno == EINTR)
		;
	if (rc)
		atomic_store(&w->fired, 1);
	w->release();
	return NULL;
}

/* Start @w: it calls @release after 20 s, or when the test is done. */
static inline int watchdog_start(struct watchdog *w, void (*release)(void))
{
	atomic_store(&w->fired, 0);
	w->release = release;
	if (sem_init(&w->done, 0, 0))
		return -1;
	return pthread_create(&w->thread, NULL, watchdog_run, w) ? -1 : 0;
}

/* The test is done: @release runs now if it has not; 1 if the 20 s had
 * passed first. */
static inline int watchdog_done(struct watchdog *w)
{
	sem_post(&w->done);
	pthread_join(w->thread, NULL);
	sem_destroy(&w->done);
	return atomic_load(&w->fired);
}

#endif
