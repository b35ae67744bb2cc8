/* SPDX-License-Identifier: MIT */
/*
 * addrmap.h - the address map: which chunk holds a pointer.
 *
 * A two-level radix table over the granule number (address >> 21) of a
 * 48-bit address space: 2^13 top entries in .bss pointing to leaves of 2^14
 * chunk pointers, mapped on first use and never freed.  Finding a chunk is
 * two dependent loads, and the chunk itself is the third: no lock, no system
 * call.  Writers hold the chunk lock; readers use acquire loads.
 */
#ifndef RDMALLOC_ADDRMAP_H
#define RDMALLOC_ADDRMAP_H

#include <stdatomic.h>
#include <stdint.h>

#include "chunk.h"
#include "compiler.h"

#define RDMALLOC_VA_BITS 48
#define RDMALLOC_L2_BITS 14
#define RDMALLOC_L1_BITS (RDMALLOC_VA_BITS - RDMALLOC_GRANULE_SHIFT - RDMALLOC_L2_BITS)
#define RDMALLOC_L1_SHIFT (RDMALLOC_GRANULE_SHIFT + RDMALLOC_L2_BITS)

typedef _Atomic(struct rdmalloc_chunk *) rdmalloc_addrmap_entry_t;
extern _Atomic(rdmalloc_addrmap_entry_t *) rdmalloc_addrmap[1u << RDMALLOC_L1_BITS];

/* The chunk whose granule holds @p, in any state, or NULL. */
static inline struct rdmalloc_chunk *rdmalloc_addrmap_entry(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	if (unlikely(a >> RDMALLOC_VA_BITS))
		return NULL;
	rdmalloc_addrmap_entry_t *leaf = atomic_load_explicit(&rdmalloc_addrmap[a >> RDMALLOC_L1_SHIFT],
						     memory_order_acquire);
	if (unlikely(!leaf))
		return NULL;
	return atomic_load_explicit(&leaf[(a >> RDMALLOC_GRANULE_SHIFT) & ((1u << RDMALLOC_L2_BITS) - 1)],
				    memory_order_acquire);
}

/* The live chunk holding @p, or NULL when @p is not rdmalloc memory or its
 * chunk was given back (chunk.h: live_size). */
static inline struct rdmalloc_chunk *rdmalloc_addrmap_lookup(const void *p)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_entry(p);
	if (unlikely(!c || (uintptr_t)p - c->base >= atomic_load_explicit(&c->live_size, memory_order_acquire)))
		return NULL;
	return c;
}

/*
 * The granules of chunks whose spec has `auto_cache` (the drop-in's heap,
 * whose memory goes through the thread's automatic cache and is never
 * released), but of its big chunks, and only granules its chunk's mapping
 * covers whole: one byte each, so that the drop-in's free() tells its own
 * jemalloc memory from anything else with two dependent loads, however
 * many chunks there are (what is not marked takes the slow path).
 * Two levels: 32768 leaf pointers (256 KiB, given by the drop-in from its
 * .bss, or mapped on the first such chunk), each leaf a page of bytes for
 * 8 GiB of address space, mapped on the first chunk there and never
 * unmapped.  A flat map was 128 MiB of .bss: address space that
 * `ulimit -v` counts, more than a small program's whole heap.  Bytes, not
 * bits: free's test stays a load, and writers a store.  A byte is set
 * before the chunk is returned to jemalloc, hence before any pointer into
 * it exists, and cleared only when the chunk is unpublished (nothing of it
 * is allocated then).
 */
/* (__atomic_* on plain objects: GCC loads _Atomic ones through an extra lea) */
#define RDMALLOC_ADDRMAP_AUTO_GRANULES ((uintptr_t)1 << (RDMALLOC_VA_BITS - RDMALLOC_GRANULE_SHIFT))
#define RDMALLOC_AUTO_LEAF_SHIFT 12 /* granules per leaf: a page of bytes */
#define RDMALLOC_AUTO_LEAF_BYTES ((size_t)1 << RDMALLOC_AUTO_LEAF_SHIFT)
#define RDMALLOC_ADDRMAP_AUTO_LEAVES (RDMALLOC_ADDRMAP_AUTO_GRANULES >> RDMALLOC_AUTO_LEAF_SHIFT)
typedef unsigned char *rdmalloc_auto_leaf_t;
/* A marked granule's byte: its chunk's spec->auto_cache.  The drop-in's
 * free() takes its fast path for PLAIN only; CHECKED sends it to the slow
 * path, which checks for double frees (RDMALLOC_CHECK_FREE). */
#define RDMALLOC_AUTO_PLAIN 1
#define RDMALLOC_AUTO_CHECKED 2

/*
 * The byte of @p's granule in @map (0: not marked), the leaf pointers its
 * owner gave (rdmalloc_addrmap_auto_give), which exist from the start, so
 * that the test needs no pointer to the map first (the drop-in's free()).
 */
static inline int rdmalloc_addrmap_is_auto_in(rdmalloc_auto_leaf_t const *map, const void *p)
{
	uintptr_t g = (uintptr_t)p >> RDMALLOC_GRANULE_SHIFT;
	if (unlikely(g >= RDMALLOC_ADDRMAP_AUTO_GRANULES))
		return 0;
	const unsigned char *leaf = __atomic_load_n(&map[g >> RDMALLOC_AUTO_LEAF_SHIFT], __ATOMIC_ACQUIRE);
	return likely(leaf != NULL) ? __atomic_load_n(&leaf[g & (RDMALLOC_AUTO_LEAF_BYTES - 1)], __ATOMIC_RELAXED) : 0;
}

/* Use @map (RDMALLOC_ADDRMAP_AUTO_LEAVES NULL pointers that live as long
 * as the process) as the auto map: before the first chunk of an auto_cache
 * heap, else the map is mapped then. */
void rdmalloc_addrmap_auto_give(rdmalloc_auto_leaf_t *map);

/* Out-of-line copies for the unit tests. */
RDMALLOC_TESTABLE struct rdmalloc_chunk *rdmalloc_addrmap_find(const void *p);
/* The same in whichever auto map there is (0 while there is none). */
RDMALLOC_TESTABLE int rdmalloc_addrmap_auto_find(const void *p);
/* Publish every granule of @c (chunk lock held): 0 or ENOMEM, nothing
 * published on failure. */
int rdmalloc_addrmap_insert(struct rdmalloc_chunk *c);
void rdmalloc_addrmap_remove(struct rdmalloc_chunk *c);

#endif
