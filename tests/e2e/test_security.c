/* SPDX-License-Identifier: MIT */
/*
 * test_security.c - the security model as the NIC enforces it
 * (doc/security.md).
 *
 *  - metadata_survives_remote_scribble: with the regions' own rkeys,
 *    RDMA-WRITE garbage over the entire registered region (mr->addr,
 *    mr->length) of every chunk the library holds (the default heap's and a
 *    second remote-writable heap's, found with the lookup and checked
 *    against the stats) while they hold thousands of live blocks; then keep
 *    allocating, freeing and reallocating in both, check that no two live
 *    blocks overlap and that every block has working keys, destroy the heap:
 *    the allocator's metadata was never reachable.  The peer's source buffer
 *    is the one memory this suite registers itself (it is the peer's, not
 *    rdmalloc's).  With the arena created with the hooks (metadata in our
 *    chunks) this test crashes.
 *  - key_after_free: what a peer's key does after rdma_free() (still works:
 *    the chunk stays registered) and after rdma_heap_destroy() (refused).
 *  - local_only_heap_refuses_remote_access: a heap without remote flags
 *    cannot be read or written through its keys (what the LD_PRELOAD heap is
 *    by default).
 */
#include <stdio.h>
#include <stdlib.h>

#include "e2e.h"

static uint64_t xs(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return *s = x;
}

struct blk {
	uint8_t *p;
	size_t n;
	int heap;
	uint32_t seed; /* 0: garbage (scribbled) */
};

#define NREG 512

/*
 * Every registered region (under the default PD) within 64 GiB of @pivot,
 * found with the lookup itself at every 2 MiB granule (a lookup never
 * touches the address it is given).  Chunks are mapped near each other, so
 * this finds all of them; the caller checks that against the stats.
 */
static size_t scan_regions(const void *pivot, struct ibv_mr **regs)
{
	const uintptr_t span = (uintptr_t)64 << 30, step = 2 * MiB;
	uintptr_t lo = (uintptr_t)pivot > span ? ((uintptr_t)pivot - span) & ~(step - 1) : step;
	size_t n = 0;
	for (uintptr_t a = lo; a < (uintptr_t)pivot + span; a += step) {
		struct ibv_mr *mr = rdma_malloc_mr((void *)a, 1, NULL);
		if (!mr)
			continue;
		if (n && regs[n - 1] == mr)
			continue;
		cr_assert(n < NREG, "too many regions");
		regs[n++] = mr;
	}
	return n;
}

static int listed(struct ibv_mr *const *regs, size_t n, const struct ibv_mr *mr)
{
	for (size_t i = 0; i < n; i++)
		if (regs[i] == mr)
			return 1;
	return 0;
}

static size_t pick_size(uint64_t x)
{
	switch ((x >> 4) % 50) {
	case 0: return 1 + (x >> 12) % (2 * MiB);
	case 1: case 2: return 1 + (x >> 12) % 300000;
	default: return 1 + (x >> 12) % 3000;
	}
}

/* The peer's garbage: memory of its own, registered by the peer itself
 * (not rdmalloc memory: every chunk of the library gets scribbled). */
static uint8_t *peer_garbage(size_t len, struct ibv_mr **mr)
{
	void *g = NULL;
	cr_assert_eq(posix_memalign(&g, 4096, len), 0);
	uint64_t rng = 0x5eed5eed5eedull;
	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t x = xs(&rng);
		/* random words, zeros, all-ones, and words that look like
		 * pointers into the heaps (a forged free list) */
		uint64_t w = (x & 3) == 0 ? x : (x & 3) == 1 ? 0 : (x & 3) == 2 ? ~(uint64_t)0
								 : (uint64_t)(uintptr_t)&rng + (x >> 40);
		memcpy((uint8_t *)g + i, &w, 8);
	}
	*mr = ibv_reg_mr(e2e.pd, g, len, IBV_ACCESS_LOCAL_WRITE);
	cr_assert(*mr, "ibv_reg_mr of the peer's buffer: %s", strerror(errno));
	return g;
}

/* RDMA WRITE @len bytes of @g over [raddr, raddr+len) with @rkey. */
static int peer_write(uint8_t *g, struct ibv_mr *gmr, size_t glen, uint64_t raddr, uint32_t rkey, size_t len)
{
	for (size_t off = 0; off < len;) {
		size_t n = len - off;
		if (n > glen)
			n = glen;
		if (n > e2e.max_msg)
			n = e2e.max_msg;
		if (e2e_post_write(&e2e, g, n, gmr->lkey, raddr + off, rkey, off))
			return E2E_ST_POST;
		int st = e2e_wait(&e2e, 0, NULL, E2E_WC_TIMEOUT_MS);
		if (st != IBV_WC_SUCCESS)
			return st;
		off += n;
	}
	return IBV_WC_SUCCESS;
}

E2E_TEST(metadata_survives_remote_scribble, 300)
{
	enum { LIVE = 3000, OPS = 20000 };
	static struct ibv_mr *regs[NREG];
	const size_t glen = 4 * MiB;
	struct ibv_mr *gmr;
	uint8_t *garbage = peer_garbage(glen, &gmr);
	uint64_t rng = 0x1234abcdull;
	rdma_heap_t *h[2] = { rdma_heap_default(), rdma_heap_create(NULL) };
	cr_assert(h[1], "rdma_heap_create: %s", strerror(errno));
	cr_assert(rdma_heap_access(h[0]) & IBV_ACCESS_REMOTE_WRITE, "the default heap is not remote-writable");
	cr_assert(rdma_heap_access(h[1]) & IBV_ACCESS_REMOTE_WRITE);

	static struct blk b[LIVE];
	for (int i = 0; i < LIVE; i++) {
		uint64_t x = xs(&rng);
		b[i].heap = (int)(x & 1);
		b[i].n = pick_size(x);
		b[i].p = rdma_heap_malloc(h[b[i].heap], b[i].n);
		cr_assert(b[i].p, "allocation %d: %s", i, strerror(errno));
		memset(b[i].p, 0x11, b[i].n);
	}
	/* Every region of the library (two heaps, both remote-writable),
	 * whatever it holds.  They must add up to every chunk byte the
	 * library holds, or a chunk escaped the scan. */
	size_t nregs = scan_regions(b[0].p, regs), reg_bytes = 0;
	for (size_t r = 0; r < nregs; r++)
		reg_bytes += regs[r]->length;
	for (int i = 0; i < LIVE; i++)
		cr_assert(listed(regs, nregs, rdma_malloc_mr(b[i].p, 1, NULL)), "block %d's region was not found", i);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	/* Reserve chunks are held but no memory of the program's yet: lookups
	 * do not reach them (doc/design.md, "The reserve"). */
	cr_assert(reg_bytes == st.chunk_bytes - st.reserve_bytes,
		  "the %zu regions found cover %zu bytes, the library holds %llu (%llu in reserve): a chunk "
		  "escaped the scan", nregs, reg_bytes, (unsigned long long)st.chunk_bytes,
		  (unsigned long long)st.reserve_bytes);
	size_t with_blocks = 0;
	for (size_t r = 0; r < nregs; r++) {
		int used = 0;
		for (int i = 0; i < LIVE && !used; i++)
			used = rdma_malloc_mr(b[i].p, 1, NULL) == regs[r];
		with_blocks += used;
	}

	/* The peer: WRITE garbage over every byte of every region, with the
	 * region's own rkey, through the NIC. */
	size_t written = 0;
	for (size_t r = 0; r < nregs; r++) {
		int st2 = peer_write(garbage, gmr, glen, (uintptr_t)regs[r]->addr, regs[r]->rkey, regs[r]->length);
		E2E_ASSERT_WC_OK(st2, "RDMA WRITE of garbage over a heap's region");
		written += regs[r]->length;
	}
	/* It landed: the blocks hold garbage now. */
	unsigned changed = 0;
	for (int i = 0; i < LIVE; i++)
		changed += b[i].p[0] != 0x11 || b[i].p[b[i].n - 1] != 0x11;
	cr_assert_gt(changed, LIVE / 2, "the scribble did not reach the blocks (%u of %d changed)", changed, LIVE);

	/* The allocator goes on: free the scribbled blocks as we go, allocate,
	 * realloc, each new block with its own pattern. */
	unsigned long freed_old = 0;
	for (int op = 0; op < OPS; op++) {
		uint64_t x = xs(&rng);
		struct blk *k = &b[x % LIVE];
		if (k->p && !k->seed) {
			rdma_free(k->p);
			k->p = NULL;
			freed_old++;
		}
		if (k->p && (x & 0x100)) {
			size_t n = pick_size(x >> 8);
			uint8_t *q = rdma_realloc(k->p, n);
			cr_assert(q, "realloc after the scribble: %s", strerror(errno));
			size_t keep = k->n < n ? k->n : n;
			E2E_ASSERT_PATTERN(q, keep, k->seed, "a block's contents across realloc");
			k->p = q, k->n = n;
		} else {
			rdma_free(k->p);
			k->heap = (int)((x >> 40) & 1);
			k->n = pick_size(x >> 8);
			k->p = (x & 0x200) ? rdma_heap_calloc(h[k->heap], 1, k->n) : rdma_heap_malloc(h[k->heap], k->n);
			cr_assert(k->p, "allocation after the scribble: %s", strerror(errno));
			k->seed = (uint32_t)op + 1;
		}
		e2e_fill(k->p, k->n, k->seed);
		struct ibv_mr *mr = rdma_malloc_mr(k->p, k->n, NULL);
		cr_assert(mr && (uint8_t *)k->p >= (uint8_t *)mr->addr &&
				  (uint8_t *)k->p + k->n <= (uint8_t *)mr->addr + mr->length,
			  "block %p (%zu B) has no region covering it", (void *)k->p, k->n);
	}
	unsigned long live = 0;
	for (int i = 0; i < LIVE; i++) {
		if (b[i].p && b[i].seed) {
			E2E_ASSERT_PATTERN(b[i].p, b[i].n, b[i].seed, "a live block after the churn (blocks overlap?)");
			live++;
		}
	}
	/* Keys still work through the NIC: a WRITE into a new block. */
	uint8_t *t = rdma_heap_malloc(h[1], 64 * KiB);
	cr_assert(t);
	memset(t, 0, 64 * KiB);
	uint32_t trkey;
	E2E_ASSERT_KEYS(t, 64 * KiB, NULL, NULL, &trkey, "keys of a new block");
	E2E_ASSERT_WC_OK(peer_write(garbage, gmr, glen, (uintptr_t)t, trkey, 64 * KiB),
			 "RDMA WRITE into a new block after the scribble");
	E2E_ASSERT_SAME(t, garbage, 64 * KiB, "RDMA WRITE into a new block after the scribble");
	for (int i = 0; i < LIVE; i++)
		if (b[i].p && b[i].heap == 0)
			rdma_free(b[i].p);
	cr_assert_eq(rdma_heap_destroy(h[1]), 0);
	cr_assert_eq(ibv_dereg_mr(gmr), 0);
	free(garbage);
	cr_log_info("scribble: %zu MiB of garbage RDMA-written over %zu regions (every byte of 2 heaps; %zu "
		    "regions hold blocks) under %d live blocks; then %d operations, %lu scribbled blocks freed, %lu "
		    "live blocks checked",
		    written >> 20, nregs, with_blocks, LIVE, OPS, freed_old, live);
	printf("e2e security scribble: %zu MiB written over %zu regions (%zu with blocks), %d live blocks, %d "
	       "operations after, %lu blocks checked byte for byte\n",
	       written >> 20, nregs, with_blocks, LIVE, OPS, live);
}

/*
 * After rdma_free() the chunk stays registered: a peer holding the key still
 * reads (and writes) the freed bytes.  After rdma_heap_destroy() the key is
 * dead.  (doc/security.md: "what happens to a peer's key after free".)
 */
E2E_TEST(key_after_free, 60)
{
	const size_t len = 64 * KiB;
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	uint8_t *secret = rdma_heap_malloc(h, len), *keep = rdma_heap_malloc(h, 64);
	uint8_t *dst = rdma_malloc(len);
	cr_assert(secret && keep && dst);
	e2e_fill(secret, len, 1500);
	uint32_t rkey;
	E2E_ASSERT_KEYS(secret, len, NULL, NULL, &rkey, "keys of the block");
	uintptr_t addr = (uintptr_t)secret;
	rdma_free(secret);
	cr_assert_eq(rdma_malloc_keys((void *)addr, 1, NULL, NULL, NULL), 0,
		     "the chunk of a freed block stays registered (the lookup still answers)");
	memset(dst, 0, len);
	uint32_t lkey;
	E2E_ASSERT_KEYS(dst, len, NULL, &lkey, NULL, "keys of the destination");
	int st = e2e_post_read(&e2e, dst, len, lkey, addr, rkey, 7);
	cr_assert_eq(st, 0);
	E2E_ASSERT_WC_OK(e2e_wait(&e2e, 0, NULL, E2E_WC_TIMEOUT_MS), "RDMA READ of a freed block with its old key");
	/* Freed bytes are still the old contents: rdmalloc does not clear
	 * them, and a big block's double-free mark is not in band
	 * (doc/security.md says both). */
	size_t same = 0;
	for (size_t i = 0; i < len; i++)
		same += dst[i] == e2e_pattern_byte(i, 1500);
	cr_assert_eq(same, len, "key after free: the peer read %zu of %zu freed bytes unchanged", same, len);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	st = e2e_write_raw(&e2e, dst, len, addr, rkey);
	cr_assert(st > IBV_WC_SUCCESS, "RDMA WRITE with the key of a destroyed heap: want an error, got %s",
		  st == IBV_WC_SUCCESS ? "success" : e2e_status_str(st));
	rdma_free(dst);
}

E2E_TEST(local_only_heap_refuses_remote_access, 60)
{
	const size_t len = 16 * KiB;
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(h);
	uint8_t *p = rdma_heap_malloc(h, len), *src = rdma_malloc(len);
	cr_assert(p && src);
	e2e_fill(p, len, 1600);
	e2e_fill(src, len, 1601);
	int st = e2e_write(&e2e, p, src, len);
	cr_assert(st > IBV_WC_SUCCESS, "RDMA WRITE into a local-only heap: want an error, got %s",
		  st == IBV_WC_SUCCESS ? "success" : e2e_status_str(st));
	E2E_ASSERT_PATTERN(p, len, 1600, "a local-only block after a refused WRITE");
	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	st = e2e_read(&e2e, src, p, len);
	cr_assert(st > IBV_WC_SUCCESS, "RDMA READ from a local-only heap: want an error, got %s",
		  st == IBV_WC_SUCCESS ? "success" : e2e_status_str(st));
	rdma_free(p);
	rdma_free(src);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}
