/* SPDX-License-Identifier: MIT */
/* counters.c - the library's counters, and the lookups counted per thread. */
#include "counters.h"

#include <pthread.h>

#include "compiler.h"
#include "lock.h"
#include "log.h"

struct rdmalloc_counters rdmalloc_counters;

/*
 * Lookups happen on the data path of every thread, so each thread counts
 * into a block of its own with plain relaxed loads and stores (no locked
 * instruction, no shared cache line).  Blocks join a list on a thread's first
 * lookup; at thread exit a block's counts move to the totals and the block
 * leaves the list.  Readers sum totals and blocks under the list mutex.
 */
struct lookup_counts {
	_Atomic uint64_t ok, failed;
	struct lookup_counts *next, *prev;
	int listed;
};

static RDMALLOC_TLS struct lookup_counts tl_lookups;
static struct lookup_counts *lookups_list;
static uint64_t lookups_ok_gone, lookups_failed_gone; /* of exited threads */
static pthread_key_t lookups_key;
static pthread_once_t lookups_once = PTHREAD_ONCE_INIT;

static void lookups_thread_exit(void *arg)
{
	struct lookup_counts *t = arg;
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	lookups_ok_gone += atomic_load_explicit(&t->ok, memory_order_relaxed);
	lookups_failed_gone += atomic_load_explicit(&t->failed, memory_order_relaxed);
	if (t->prev)
		t->prev->next = t->next;
	else
		lookups_list = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->listed = 0;
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
}

static void lookups_key_create(void)
{
	if (pthread_key_create(&lookups_key, lookups_thread_exit))
		rdmalloc_fatal("pthread_key_create for the lookup counters failed");
}

static __attribute__((noinline)) void lookups_join(struct lookup_counts *t)
{
	pthread_once(&lookups_once, lookups_key_create);
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	t->prev = NULL;
	t->next = lookups_list;
	if (lookups_list)
		lookups_list->prev = t;
	lookups_list = t;
	t->listed = 1;
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
	pthread_setspecific(lookups_key, t);
}

void rdmalloc_stat_lookup(int ok)
{
	struct lookup_counts *t = &tl_lookups;
	if (unlikely(!t->listed))
		lookups_join(t);
	_Atomic uint64_t *c = ok ? &t->ok : &t->failed;
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void sum_lookups(uint64_t *ok, uint64_t *failed)
{
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	*ok = lookups_ok_gone;
	*failed = lookups_failed_gone;
	for (struct lookup_counts *t = lookups_list; t; t = t->next) {
		*ok += atomic_load_explicit(&t->ok, memory_order_relaxed);
		*failed += atomic_load_explicit(&t->failed, memory_order_relaxed);
	}
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
}

void rdmalloc_counters_read(struct rdma_malloc_stats *st)
{
#define LOAD_(name, kind, desc) st->name = atomic_load_explicit(&rdmalloc_counters.name, memory_order_relaxed);
	RDMA_MALLOC_STATS_FIELDS(LOAD_)
#undef LOAD_
	uint64_t ok, failed;
	sum_lookups(&ok, &failed);
	st->lookups += ok;
	st->lookup_failures += failed;
}
