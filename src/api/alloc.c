/* SPDX-License-Identifier: MIT */
/* alloc.c - the allocation functions of rdma_malloc.h. */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "big.h"
#include "calls.h"
#include "chunk.h"
#include "crew.h"
#include "freed.h"
#include "heap.h"
#include "heaps.h"
#include "init.h"
#include "log.h"
#include "addrmap.h"
#include "reserve.h"
#include "tls.h"
#include "counters.h"

/* @ptr is of no live chunk: fatal.  In a chunk given back, it was freed
 * before (a double free); else not ours, as glibc's free() treats an
 * invalid pointer. */
static __attribute__((noreturn, noinline, cold)) void not_ours(const char *who, const void *ptr)
{
	rdmalloc_freed_given_back(ptr, who);
	rdmalloc_fatal("%s(%p): not memory from rdmalloc", who, ptr);
}

/* The chunk of @ptr; an address that is not ours is fatal. */
static inline struct rdmalloc_chunk *chunk_of(const void *ptr, const char *who)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(ptr);
	if (unlikely(!c))
		not_ours(who, ptr);
	return c;
}

/* alloc() on a thread that jemalloc has cleaned up (a late pthread key
 * destructor: tls.h), which jemalloc would serve from its arena 0, memory
 * of no chunk: a big block instead, a chunk of its own however small the
 * size.  A heap without big blocks (ODP; the drop-in's, reached by
 * rdma_realloc) answers ENOMEM. */
static __attribute__((noinline, cold)) void *alloc_ended(struct rdmalloc_heap *h, size_t size, size_t align,
							int zero)
{
	STAT_INC(fallbacks);
	if (!rdmalloc_heap_has_big(h)) {
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "an allocation after jemalloc cleaned its thread up (a late "
				  "key destructor) from a heap without big blocks (ODP, or the drop-in's) fails "
				  "with ENOMEM (counted in fallbacks)");
		errno = ENOMEM;
		return NULL;
	}
	rdmalloc_log_once(RDMALLOC_LOG_INFO, "an allocation after jemalloc cleaned its thread up (a late key "
			  "destructor) is a big block, a chunk of its own (counted in fallbacks)");
	int saved = errno;
	void *p;
	RDMALLOC_RELIEVED(p, rdmalloc_big_alloc(h, size, align, zero));
	errno = p ? saved : ENOMEM;
	return p;
}

/* @size bytes of @h aligned to @align (0: none), zeroed with @zero: a big
 * block (big.h) or jemalloc's.  errno is ENOMEM on failure and untouched
 * on success, although a hook may have failed (and set errno) before
 * jemalloc retried with a smaller chunk. */
static void *alloc(struct rdmalloc_heap *h, size_t size, size_t align, int zero)
{
	int saved = errno;
	/* Its chunk shared out, the first time too (an ODP heap's never is). */
	rdmalloc_crew_start_before(size, rdmalloc_heap_spec(h)->flags);
	void *p;
	int tries = 2, relieved = 0, ended = 0;
	int flags = (align ? RDMALLOC_ALIGN(align) : 0) | (zero ? RDMALLOC_ZERO : 0);
	do { /* RDMALLOC_RELIEVED, but for the break */
		if (rdmalloc_big_wanted(h, size, align) &&
		    rdmalloc_big_admit(rdmalloc_heap_big(h)))
			p = rdmalloc_big_alloc(h, size, align, zero);
		else if (likely(rdmalloc_tl_watch == 1))
			p = rdmalloc_heap_mallocx(h, size ? size : 1, flags);
		else if (!(p = rdmalloc_heap_mallocx_first(h, size ? size : 1, flags, &ended)) && ended)
			break;
	} while (unlikely(!p) && --tries && (relieved = rdmalloc_heaps_relieve()));
	if (relieved)
		rdmalloc_heaps_relief_end();
	if (unlikely(ended)) {
		errno = saved;
		return alloc_ended(h, size, align, zero);
	}
	rdmalloc_threads_start_wanted(); /* a growth asked for them: outside every lock */
	errno = likely(p != NULL) ? saved : ENOMEM;
	return p;
}

static void *alloc_plain(struct rdmalloc_heap *h, size_t size)
{
	return alloc(h, size, 0, 0);
}

/* The usable size of @ptr, in chunk @c. */
static size_t usable(const struct rdmalloc_chunk *c, const void *ptr)
{
	if (c->big)
		return (uintptr_t)ptr == c->base ? rdmalloc_big_usable(c) : 0;
	return rdmalloc_sallocx(ptr);
}

/* Free @ptr, in chunk @c. */
static void release(struct rdmalloc_chunk *c, void *ptr, const char *who)
{
	if (c->big)
		rdmalloc_big_free(c, ptr, who);
	else
		rdmalloc_heap_dallocx(c, ptr, who);
}

static int bad_alignment(size_t alignment)
{
	return !is_pow2(alignment);
}

RDMA_EXPORT void *rdma_heap_malloc(rdma_heap_t *heap, size_t size)
{
	rdmalloc_init();
	return alloc(rdmalloc_api_heap(heap), size, 0, 0);
}

RDMA_EXPORT void *rdma_heap_calloc(rdma_heap_t *heap, size_t nmemb, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(nmemb, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	rdmalloc_init();
	return alloc(rdmalloc_api_heap(heap), total, 0, 1);
}

RDMA_EXPORT void *rdma_heap_aligned_alloc(rdma_heap_t *heap, size_t alignment, size_t size)
{
	if (bad_alignment(alignment)) {
		errno = EINVAL;
		return NULL;
	}
	rdmalloc_init();
	return alloc(rdmalloc_api_heap(heap), size, alignment, 0);
}

void *rdmalloc_api_realloc(struct rdmalloc_heap *to, void *ptr, struct rdmalloc_chunk *c, size_t size)
{
	if (c->heap != to || (!c->big && unlikely(rdmalloc_tl_watch != 1)) ||
	    (!c->big && rdmalloc_big_wanted(to, size, 0) && rdmalloc_big_admit(rdmalloc_heap_big(to)))) {
		/* Into another heap, a jemalloc block grown big, or one of a
		 * thread not watched yet, which jemalloc may have cleaned up
		 * (alloc() tells, and serves it: alloc_ended): copy, then free
		 * the old one.  A freed block is caught first: the new one
		 * could be that very block, handed out again. */
		rdmalloc_heap_check_live(c, ptr, "rdma_realloc");
		void *q = alloc(to, size, 0, 0);
		if (!q)
			return NULL;
		size_t old = usable(c, ptr);
		memcpy(q, ptr, old < size ? old : size);
		release(c, ptr, "rdma_realloc");
		return q;
	}
	int saved = errno;
	void *q;
	RDMALLOC_RELIEVED(q, c->big ? rdmalloc_big_realloc(c, ptr, size ? size : 1, alloc_plain, "rdma_realloc")
				    : rdmalloc_heap_rallocx(c, ptr, size ? size : 1, "rdma_realloc"));
	rdmalloc_threads_start_wanted(); /* a growth asked for them: outside every lock */
	errno = likely(q != NULL) ? saved : ENOMEM;
	return q;
}

RDMA_EXPORT void *rdma_heap_realloc(rdma_heap_t *heap, void *ptr, size_t size)
{
	rdmalloc_init();
	struct rdmalloc_heap *h = rdmalloc_api_heap(heap);
	if (!ptr)
		return alloc(h, size, 0, 0);
	return rdmalloc_api_realloc(h, ptr, chunk_of(ptr, "rdma_heap_realloc"), size);
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
		return alloc(rdmalloc_api_heap(NULL), size, 0, 0);
	struct rdmalloc_chunk *c = chunk_of(ptr, "rdma_realloc"); /* its heap: it stays there */
	return rdmalloc_api_realloc(c->heap, ptr, c, size);
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
	release(chunk_of(ptr, "rdma_free"), ptr, "rdma_free");
}

RDMA_EXPORT size_t rdma_malloc_usable_size(const void *ptr)
{
	struct rdmalloc_chunk *c = ptr ? rdmalloc_addrmap_lookup(ptr) : NULL;
	return c ? usable(c, ptr) : 0;
}
