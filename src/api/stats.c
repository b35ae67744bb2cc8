/* SPDX-License-Identifier: MIT */
/* stats.c - rdma_malloc_stats_get(): the counters (sys/counters.c) and
 * the values derived from heaps and PDs.  Printed by stats_print.c. */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "compiler.h"
#include "counters.h"
#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "pd.h"

static void snapshot(struct rdma_malloc_stats *st)
{
	rdmalloc_counters_read(st);
	/* Derived values are computed here rather than kept in step. */
	st->pds = (uint64_t)rdmalloc_pd_count();
	st->unregistered_chunks = rdmalloc_chunks_unregistered();
	st->pinned_bytes = rdmalloc_chunks_held_bytes();
	st->heaps = (uint64_t)rdmalloc_heap_count();
	st->live_bytes = rdmalloc_heap_live_bytes();
	STAT_MAX(peak_live_bytes, st->live_bytes);
	if (st->live_bytes > st->peak_live_bytes)
		st->peak_live_bytes = st->live_bytes;
}

/* The version and size words, before the first field. */
#define STATS_HEAD offsetof(struct rdma_malloc_stats, chunks)

/*
 * The struct grows by appending (include/rdma_malloc.h, doc/abi.md): a
 * program built against an older header passes a smaller size and gets
 * the fields it knows; a newer one, a larger size, and zeroes past ours.
 */
RDMA_EXPORT int rdma_malloc_stats_get(struct rdma_malloc_stats *st)
{
	if (!st || st->version != RDMA_MALLOC_STATS_VERSION || st->size < STATS_HEAD + sizeof(uint64_t) ||
	    st->size % sizeof(uint64_t))
		return EINVAL;
	rdmalloc_init_core(); /* stats open no device */
	size_t size = st->size, fill = size < sizeof(*st) ? size : sizeof(*st);
	struct rdma_malloc_stats all = { 0 };
	snapshot(&all);
	memcpy((char *)st + STATS_HEAD, (const char *)&all + STATS_HEAD, fill - STATS_HEAD);
	if (size > fill)
		memset((char *)st + fill, 0, size - fill);
	st->size = (uint32_t)fill;
	return 0;
}
