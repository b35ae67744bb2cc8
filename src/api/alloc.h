/* SPDX-License-Identifier: MIT */
/* alloc.h - the allocation internals of alloc.c that the drop-in shares. */
#ifndef RDMALLOC_API_ALLOC_H
#define RDMALLOC_API_ALLOC_H

#include <stddef.h>

struct rdmalloc_heap;

/*
 * rdma_heap_realloc() of @ptr (not NULL), whose chunk the caller has
 * already looked up: @from is that chunk's heap, @to the heap the result
 * lives in (@from itself to keep the heap, as rdma_realloc()).  @size 0 is
 * 1.  Another heap's memory is moved (copied and freed).  NULL with errno
 * ENOMEM (@ptr untouched), else errno untouched.  The library is
 * initialised (a chunk exists).
 */
void *rdmalloc_api_realloc(struct rdmalloc_heap *to, void *ptr, struct rdmalloc_heap *from, size_t size);

#endif
