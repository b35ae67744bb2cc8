/* SPDX-License-Identifier: MIT */
/* alloc.h - the allocation internals of alloc.c that the drop-in shares. */
#ifndef RDMALLOC_API_ALLOC_H
#define RDMALLOC_API_ALLOC_H

#include <stddef.h>

struct rdmalloc_heap;
struct rdmalloc_chunk;

/*
 * rdma_heap_realloc() of @ptr (not NULL), in chunk @c, which the caller
 * has already looked up; the result lives in heap @to (@c's heap to keep
 * it, as rdma_realloc()).  @size 0 is 1.  Another heap's memory is moved
 * (copied and freed), as is a block that changes between jemalloc's and
 * big (big.h).  NULL with errno ENOMEM (@ptr untouched), else errno
 * untouched.  The library is initialised (a chunk exists).
 */
void *rdmalloc_api_realloc(struct rdmalloc_heap *to, void *ptr, struct rdmalloc_chunk *c, size_t size);

#endif
