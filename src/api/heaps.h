/* SPDX-License-Identifier: MIT */
/* heaps.h - heap handles as the api layer resolves them. */
#ifndef RDMALLOC_API_HEAPS_H
#define RDMALLOC_API_HEAPS_H

#include "heap.h"
#include "rdma_malloc.h"

/*
 * The heap @heap names, NULL naming the default heap (the library is
 * initialised), taken on trust: the allocation functions and the getters
 * have no error for a destroyed heap in their contracts (rdma_malloc.h),
 * and never checked one.  A call that refuses a dead heap resolves it with
 * rdmalloc_heap_live() instead.
 */
static inline struct rdmalloc_heap *rdmalloc_api_heap(const rdma_heap_t *heap)
{
	return heap ? (struct rdmalloc_heap *)heap : rdmalloc_heap_get_default();
}

#endif
