/* SPDX-License-Identifier: MIT */
/* alloc.c - the allocation functions of rdma_malloc.h. */
#include <errno.h>
#include "calls.h"
#include <string.h>

#include "alloc.h"
#include "chunk.h"
#include "heap.h"
#include "heaps.h"
#include "init.h"
#include "log.h"
#include "addrmap.h"
#include "reserve.h"

/* A growth asked for the reserve's registration thread: started here,
 * outside every lock (reserve.h). */
static inline void start_reserve(void)
{
	if (unlikely(rdmalloc_reserve_start_wanted()))
		rdmalloc_reserve_start();
}

/* The heap of @ptr; an address that is not ours is fatal, as glibc's free()
 * treats an invalid pointer. */
static inline struct rdmalloc_heap *heap_of(const void *ptr, const char *who)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(ptr);
	if (unlikely(!c))
		rdmalloc_fatal("%s(%p): not memory from rdmalloc", who, ptr);
	return c->heap;
}

/* errno is ENOMEM on failure and untouched on success, although a hook may
 * have failed (and set errno) before jemalloc retried with a smaller chunk. */
static inline void *alloc(struct rdmalloc_heap *h, size_t size, int flags)
{
	int saved = errno;
	void *p = rdmalloc_mallocx(size ? size : 1, rdmalloc_heap_alloc_flags(h) | flags);
	if (unlikely(!p) && rdmalloc_heaps_relieve()) /* memory pressure: idle chunks went back */
		p = rdmalloc_mallocx(size ? size : 1, rdmalloc_heap_alloc_flags(h) | flags);
	start_reserve();
	errno = likely(p != NULL) ? saved : ENOMEM;
	return p;
}

static int bad_alignment(size_t alignment)
{
	return !is_pow2(alignment);
}

RDMA_EXPORT void *rdma_heap_malloc(rdma_heap_t *heap, size_t size)
{
	rdmalloc_init();
	return alloc(rdmalloc_api_heap(heap), size, 0);
}

RDMA_EXPORT void *rdma_heap_calloc(rdma_heap_t *heap, size_t nmemb, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	rdmalloc_init();
	return alloc(rdmalloc_api_heap(heap), total, RDMALLOC_ZERO);
}

RDMA_EXPORT void *rdma_heap_aligned_alloc(rdma_heap_t *heap, size_t alignment, size_t size)
{
	if (bad_alignment(alignment)) {
		errno = EINVAL;
		return NULL;
	}
	rdmalloc_init();
	return alloc(rdmalloc_api_heap(heap), size, RDMALLOC_ALIGN(alignment));
}

void *rdmalloc_api_realloc(struct rdmalloc_heap *to, void *ptr, struct rdmalloc_heap *from, size_t size)
{
	if (from != to) {
		/* Moving between heaps: copy, then free from the old one. */
		void *q = alloc(to, size, 0);
		if (!q)
			return NULL;
		size_t old = rdmalloc_sallocx(ptr);
		memcpy(q, ptr, old < size ? old : size);
		rdmalloc_dallocx(ptr, rdmalloc_heap_free_flags(from));
		return q;
	}
	int saved = errno;
	void *q = rdmalloc_rallocx(ptr, size ? size : 1, rdmalloc_heap_alloc_flags(to));
	if (unlikely(!q) && rdmalloc_heaps_relieve())
		q = rdmalloc_rallocx(ptr, size ? size : 1, rdmalloc_heap_alloc_flags(to));
	start_reserve();
	errno = likely(q != NULL) ? saved : ENOMEM;
	return q;
}

RDMA_EXPORT void *rdma_heap_realloc(rdma_heap_t *heap, void *ptr, size_t size)
{
	rdmalloc_init();
	struct rdmalloc_heap *h = rdmalloc_api_heap(heap);
	if (!ptr)
		return alloc(h, size, 0);
	return rdmalloc_api_realloc(h, ptr, heap_of(ptr, "rdma_heap_realloc"), size);
}

RDMA_EXPORT void *rdma_malloc(size_t size)
{
	return rdma_heap_malloc(NULL, size);
}

RDMA_EXPORT void *rdma_calloc(size_t nmemb, size_t size)
{
	return rdma_heap_calloc(NULL, nmemb, size);
}

RDMA_EXPORT void *rdma_aligned_alloc(size_t alignment, size_t size)
{
	return rdma_heap_aligned_alloc(NULL, alignment, size);
}

RDMA_EXPORT void *rdma_realloc(void *ptr, size_t size)
{
	rdmalloc_init();
	if (!ptr)
		return alloc(rdmalloc_api_heap(NULL), size, 0);
	struct rdmalloc_heap *h = heap_of(ptr, "rdma_realloc"); /* its heap: it stays there */
	return rdmalloc_api_realloc(h, ptr, h, size);
}

RDMA_EXPORT int rdma_posix_memalign(void **memptr, size_t alignment, size_t size)
{
	if (!memptr || bad_alignment(alignment) || alignment % sizeof(void *))
		return EINVAL;
	int saved = errno;
	void *p = rdma_heap_aligned_alloc(NULL, alignment, size);
	errno = saved;
	if (!p)
		return ENOMEM;
	*memptr = p;
	return 0;
}

RDMA_EXPORT void rdma_free(void *ptr)
{
	if (!ptr)
		return;
	rdmalloc_dallocx(ptr, rdmalloc_heap_free_flags(heap_of(ptr, "rdma_free")));
}

RDMA_EXPORT size_t rdma_malloc_usable_size(const void *ptr)
{
	if (!ptr || !rdmalloc_addrmap_lookup(ptr))
		return 0;
	return rdmalloc_sallocx(ptr);
}
