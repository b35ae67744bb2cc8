/* SPDX-License-Identifier: MIT */
/*
 * calls.h - jemalloc's allocation calls for the layers above (api/alloc.c,
 * the drop-in), inline: nothing outside src/heap/ names jemalloc, and the
 * fast paths cost what jemalloc's own calls cost.
 */
#ifndef RDMALLOC_CALLS_H
#define RDMALLOC_CALLS_H

#include <stddef.h>

#include "je.h"

/* Flags of the *x calls (jemalloc's MALLOCX_*). */
#define RDMALLOC_ZERO MALLOCX_ZERO
#define RDMALLOC_ALIGN(a) MALLOCX_ALIGN(a)
#define RDMALLOC_ARENA(a) MALLOCX_ARENA(a)
#define RDMALLOC_TCACHE_NONE MALLOCX_TCACHE_NONE

/* With explicit flags (a heap's own go through heap.h's rdmalloc_heap_*x).
 * None of these checks for double frees (freed.h): their callers do. */
static inline void *rdmalloc_mallocx(size_t size, int flags)
{
	return je_mallocx(size, flags);
}

static inline void *rdmalloc_rallocx(void *p, size_t size, int flags)
{
	return je_rallocx(p, size, flags);
}

static inline void rdmalloc_dallocx(void *p, int flags)
{
	je_dallocx(p, flags);
}

/* Resize @p in place to at least @size: its usable size after (the old
 * one when it cannot). */
static inline size_t rdmalloc_xallocx(void *p, size_t size, int flags)
{
	return je_xallocx(p, size, 0, flags);
}

/* The usable size mallocx(@size, @flags) would give (0: too large). */
static inline size_t rdmalloc_nallocx(size_t size, int flags)
{
	return je_nallocx(size, flags);
}

static inline size_t rdmalloc_sallocx(const void *p)
{
	return je_sallocx(p, 0);
}

/* The drop-in's fast path: the calling thread's arena and automatic cache. */
static inline void *rdmalloc_auto_malloc(size_t size)
{
	return je_malloc(size);
}

static inline void *rdmalloc_auto_calloc(size_t n, size_t size)
{
	return je_calloc(n, size);
}

static inline void *rdmalloc_auto_realloc(void *p, size_t size)
{
	return je_realloc(p, size);
}

static inline void rdmalloc_auto_free(void *p)
{
	je_free(p);
}

/* free() of a block that malloc(@size) returned: no size lookup. */
static inline void rdmalloc_auto_free_sized(void *p, size_t size)
{
	je_sdallocx(p, size, 0);
}

static inline size_t rdmalloc_auto_usable_size(void *p)
{
	return je_malloc_usable_size(p);
}

#endif
