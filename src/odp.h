/* SPDX-License-Identifier: MIT */
/* odp.h - on-demand-paging heaps (RDMA_HEAP_ODP, doc/modes.md). */
#ifndef RDMALLOC_ODP_H
#define RDMALLOC_ODP_H

#include <stdbool.h>
#include <stddef.h>

#include "je.h"

struct ibv_pd;

/* 0 when @pd's device can register an ODP heap with @access (RC ODP with
 * the operations @access allows), EOPNOTSUPP or the query's errno else.
 * A NULL @pd (no device) is 0: nothing will be registered. */
int rdmalloc_odp_check(struct ibv_pd *pd, unsigned int access);

/* The purge hook of ODP heaps: MADV_DONTNEED, allowed because nothing is
 * pinned (the NIC faults the pages in again through the kernel). */
bool rdmalloc_odp_purge(extent_hooks_t *self, void *addr, size_t size, size_t offset, size_t length,
			unsigned arena_ind);

#endif
