/* SPDX-License-Identifier: MIT */
/* lock.c - the one table of locks, their order check and fork (lock.h). */
#include "lock.h"

#include <pthread.h>
#include <time.h>

#include "log.h"
#include "nocancel.h"

static struct {
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	enum rdmalloc_lock_group group;
	const char *name;
} locks[RDMALLOC_LOCK_COUNT] = {
#define RDMALLOC_LOCK_INIT_(id, grp, what)                                              \
	[RDMALLOC_LOCK_##id] = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, \
				 RDMALLOC_LOCKS_##grp, #id },
	RDMALLOC_LOCKS(RDMALLOC_LOCK_INIT_)
#undef RDMALLOC_LOCK_INIT_
};

_Static_assert(RDMALLOC_LOCK_COUNT <= 32, "held locks are a 32-bit mask");

#ifndef NDEBUG
#define LOCK_CHECK 1
/* The locks this thread holds, one bit each. */
static RDMALLOC_TLS unsigned held;

static void check_order(enum rdmalloc_lock_id id)
{
	unsigned later = held & ~((1u << id) - 1); /* @id itself, or one after it */
	if (unlikely(later)) {
		unsigned bad = (unsigned)__builtin_ctz(later);
		rdmalloc_fatal("lock order violated: taking the %s lock while holding the %s lock "
			       "(doc/design.md, \"Locks and fork\")",
			       locks[id].name, locks[bad].name);
	}
}
#else
#define LOCK_CHECK 0
#endif

void rdmalloc_lock(enum rdmalloc_lock_id id)
{
#if LOCK_CHECK
	check_order(id);
#endif
	pthread_mutex_lock(&locks[id].mutex);
#if LOCK_CHECK
	held |= 1u << id;
#endif
}

int rdmalloc_lock_try(enum rdmalloc_lock_id id)
{
	if (pthread_mutex_trylock(&locks[id].mutex))
		return 0;
#if LOCK_CHECK
	held |= 1u << id;
#endif
	return 1;
}

void rdmalloc_unlock(enum rdmalloc_lock_id id)
{
#if LOCK_CHECK
	held &= ~(1u << id);
#endif
	pthread_mutex_unlock(&locks[id].mutex);
}

void rdmalloc_lock_wait(enum rdmalloc_lock_id id)
{
	int cancel = rdmalloc_cancel_off();
	pthread_cond_wait(&locks[id].cond, &locks[id].mutex);
	rdmalloc_cancel_on(cancel);
}

void rdmalloc_lock_wait_until(enum rdmalloc_lock_id id, uint64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000u),
			       .tv_nsec = (long)(deadline_ns % 1000000000u) };
	int cancel = rdmalloc_cancel_off();
	pthread_cond_clockwait(&locks[id].cond, &locks[id].mutex, CLOCK_MONOTONIC, &ts);
	rdmalloc_cancel_on(cancel);
}

void rdmalloc_lock_broadcast(enum rdmalloc_lock_id id)
{
	pthread_cond_broadcast(&locks[id].cond);
}

void rdmalloc_locks_prepare(enum rdmalloc_lock_group group)
{
	for (int i = 0; i < RDMALLOC_LOCK_COUNT; i++)
		if (locks[i].group == group)
			rdmalloc_lock((enum rdmalloc_lock_id)i);
}

void rdmalloc_locks_parent(enum rdmalloc_lock_group group)
{
	for (int i = RDMALLOC_LOCK_COUNT - 1; i >= 0; i--)
		if (locks[i].group == group)
			rdmalloc_unlock((enum rdmalloc_lock_id)i);
}

void rdmalloc_locks_child(enum rdmalloc_lock_group group)
{
	/* The parent's waiters (an idle reserve thread, a detach holding the
	 * PD lock) do not exist here: the conditions start anew. */
	for (int i = RDMALLOC_LOCK_COUNT - 1; i >= 0; i--)
		if (locks[i].group == group) {
			pthread_cond_init(&locks[i].cond, NULL);
			rdmalloc_unlock((enum rdmalloc_lock_id)i);
		}
}

const char *rdmalloc_lock_name(enum rdmalloc_lock_id id)
{
	return locks[id].name;
}

int rdmalloc_lock_checked(void)
{
	return LOCK_CHECK;
}
