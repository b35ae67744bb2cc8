/* SPDX-License-Identifier: MIT */
/* heaps.c - the public heap calls: rdma_heap_create(), rdma_heap_destroy(),
 * rdma_malloc_trim() and the getters; arguments checked here, heaps made in heap/heap.c. */
#include <errno.h>

#include "compiler.h"
#include "heap.h"
#include "heaps.h"
#include "init.h"
#include "options.h"
#include "pd.h"
#include "rdma_malloc.h"
#include "verbs.h"

RDMA_EXPORT rdma_heap_t *rdma_heap_create(const struct rdma_heap_attr *attr)
{
	rdmalloc_init();
	unsigned int access = attr ? attr->access : rdmalloc_opts.access;
	unsigned int flags = attr ? attr->flags : 0;
	long decay = attr && attr->decay_ms ? attr->decay_ms : rdmalloc_opts.decay_ms;
	if (attr && ((flags & ~RDMALLOC_HEAP_FLAGS_ALL) || !rdmalloc_access_valid(access) ||
		     decay < -1 || decay > RDMALLOC_DECAY_MS_MAX ||
		     ((flags & RDMA_HEAP_ODP) && (flags & RDMA_HEAP_HUGEPAGES)) ||
		     ((flags & RDMA_HEAP_ODP_IMPLICIT) &&
		      (!(flags & RDMA_HEAP_ODP) || (flags & RDMA_HEAP_MW_BIND) ||
		       (access & IBV_ACCESS_MW_BIND_))))) {
		errno = EINVAL;
		return NULL;
	}
	if ((flags & RDMA_HEAP_ODP_IMPLICIT) && (access & RDMALLOC_ACCESS_REMOTE)) {
		errno = EPERM; /* its keys would reach the whole address space */
		return NULL;
	}
	if (flags & RDMA_HEAP_ODP) {
		int e = rdmalloc_odp_supported(rdmalloc_pd_default(), access, (flags & RDMA_HEAP_ODP_IMPLICIT) != 0);
		if (e) {
			errno = e;
			return NULL;
		}
	}
	int err = 0;
	struct rdmalloc_heap *h = rdmalloc_heap_create(access, flags, decay, &err);
	if (!h)
		errno = err;
	return (rdma_heap_t *)h;
}

RDMA_EXPORT size_t rdma_malloc_trim(void)
{
	rdmalloc_init_core(); /* a trim opens no device */
	return rdmalloc_heaps_trim();
}

RDMA_EXPORT int rdma_heap_destroy(rdma_heap_t *heap)
{
	rdmalloc_init();
	return rdmalloc_heap_destroy((struct rdmalloc_heap *)heap);
}

RDMA_EXPORT rdma_heap_t *rdma_heap_default(void)
{
	rdmalloc_init();
	return (rdma_heap_t *)rdmalloc_heap_get_default();
}

RDMA_EXPORT unsigned int rdma_heap_access(const rdma_heap_t *heap)
{
	rdmalloc_init();
	return rdmalloc_heap_access_of(rdmalloc_api_heap(heap));
}

RDMA_EXPORT unsigned int rdma_heap_flags(const rdma_heap_t *heap)
{
	rdmalloc_init();
	return rdmalloc_heap_flags_of(rdmalloc_api_heap(heap));
}

RDMA_EXPORT uint64_t rdma_heap_key_generation(const rdma_heap_t *heap)
{
	rdmalloc_init();
	return rdmalloc_heap_key_gen(rdmalloc_api_heap(heap));
}
