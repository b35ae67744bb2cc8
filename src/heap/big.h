/* SPDX-License-Identifier: MIT */
/*
 * big.h - blocks of RDMALLOC_BIG_BLOCK bytes or more, each a chunk of its
 * own, registered alone (doc/design.md, "Big blocks").  jemalloc never
 * sees them; their chunks are the chunk layer's (chunk.h, `big`).
 */
#ifndef RDMALLOC_BIG_H
#define RDMALLOC_BIG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chunk.h"
#include "compiler.h"
#include "heap.h"

struct rdmalloc_heap;

/* A heap's freed big blocks kept for reuse, most recent first (the BIG
 * lock).  Inside the heap, zeroed with it. */
struct rdmalloc_big_cache {
	struct rdmalloc_chunk *head, *tail; /* linked through owner_next/owner_prev */
	size_t bytes;  /* of the chunks kept */
	size_t in_use; /* bytes of the heap's big blocks in use */
	size_t blocks; /* how many */
	unsigned window, window_churn; /* big blocks made in the current window; kept ones released for the
					  bound meanwhile (made, freed and released unused) */
	unsigned churned; /* windows in a row that churned */
	atomic_uint suspended; /* big-sized allocations still to go to jemalloc (rdmalloc_big_admit) */
};

/*
 * Sizes that never repeat make every big block a new chunk: mapped,
 * registered, deregistered and unmapped per block.  When, over
 * RDMALLOC_BIG_WINDOWS windows in a row of RDMALLOC_BIG_WINDOW big blocks,
 * more than half as many kept chunks were released unused to stay within
 * the cache's bound (churn, not growth: a heap that only grows releases
 * none; nor a working set that moves to other sizes once), the heap's next
 * RDMALLOC_BIG_SUSPEND big-sized allocations are jemalloc's
 * (big_suspensions; logged once), then it tries again.
 */
#define RDMALLOC_BIG_WINDOW 256u
#define RDMALLOC_BIG_WINDOWS 4u
#define RDMALLOC_BIG_SUSPEND 4096u

/* The smallest big block of the heaps that have them (RDMALLOC_BIG_BLOCK;
 * SIZE_MAX when there are none; rdmalloc_heap_has_big() says which). */
extern size_t rdmalloc_big_min;
/* Set rdmalloc_big_min from the options (initialisation). */
void rdmalloc_big_init(void);

/* Whether @size bytes aligned to @align (0 or a power of two) are a big
 * block of @h: at least the threshold either way, in a heap that has big
 * blocks (the global first: the call only for big sizes). */
static inline int rdmalloc_big_wanted(const struct rdmalloc_heap *h, size_t size, size_t align)
{
	return unlikely(size >= rdmalloc_big_min || align >= rdmalloc_big_min) && rdmalloc_heap_has_big(h);
}

/* An allocation of @h of big size: whether it is a big block (1) or, while
 * the heap's big blocks are suspended, jemalloc's (0).  Lock-free. */
static inline int rdmalloc_big_admit(struct rdmalloc_big_cache *k)
{
	unsigned s = atomic_load_explicit(&k->suspended, memory_order_relaxed);
	while (s && !atomic_compare_exchange_weak_explicit(&k->suspended, &s, s - 1, memory_order_relaxed,
							   memory_order_relaxed))
		;
	return s == 0;
}

/*
 * A big block of at least @size bytes in @h aligned to @align (0, or a
 * power of two), zeroed with @zero: a freed one's chunk of the heap when
 * one fits (at most an eighth larger), else a chunk made for it
 * (registered per the heap's policy).  NULL with errno ENOMEM.  No lock
 * held.
 */
void *rdmalloc_big_alloc(struct rdmalloc_heap *h, size_t size, size_t align, int zero);
/* Free @p, the block of big chunk @c: kept for reuse, or its chunk
 * released (the decay time, the cache's bound).  @who names the call for
 * the message when @p is not the block's start, or the block is free
 * already (a double free): both abort. */
void rdmalloc_big_free(struct rdmalloc_chunk *c, const void *p, const char *who);
/* Abort, naming the call @who, unless @p is the start of @c's block and the
 * block is live (before a realloc allocates its new block, which could be
 * the freed one). */
void rdmalloc_big_check_live(const struct rdmalloc_chunk *c, const void *p, const char *who);
/* The usable size of big chunk @c's block. */
static inline size_t rdmalloc_big_usable(const struct rdmalloc_chunk *c)
{
	return c->size;
}
/*
 * Resize @p, the block of big chunk @c, to @size bytes: in place when the
 * chunk still fits it (at most its size, more than half of it), else moved
 * into a new block of @c's heap -- big, or from @small below the
 * threshold (the caller's jemalloc allocation) -- and @p freed.  NULL with
 * errno ENOMEM, @p untouched.  @p not at the block's start, or free
 * already, aborts naming the call @who.
 */
void *rdmalloc_big_realloc(struct rdmalloc_chunk *c, void *p, size_t size,
			   void *(*small)(struct rdmalloc_heap *h, size_t size), const char *who);

/* Release @h's freed big blocks kept longer than its decay time at @now_ns
 * (all of them with @all): the bytes released.  No lock of ours held but
 * HEAP (the decay tick, a trim): a release is a section (verbs.h), whose
 * wait for a fork never happens under an outer lock, which fork holds
 * before it marks itself coming. */
size_t rdmalloc_big_decay(struct rdmalloc_heap *h, uint64_t now_ns, int all);
/* @h is being destroyed (its chunks are released with it): forget its
 * blocks, in use and kept, and take them out of the stats. */
void rdmalloc_big_forget(struct rdmalloc_heap *h);

#endif
