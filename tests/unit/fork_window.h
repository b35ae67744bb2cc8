/* SPDX-License-Identifier: MIT */
/* fork_window.h - the library held as fork() holds it from its prepare
 * handlers to its parent handlers (a fork coming, so no thread of ours
 * starts; every inner lock taken), without forking: to call what another
 * thread may call meanwhile.  VERBS is the first inner lock (lock.h). */
#ifndef FORK_WINDOW_H
#define FORK_WINDOW_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "lock.h"
#include "os.h"

static inline void fork_window_open(void)
{
	rdmalloc_os_threads_fork_prepare(0); /* waits for nothing */
	for (int id = RDMALLOC_LOCK_VERBS; id < RDMALLOC_LOCK_COUNT; id++)
		rdmalloc_lock((enum rdmalloc_lock_id)id);
}

static inline void fork_window_close(void)
{
	for (int id = RDMALLOC_LOCK_COUNT - 1; id >= RDMALLOC_LOCK_VERBS; id--)
		rdmalloc_unlock((enum rdmalloc_lock_id)id);
	rdmalloc_os_threads_fork_parent();
}

/* A call made on another thread meanwhile (called_within_a_second). */
struct call_on_thread {
	void (*fn)(void);
	atomic_int returned;
};

static void *call_on_thread_run(void *arg)
{
	struct call_on_thread *c = arg;
	c->fn();
	atomic_store(&c->returned, 1);
	return NULL;
}

/* @c->fn called on a new thread *@t, which the caller joins (@c lives
 * until then): whether it returned within a second. */
static inline int called_within_a_second(struct call_on_thread *c, pthread_t *t)
{
	atomic_store(&c->returned, 0);
	cr_assert_eq(pthread_create(t, NULL, call_on_thread_run, c), 0);
	for (int i = 0; i < 1000 && !atomic_load(&c->returned); i++)
		usleep(1000);
	return atomic_load(&c->returned);
}

/* @fn called on another thread while the window is open: whether it
 * returned within a second (then the window is closed, the thread
 * joined). */
static inline int returns_in_a_fork_window(void (*fn)(void))
{
	struct call_on_thread c = { .fn = fn };
	pthread_t t;
	fork_window_open();
	int returned = called_within_a_second(&c, &t);
	fork_window_close();
	pthread_join(t, NULL);
	return returned;
}

#endif
