/* SPDX-License-Identifier: MIT */
/*
 * freed.h - double frees caught, as glibc's tcache catches them.
 *
 * free writes a random word of the process (the key) into the first 8
 * bytes of the block it frees, and every allocation that can hand out a
 * block with the key in it (mallocx, malloc) clears it again.  A free that
 * finds the key in its block frees a block that is free already: the same
 * block twice with nothing between, or with allocations of other blocks
 * between.  A block freed, handed out again and freed twice by its two
 * owners is not caught (nor by glibc).  A live block holds the key only if
 * the program copied it out of freed memory: a false abort needs a
 * use-after-free read.  The key goes when jemalloc gives the block's pages
 * back (decommits them: the decay, a trim) and the kernel zeroes them; a
 * block whose first word reads 0 is looked up in its chunk's idle map
 * (rdmalloc_chunk_idle_at), which says whether its page is given back.
 *
 * The cost: free loads and stores the block's first word (its cache line),
 * malloc loads it (a line the program is about to write): up to 25% where
 * malloc is the work (doc/benchmarks.md): every heap of the API checks,
 * the drop-in's only with RDMALLOC_CHECK_FREE (preload/malloc.c).  Blocks of
 * jemalloc only: big blocks (big.h) know when they are free; calloc's and
 * mallocx(ZERO)'s are zero; a block that realloc moves gets the old one's
 * first bytes (at least 8: the smallest size class).
 */
#ifndef RDMALLOC_FREED_H
#define RDMALLOC_FREED_H

#include <stdint.h>

#include "chunk.h"
#include "compiler.h"

typedef uint64_t __attribute__((may_alias)) rdmalloc_freed_word;

/* Never 0 (a zeroed block is no freed one); random from rdmalloc_heap_init. */
extern uint64_t rdmalloc_freed_key;

/* @who(@p) of a block that is free already: abort with a message. */
_Noreturn void rdmalloc_freed_abort(const char *who, const void *p);

/* Set the key (once, before the first heap is made). */
void rdmalloc_freed_init(void);

/* Whether @p, whose first word is @w, is free already: the key, or zeros
 * in a page given back (of chunk @c when known, else NULL). */
static inline int rdmalloc_freed_is(const void *p, uint64_t w, const struct rdmalloc_chunk *c)
{
	return unlikely(w == rdmalloc_freed_key) ||
	       (unlikely(w == 0) && (c ? rdmalloc_chunk_idle_in(c, p) : rdmalloc_chunk_idle_at(p)));
}

/* Before jemalloc frees @p (of chunk @c, or NULL: not known): abort if it
 * is free already, else mark it. */
static inline void rdmalloc_freed_mark_in(const struct rdmalloc_chunk *c, void *p, const char *who)
{
	rdmalloc_freed_word *w = p;
	if (rdmalloc_freed_is(p, *w, c))
		rdmalloc_freed_abort(who, p);
	*w = rdmalloc_freed_key;
}

static inline void rdmalloc_freed_mark(void *p, const char *who)
{
	rdmalloc_freed_mark_in(NULL, p, who);
}

/* Before realloc of @p (of chunk @c, or NULL): abort if it is free already. */
static inline void rdmalloc_freed_check_in(const struct rdmalloc_chunk *c, const void *p, const char *who)
{
	if (rdmalloc_freed_is(p, *(const rdmalloc_freed_word *)p, c))
		rdmalloc_freed_abort(who, p);
}

static inline void rdmalloc_freed_check(const void *p, const char *who)
{
	rdmalloc_freed_check_in(NULL, p, who);
}

/* @who(@p) of a pointer no live chunk holds: if it is in a page of a
 * given-back chunk (rdmalloc_chunk_idle_at), it was freed before the
 * give-back, and this aborts as a double free; else it returns, and the
 * caller says the pointer is foreign. */
static inline void rdmalloc_freed_given_back(const void *p, const char *who)
{
	if (rdmalloc_chunk_idle_at(p))
		rdmalloc_freed_abort(who, p);
}

/*
 * realloc of @p, a block of a checking heap that is not free: in place when
 * jemalloc can, else moved here, the new block from mallocx(@size, @flags)
 * and the old one marked, then freed with dallocx(@free_flags).  jemalloc's
 * own rallocx frees a block it moves without the key, so that a later free
 * of the old pointer, the commonest double free, would go unseen.  NULL
 * (errno not set, @p untouched) when there is no memory.
 */
void *rdmalloc_freed_realloc(void *p, size_t size, int flags, int free_flags, const char *who);

/* A block jemalloc has just handed out (or NULL): no key left in it. */
static inline void *rdmalloc_freed_clear(void *p)
{
	rdmalloc_freed_word *w = p;
	if (likely(w != NULL) && *w == rdmalloc_freed_key)
		*w = 0;
	return p;
}

#endif
