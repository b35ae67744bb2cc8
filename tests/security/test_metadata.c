/* SPDX-License-Identifier: MIT */
/*
 * test_metadata.c - a peer holding rkeys cannot corrupt the allocator
 * (doc/security.md), on the host with the fake verbs backend.
 *
 * A peer with a heap's rkey can write every byte of every registered region
 * of that heap.  Here the test itself is that peer, for every heap at once:
 * it overwrites every byte of every region the backend holds live (all
 * heaps, the default one included) with garbage, including words that look
 * like pointers into the regions, while the heaps hold thousands of live
 * blocks.  Then the allocator must go on as if nothing happened: the old
 * blocks are freed, tens of thousands of allocations, reallocs and frees
 * follow, every block lies in a chunk of its heap with its keys, no two live
 * blocks overlap (each carries its own pattern, all checked at the end), and
 * the heaps are destroyed.  If jemalloc's bookkeeping (bins, extent records,
 * thread caches) or rdmalloc's (chunk descriptors, address table, heaps)
 * lived in registered memory, this would crash or hand out overlapping
 * blocks: with a heap whose arena is created *with* the hooks (jemalloc then
 * allocates the arena's metadata from our chunks), it does
 * (doc/reliability.md, "How the tests were shown to fail").
 *
 * The Soft-RoCE guest does the same with real RDMA WRITEs through the NIC:
 * tests/e2e/test_security.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunk.h"
#include "fake_verbs.h"
#include "reserve.h"
#include "rdma_malloc.h"
#include "addrmap.h"

#define HEAPS 3
#define LIVE 4096
#define OPS 40000

static struct fake_mr_info mrs[FAKE_MAX_MRS];

static uint64_t rng = 0xda942042e4dd58b5ull;
static uint64_t next(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

/* Each block is filled with 64-bit words that name the block (its seed)
 * and the word's index: a block that overlaps another shows. */
static uint64_t word(size_t i, uint32_t seed)
{
	return ((uint64_t)seed << 32 | (uint32_t)i) * 0x9E3779B97F4A7C15ull;
}

struct blk {
	uint8_t *p;
	size_t n;
	int heap;
	uint32_t seed;
};

static void fill(struct blk *b)
{
	size_t words = b->n / 8;
	for (size_t i = 0; i < words; i++) {
		uint64_t w = word(i, b->seed);
		memcpy(b->p + 8 * i, &w, 8);
	}
	memset(b->p + 8 * words, (int)(b->seed & 0xff), b->n - 8 * words);
}

/* The first @n bytes of @b hold its pattern. */
static void check_n(const struct blk *b, size_t n, const char *when)
{
	size_t words = n / 8;
	for (size_t i = 0; i < words; i++) {
		uint64_t w;
		memcpy(&w, b->p + 8 * i, 8);
		cr_assert_eq(w, word(i, b->seed),
			     "%s: word %zu of the %zu-byte block %p changed: two live blocks overlap", when, i, b->n,
			     (void *)b->p);
	}
	if (n == b->n)
		for (size_t i = 8 * words; i < n; i++)
			cr_assert_eq(b->p[i], (uint8_t)(b->seed & 0xff), "%s: tail byte %zu of %p changed", when, i,
				     (void *)b->p);
}

static void check(const struct blk *b, const char *when)
{
	check_n(b, b->n, when);
}

/* Overwrite every byte of every live region: random words, zeros, all-ones,
 * and pointers into the regions (what a forged free list would hold). */
static size_t scribble(void)
{
	rdmalloc_reserves_settle(); /* no reserve chunk made or dropped meanwhile */
	size_t n = fake_snapshot(mrs, FAKE_MAX_MRS), bytes = 0;
	for (size_t r = 0; r < n; r++) {
		uint64_t *w = mrs[r].addr;
		size_t words = mrs[r].len / 8;
		for (size_t i = 0; i < words; i++) {
			uint64_t x = next();
			switch (x & 3) {
			case 0: w[i] = x; break;
			case 1: w[i] = 0; break;
			case 2: w[i] = ~(uint64_t)0; break;
			default:
				w[i] = (uint64_t)(uintptr_t)mrs[(x >> 8) % n].addr + ((x >> 20) % mrs[(x >> 8) % n].len);
				break;
			}
		}
		bytes += mrs[r].len;
	}
	return bytes;
}

static int in_regions(const void *p, size_t n)
{
	size_t k = fake_snapshot(mrs, FAKE_MAX_MRS);
	for (size_t r = 0; r < k; r++) {
		const char *a = mrs[r].addr;
		if ((const char *)p + n > a && (const char *)p < a + mrs[r].len)
			return 1;
	}
	return 0;
}

static void *alloc(rdma_heap_t *h, size_t n, uint64_t x)
{
	switch (x % 3) {
	case 0: return rdma_heap_malloc(h, n);
	case 1: return rdma_heap_calloc(h, 1, n);
	default: return rdma_heap_aligned_alloc(h, (size_t)16 << (x % 9), n);
	}
}

static size_t pick_size(uint64_t x)
{
	switch ((x >> 4) % 32) {
	case 0: return 1 + (x >> 12) % ((size_t)3 << 20); /* large, own extents */
	case 1: case 2: case 3: return 1 + (x >> 12) % 100000;
	default: return 1 + (x >> 12) % 3000; /* small: slabs */
	}
}

Test(security, scribbling_every_registered_byte_cannot_corrupt_the_allocator, .timeout = 240)
{
	fake_verbs_install(1);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	rdma_heap_t *h[HEAPS] = { rdma_heap_default(), rdma_heap_create(NULL),
				  rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE }) };
	cr_assert(h[1] && h[2]);
	static struct blk b[LIVE];
	for (int i = 0; i < LIVE; i++) {
		uint64_t x = next();
		b[i].heap = (int)(x % HEAPS);
		b[i].n = pick_size(x);
		b[i].p = alloc(h[b[i].heap], b[i].n, x >> 32);
		cr_assert(b[i].p, "allocation %d: %s", i, strerror(errno));
	}
	/* rdmalloc's own bookkeeping is outside every region. */
	for (int i = 0; i < LIVE; i += 97) {
		struct rdmalloc_chunk *c = rdmalloc_addrmap_find(b[i].p);
		cr_assert(c);
		cr_assert(!in_regions(c, sizeof(*c)), "a chunk descriptor lies in registered memory");
		cr_assert(!in_regions(h[b[i].heap], 64), "a heap structure lies in registered memory");
	}
	size_t bytes = scribble(), rounds = 1;
	unsigned long ops = 0, freed_old = 0;
	double t0 = (double)clock() / CLOCKS_PER_SEC;
	/* The old blocks hold garbage now (as the peer left them): free them,
	 * interleaved with new work, and scribble again half-way. */
	for (int i = 0; i < LIVE; i++)
		b[i].seed = 0;
	for (unsigned long op = 0; op < OPS; op++, ops++) {
		uint64_t x = next();
		struct blk *k = &b[x % LIVE];
		if (k->p && !k->seed) { /* an old, scribbled block */
			rdma_free(k->p);
			k->p = NULL;
			freed_old++;
		}
		if (op == OPS / 2) {
			bytes += scribble();
			rounds++;
			/* Blocks made since the last scribble are garbage too now. */
			for (int i = 0; i < LIVE; i++)
				b[i].seed = 0;
			continue;
		}
		if (k->p && (x & 0x100)) {
			size_t n = pick_size(x >> 8);
			uint8_t *q = rdma_realloc(k->p, n);
			cr_assert(q, "realloc: %s", strerror(errno));
			size_t keep = k->n < n ? k->n : n;
			k->p = q;
			check_n(k, keep & ~(size_t)7, "across realloc");
			k->n = n;
			fill(k);
		} else {
			rdma_free(k->p);
			k->heap = (int)((x >> 40) % HEAPS);
			k->n = pick_size(x >> 8);
			k->p = alloc(h[k->heap], k->n, x >> 50);
			cr_assert(k->p, "allocation after the scribble: %s", strerror(errno));
			k->seed = (uint32_t)op + 1;
			fill(k);
		}
		struct rdmalloc_chunk *c = rdmalloc_addrmap_find(k->p);
		cr_assert(c && (rdma_heap_t *)c->heap == h[k->heap], "block %p is not in a chunk of its heap",
			  (void *)k->p);
		cr_assert_geq(rdma_malloc_usable_size(k->p), k->n);
		cr_assert_eq(rdma_malloc_keys(k->p, k->n, NULL, NULL, NULL), 0);
		cr_assert_eq(rdma_malloc_keys(k->p, k->n, fake_pd(1), NULL, NULL), 0);
	}
	unsigned long live = 0;
	for (int i = 0; i < LIVE; i++) {
		if (b[i].p && b[i].seed) {
			check(&b[i], "after the churn");
			live++;
		}
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.mrs, 2 * st.chunks);
	for (int i = 0; i < LIVE; i++)
		if (b[i].p && b[i].heap == 0)
			rdma_free(b[i].p);
	cr_assert_eq(rdma_heap_destroy(h[1]), 0);
	cr_assert_eq(rdma_heap_destroy(h[2]), 0);
	void *after = rdma_malloc(12345);
	cr_assert(after);
	rdma_free(after);
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.heaps, 1);
	printf("security scribble: %zu MiB of registered memory overwritten in %zu rounds, %d blocks live in %d "
	       "heaps at the first, then %lu operations (%lu scribbled blocks freed), %lu live blocks checked "
	       "byte for byte, %.2f s CPU\n",
	       bytes >> 20, rounds, LIVE, HEAPS, ops, freed_old, live, (double)clock() / CLOCKS_PER_SEC - t0);
}

/*
 * What the scribble does to calloc: jemalloc takes a fresh chunk as zeroed
 * (the alloc hook says so: new anonymous memory) and may skip zeroing a
 * large calloc carved from it.  A peer that wrote never-allocated bytes of a
 * chunk can therefore see them come back from calloc; it could have written
 * them just after calloc returned all the same (doc/security.md).  This test
 * only reports how often it happens; small callocs are always zeroed.
 */
Test(security, calloc_after_a_scribble)
{
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	void *warm = rdma_heap_malloc(h, 100);
	cr_assert(warm);
	scribble();
	unsigned dirty_large = 0, dirty_small = 0;
	for (int i = 0; i < 64; i++) {
		size_t n = (i & 1) ? 1000 : 200000;
		uint8_t *p = rdma_heap_calloc(h, 1, n);
		cr_assert(p);
		for (size_t k = 0; k < n; k++) {
			if (p[k]) {
				if (n > 1000)
					dirty_large++;
				else
					dirty_small++;
				break;
			}
		}
	}
	cr_assert_eq(dirty_small, 0, "a small calloc returned non-zero memory");
	printf("security calloc after a scribble: %u of 32 large callocs returned peer-written bytes, 0 of 32 "
	       "small\n",
	       dirty_large);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}
