/* SPDX-License-Identifier: MIT */
/* counters.h - the counters behind rdma_malloc_stats_get(); fields are defined
 * once, in rdma_malloc.h (RDMA_MALLOC_STATS_FIELDS). */
#ifndef RDMALLOC_COUNTERS_H
#define RDMALLOC_COUNTERS_H

#include <stdatomic.h>
#include <stdint.h>

#include "compiler.h"
#include "rdma_malloc.h"

struct rdmalloc_counters {
#define RDMALLOC_COUNTER_(name, kind, desc) _Atomic uint64_t name;
	RDMA_MALLOC_STATS_FIELDS(RDMALLOC_COUNTER_)
#undef RDMALLOC_COUNTER_
};

extern struct rdmalloc_counters rdmalloc_counters;

#define STAT_ADD(name, v) atomic_fetch_add_explicit(&rdmalloc_counters.name, (uint64_t)(v), memory_order_relaxed)
#define STAT_SUB(name, v) atomic_fetch_sub_explicit(&rdmalloc_counters.name, (uint64_t)(v), memory_order_relaxed)
#define STAT_INC(name) STAT_ADD(name, 1)
/* A peak: @name becomes @v if @v is more (any thread, any lock). */
#define STAT_MAX(name, v) rdmalloc_stat_max(&rdmalloc_counters.name, (uint64_t)(v))

static inline void rdmalloc_stat_max(_Atomic uint64_t *peak, uint64_t v)
{
	uint64_t old = atomic_load_explicit(peak, memory_order_relaxed);
	while (v > old && !atomic_compare_exchange_weak_explicit(peak, &old, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

/* Lookups happen on the data path of every thread: each thread counts into
 * a slot of its own, summed when the stats are read (counters.c). */
void rdmalloc_stat_lookup(int ok);
/* In a fork child (one thread, no lock taken): the slots of the parent's
 * other threads are free again, their counts kept in the totals. */
void rdmalloc_counters_fork_child(void);
/* Test-only: the slots threads hold now. */
RDMALLOC_TESTABLE unsigned rdmalloc_counters_slots_used(void);

/* Every counter into @st, lookups summed over the threads (takes the
 * LOOKUPS lock); derived fields are the caller's. */
void rdmalloc_counters_read(struct rdma_malloc_stats *st);

#endif
