/* SPDX-License-Identifier: MIT */
/*
 * idlemap.c - which pages of a chunk jemalloc has decommitted (chunk.h,
 * rdmalloc_chunk_idle_at): a bit per page, set by the decommit hook and
 * cleared by the commit hook, so that a second free of a block whose
 * memory was given back meanwhile is told from a free of a live block.
 * The double-free check's key (heap/freed.h) does not survive a give-back:
 * a plain chunk's decommitted pages go back to the kernel at once and come
 * back as zeros, and jemalloc, handed such a pointer, crashes or hands the
 * block out twice.  jemalloc decommits only extents with no block in them
 * and commits an extent before it carves a block out of it, so a set bit
 * means that no block starts in that page.  ODP heaps too: their hooks
 * refuse purges (jemalloc would reuse purged pages without a hook call)
 * and decommit does the purge's work.  A chunk's
 * map beyond its descriptor is unmapped with it: a free racing the
 * release of its chunk (rdma_heap_destroy) may fault here.
 */
#include "chunkset.h"

#include <errno.h>
#include <string.h>

#include "addrmap.h"
#include "counters.h"
#include "log.h"
#include "os.h"

#define WORD_BITS 64

static size_t words_of(const struct rdmalloc_chunk *c)
{
	size_t pages = (c->size + RDMALLOC_IDLE_PAGE - 1) >> RDMALLOC_IDLE_PAGE_SHIFT;
	return (pages + WORD_BITS - 1) / WORD_BITS;
}

static int mapped(const struct rdmalloc_chunk *c)
{
	return words_of(c) > sizeof(c->idle_inline) / sizeof(c->idle_inline[0]);
}

void rdmalloc_chunk_idle_init(struct rdmalloc_chunk *c, int committed)
{
	_Atomic(uint64_t) *bits = c->idle_inline;
	if (mapped(c) && !(bits = rdmalloc_os_map(words_of(c) * sizeof(*bits)))) {
		/* A check less, not an allocation failed for it. */
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "a chunk's map of idle pages could not be mapped (%s): a "
				  "double free after a give-back in it is not caught (counted in fallbacks)",
				  rdmalloc_strerror(errno));
		return;
	}
	memset((void *)bits, committed ? 0 : 0xff, words_of(c) * sizeof(*bits));
	atomic_store_explicit(&c->idle_pages, bits, memory_order_release);
}

void rdmalloc_chunk_idle_fini(struct rdmalloc_chunk *c)
{
	_Atomic(uint64_t) *bits = atomic_load_explicit(&c->idle_pages, memory_order_relaxed);
	if (!bits)
		return;
	atomic_store_explicit(&c->idle_pages, NULL, memory_order_relaxed);
	if (bits != c->idle_inline)
		rdmalloc_os_unmap((void *)bits, words_of(c) * sizeof(*bits));
}

void rdmalloc_chunk_idle_set(struct rdmalloc_chunk *c, const void *addr, size_t len, int idle)
{
	_Atomic(uint64_t) *bits = atomic_load_explicit(&c->idle_pages, memory_order_relaxed);
	if (!bits)
		return;
	size_t first = ((uintptr_t)addr - c->base) >> RDMALLOC_IDLE_PAGE_SHIFT;
	size_t end = first + ((len + RDMALLOC_IDLE_PAGE - 1) >> RDMALLOC_IDLE_PAGE_SHIFT);
	/* Writers hold the chunk lock: a load and a store per word, which
	 * readers see whole. */
	for (size_t i = first; i < end;) {
		size_t w = i / WORD_BITS, lo = i % WORD_BITS;
		size_t n = end - i < WORD_BITS - lo ? end - i : WORD_BITS - lo;
		uint64_t mask = (n == WORD_BITS ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << lo;
		uint64_t v = atomic_load_explicit(&bits[w], memory_order_relaxed);
		atomic_store_explicit(&bits[w], idle ? v | mask : v & ~mask, memory_order_relaxed);
		i += n;
	}
}

int rdmalloc_chunk_idle_at(const void *p)
{
	const struct rdmalloc_chunk *c = rdmalloc_addrmap_entry(p); /* given-back ones too */
	return c && rdmalloc_chunk_idle_in(c, p);
}
