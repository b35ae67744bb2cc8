/* SPDX-License-Identifier: MIT */
/* counters.h - the counters behind rdma_malloc_stats_get(); fields are defined
 * once, in rdma_malloc.h (RDMA_MALLOC_STATS_FIELDS). */
#ifndef RDMALLOC_COUNTERS_H
#define RDMALLOC_COUNTERS_H

#include <stdatomic.h>
#include <stdint.h>

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

/* Lookups happen on the data path of every thread: each thread counts into
 * its own block, summed when the stats are read. */
void rdmalloc_stat_lookup(int ok);

/* Every counter into @st, lookups summed over the threads (takes the
 * LOOKUPS lock); derived fields are the caller's. */
void rdmalloc_counters_read(struct rdma_malloc_stats *st);

#endif
