/* SPDX-License-Identifier: MIT */
/* heap.h - heaps: one jemalloc arena each, with our extent hooks, one set of
 * access flags, and one thread cache per thread. */
#ifndef RDMALLOC_HEAP_H
#define RDMALLOC_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "jemalloc.h"
#include "options.h"
#include "rdma_malloc.h"

struct rdmalloc_heap;
struct rdmalloc_chunk;

/* Initialisation (init.h): the heaps' tick and thread-exit key, with the
 * core; the default heap, with RDMA (NULL until then). */
void rdmalloc_heap_init(void);
void rdmalloc_heap_init_default(unsigned int access);
/* A heap with checked @access and @flags, giving back memory idle for
 * @decay_ms (-1: never): NULL with *@err (EAGAIN: no heap left, or
 * jemalloc's errno). */
/*
 * Flag of rdmalloc_heap_create, never a heap's flags: the LD_PRELOAD
 * drop-in's heap, served by jemalloc's automatic thread cache (its threads
 * are bound to its arenas), not by explicit caches.  rdma_heap_destroy
 * refuses it, so its chunks live as long as the process; they are marked
 * in the address map's auto map (rdmalloc_addrmap_is_auto, addrmap.h); it
 * has no big blocks, and jemalloc's chunk series (chunk_max_of, heap.c).
 */
#define RDMALLOC_HEAP_AUTO_CACHE (1u << 31)
/* With RDMALLOC_HEAP_AUTO_CACHE: its frees are checked for double frees
 * (freed.h), as every other heap's are; its granules' byte in the auto map
 * is RDMALLOC_AUTO_CHECKED, so that the drop-in's free takes its slow
 * path, which checks (RDMALLOC_CHECK_FREE). */
#define RDMALLOC_HEAP_CHECK_FREES (1u << 30)
RDMALLOC_TESTABLE struct rdmalloc_heap *rdmalloc_heap_create(unsigned int access, unsigned int flags, long decay_ms,
						       int *err);
/* rdma_malloc_trim(): this thread's caches flushed, every heap's free
 * pages decommitted, every idle chunk given back, after the tick's or
 * another trim's work on that heap if one is under way.  The bytes given
 * back meanwhile (by any thread).  Takes the HEAP lock, but not across
 * the work. */
size_t rdmalloc_heaps_trim(void);
/* An allocation failed (jemalloc returned NULL): if a chunk was refused
 * on this thread for want of memory since the last relief, give back what
 * can be, as rdma_malloc_trim() does (not inside a hook or a verbs call).
 * 1 when something was given back: try once more, then call
 * rdmalloc_heaps_relief_end(), until which the reserves' thread starts no
 * chunk (what went back is the retry's: issue 23, item 4). */
int rdmalloc_heaps_relieve(void);
void rdmalloc_heaps_relief_end(void);
/* @p = @expr, and once more when that was NULL and a relief gave memory
 * back, the relief ended after: the allocation paths' retry (api/alloc.c's
 * alloc() writes its own: it stops early on a thread found ended). */
#define RDMALLOC_RELIEVED(p, expr)                                                         \
	do {                                                                               \
		int rl_tries_ = 2, rl_relieved_ = 0;                                       \
		do                                                                         \
			(p) = (expr);                                                      \
		while (!(p) && --rl_tries_ && (rl_relieved_ = rdmalloc_heaps_relieve()));  \
		if (rl_relieved_)                                                          \
			rdmalloc_heaps_relief_end();                                       \
	} while (0)
/* Destroy @h (any pointer: checked): 0, EINVAL (not a live heap, the
 * default or the drop-in's) or EBUSY (a memory window on its memory).
 * Takes the HEAP then the PD lock. */
int rdmalloc_heap_destroy(struct rdmalloc_heap *h);
/* rdma_heap_key_generation() of @h. */
uint64_t rdmalloc_heap_key_gen(const struct rdmalloc_heap *h);
struct rdmalloc_heap *rdmalloc_heap_get_default(void);

unsigned int rdmalloc_heap_access_of(const struct rdmalloc_heap *h);
/* @access with the bits that heap flags @flags imply (MW_BIND, ON_DEMAND):
 * what a heap's regions are registered with. */
unsigned int rdmalloc_heap_implied_access(unsigned int flags, unsigned int access);
/* RDMA_HEAP_* flags; fixed for the heap's life. */
unsigned int rdmalloc_heap_flags_of(const struct rdmalloc_heap *h);
/* What the chunk layer reads of @h (chunk.h): its access and flags. */
struct rdmalloc_chunk_spec *rdmalloc_heap_spec(struct rdmalloc_heap *h);
/* Whether @h has big blocks (big.h): not an ODP heap, whose free pages
 * jemalloc gives back itself, nor the drop-in's, whose chunks are pinned
 * only where RDMA uses them. */
int rdmalloc_heap_has_big(const struct rdmalloc_heap *h);
/* @h's freed big blocks kept for reuse (big.h). */
struct rdmalloc_big_cache *rdmalloc_heap_big(struct rdmalloc_heap *h);
/* Milliseconds @h's free memory stays before it is given back (-1: never). */
long rdmalloc_heap_decay_ms(const struct rdmalloc_heap *h);
/* When @h's chunks are registered (enum rdmalloc_reg_policy, chunk.h):
 * before its first chunk; a heap is RDMALLOC_REG_EAGER unless told. */
RDMALLOC_TESTABLE void rdmalloc_heap_set_policy(struct rdmalloc_heap *h, int policy);
#define RDMALLOC_HEAP_FLAGS_ALL \
	(RDMA_HEAP_HUGEPAGES | RDMA_HEAP_MW_BIND | RDMA_HEAP_ODP | RDMA_HEAP_ODP_IMPLICIT)
#define IBV_ACCESS_ON_DEMAND_ 0x40u /* IBV_ACCESS_ON_DEMAND, without verbs.h */
/* For the tests: arena.<i>.purge of @heap (an ODP heap gives pages back). */
RDMALLOC_TESTABLE void rdmalloc_heap_purge(rdma_heap_t *heap);
#define IBV_ACCESS_MW_BIND_ 0x10u /* IBV_ACCESS_MW_BIND, without verbs.h */
/* rdma_heap_set_access (PD lock held): the flags new registrations get. */
void rdmalloc_heap_store_access(struct rdmalloc_heap *h, unsigned int access);
void rdmalloc_heap_bump_key_gen(struct rdmalloc_heap *h);
/* @heap if it is a live heap (NULL: the default heap), else NULL. */
struct rdmalloc_heap *rdmalloc_heap_live(const rdma_heap_t *heap);
unsigned rdmalloc_heap_count(void);
uint64_t rdmalloc_heap_live_bytes(void);

/*
 * jemalloc's mallocx, rallocx and dallocx for memory of @h, through this
 * thread's cache of @h (its arena, and the extra @flags: alignment, zero).
 * The cache is flushed by the background tick once the thread has not
 * used it for @h's decay time (heap.c).  A block that is free already
 * aborts, naming @who (freed.h), unless the heap is the drop-in's without
 * RDMALLOC_HEAP_CHECK_FREES.
 */
void *rdmalloc_heap_mallocx(struct rdmalloc_heap *h, size_t size, int flags);
/*
 * rdmalloc_heap_mallocx while rdmalloc_tl_watch is not 1 (tls.h), uncached:
 * a thread's first allocation from jemalloc watches the thread, and its
 * block's chunk tells whether jemalloc has cleaned the thread up (it ends:
 * a pthread key destructor runs after jemalloc's), serving it from its
 * arena 0 whatever arena @h has.  Then NULL, with *@ended set, as for a
 * thread marked ended before; else the block (or NULL with errno, no
 * verdict, *@ended 0).
 */
void *rdmalloc_heap_mallocx_first(struct rdmalloc_heap *h, size_t size, int flags, int *ended);
/* realloc of @p, a jemalloc block of chunk @c, in its heap: checked where
 * the heap checks frees. */
void *rdmalloc_heap_rallocx(const struct rdmalloc_chunk *c, void *p, size_t size, const char *who);
/* Free @p, a jemalloc block of chunk @c (its heap's), checked where the
 * heap checks frees. */
void rdmalloc_heap_dallocx(const struct rdmalloc_chunk *c, void *p, const char *who);
/* Abort, naming @who, if @p, a block of chunk @c, is free already (before
 * a realloc allocates its new block, which could be the freed one): a big
 * block always (and one @p not at its start), a jemalloc block where its
 * heap checks frees (every heap of the API; the drop-in's with
 * RDMALLOC_CHECK_FREE). */
void rdmalloc_heap_check_live(const struct rdmalloc_chunk *c, const void *p, const char *who);
/*
 * Flush the thread caches whose owners have not used them for their heap's
 * decay time by @now (rdmalloc_now_ns()); safe while the owners run (heap.c
 * says how).  The background tick calls it; no lock held.
 */
RDMALLOC_TESTABLE void rdmalloc_heap_flush_idle_caches(uint64_t now);
/* Test-only: the explicit caches threads hold now, every heap's. */
RDMALLOC_TESTABLE unsigned rdmalloc_heap_live_caches(void);
/* For the tests' crash reports: the calling thread's caches, then every
 * cache id as this file and jemalloc see it, to @fd; an id the two
 * disagree on is marked, and a cache whose header is zero.  No locks: for
 * a process that is dying. */
RDMALLOC_TESTABLE void rdmalloc_heap_caches_dump(int fd);
/* In a fork child, no lock taken: forget every cache made before the fork
 * (jemalloc cannot flush or destroy those in a child, heap.c says why);
 * the child's threads make new ones. */
void rdmalloc_heap_fork_child(void);
/* fork() is coming: no tick or trim starts on a heap's arenas, and those
 * under way are waited for until @deadline_ns (rdmalloc_now_ns()): a
 * child must not inherit an arena half purged.  The number left under way;
 * rdmalloc_heap_fork_parent (HEAP lock held, by the fork) or the child's
 * handler lets them start again, once every fork coming has ended (two
 * may overlap: a count).  No lock held. */
RDMALLOC_TESTABLE unsigned rdmalloc_heap_fork_prepare(uint64_t deadline_ns);
RDMALLOC_TESTABLE void rdmalloc_heap_fork_parent(void);

int rdmalloc_heap_auto_tcache(const struct rdmalloc_heap *h);
/* More arenas for @h, with the same hooks and settings, so that threads
 * bound to the heap do not all share one arena (jemalloc gives its own
 * threads 4 arenas per CPU).  Up to @n arenas in all (at most
 * RDMALLOC_HEAP_MAX_ARENAS); returns how many @h has. */
#define RDMALLOC_HEAP_MAX_ARENAS RDMALLOC_ARENAS_MAX
unsigned rdmalloc_heap_add_arenas(struct rdmalloc_heap *h, unsigned n);
/* Arena @i (< the count above) of @h; 0 is rdmalloc_heap_arena(@h). */
unsigned rdmalloc_heap_arena_at(const struct rdmalloc_heap *h, unsigned i);

/* The heap whose hooks are @hooks (an extent_hooks_t *). */
struct rdmalloc_heap *rdmalloc_heap_of_hooks(void *hooks);

/* The arena index of @h (its first, what mallocx uses). */
RDMALLOC_TESTABLE unsigned rdmalloc_heap_arena(const struct rdmalloc_heap *h);

#endif
