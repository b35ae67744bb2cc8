/* SPDX-License-Identifier: MIT */
/* heaps.c - the public heap calls: rdma_heap_create(), rdma_heap_destroy(),
 * rdma_malloc_trim() and the getters; arguments checked here, heaps made in heap/heap.c. */
#include <errno.h>
#include <stddef.h>

#include "compiler.h"
#include "heap.h"
#include "heaps.h"
#include "init.h"
#include "log.h"
#include "options.h"
#include "pd.h"
#include "rdma_malloc.h"
#include "verbs.h"

/* @attr complete (every field set, 0 for a default) or NULL. */
static rdma_heap_t *heap_create(const struct rdma_heap_attr *attr)
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
		int e = rdmalloc_pd_odp_supported(access, (flags & RDMA_HEAP_ODP_IMPLICIT) != 0);
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

/*
 * The struct grows by appending (include/rdma_malloc.h, doc/abi.md): the
 * fields @size covers are the program's, the others 0.  A field is read
 * only when @size holds it whole.
 */
#define ATTR_HAS(size, field) \
	((size) >= offsetof(struct rdma_heap_attr, field) + sizeof(((struct rdma_heap_attr *)0)->field))

RDMA_EXPORT rdma_heap_t *rdma_heap_create_sized(const struct rdma_heap_attr *attr, size_t size)
{
	if (!attr)
		return heap_create(NULL);
	if (!ATTR_HAS(size, flags)) {
		errno = EINVAL;
		return NULL;
	}
	/* A newer program's fields this library does not know: only their
	 * defaults (0) can be honoured. */
	for (size_t i = sizeof(*attr); i < size; i++) {
		if (((const unsigned char *)attr)[i]) {
			errno = EINVAL;
			return NULL;
		}
	}
	struct rdma_heap_attr a = { .access = attr->access, .flags = attr->flags };
	if (ATTR_HAS(size, decay_ms))
		a.decay_ms = attr->decay_ms;
	return heap_create(&a);
}

/* The 0.1 function, which binaries built against a 0.1 header call (the
 * header's macro of that name calls rdma_heap_create_sized()).  Its
 * struct may end before decay_ms, and nothing tells: read access and
 * flags only. */
RDMA_EXPORT rdma_heap_t *(rdma_heap_create)(const struct rdma_heap_attr *attr)
{
	if (attr)
		rdmalloc_log_once(RDMALLOC_LOG_INFO, "rdma_heap_create() of a program built against "
				  "rdmalloc 0.1: rdma_heap_attr.decay_ms is not read, RDMALLOC_DECAY_MS "
				  "applies (rebuild to set it per heap)");
	return rdma_heap_create_sized(attr, offsetof(struct rdma_heap_attr, decay_ms));
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
