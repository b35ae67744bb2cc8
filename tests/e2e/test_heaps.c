/* SPDX-License-Identifier: MIT */
/*
 * test_heaps.c - access flags of heaps, several PDs, and keys of a destroyed
 * heap, as the device enforces them.
 */
#include <stdio.h>

#include "e2e.h"

E2E_TEST(heap_read_only, 60)
{
	const unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	rdma_heap_t *ro = rdma_heap_create(&(struct rdma_heap_attr){ .access = acc });
	cr_assert(ro, "rdma_heap_create(LOCAL_WRITE|REMOTE_READ): %s", strerror(errno));
	cr_assert(rdma_heap_access(ro) == acc, "rdma_heap_access = 0x%x, want 0x%x",
		  rdma_heap_access(ro), acc);
	const size_t len = 64 * KiB;
	uint8_t *rbuf = rdma_heap_malloc(ro, len);
	uint8_t *dbuf = rdma_malloc(len), *src = rdma_malloc(len), *tmp = rdma_malloc(len);
	cr_assert(rbuf && dbuf && src && tmp, "allocation: %s", strerror(errno));
	e2e_fill(rbuf, len, 800);
	e2e_fill(dbuf, len, 801);
	e2e_fill(src, len, 802);

	int st = e2e_write(&e2e, rbuf, src, len);
	E2E_ASSERT_WC_REFUSED(st, "RDMA WRITE into a heap registered without REMOTE_WRITE");
	E2E_ASSERT_PATTERN(rbuf, len, 800, "read-only heap buffer after a refused RDMA WRITE");
	cr_log_info("refused RDMA WRITE into the read-only heap: %s", e2e_status_str(st));

	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, dbuf, src, len), "RDMA WRITE into a default-heap buffer");
	E2E_ASSERT_PATTERN(dbuf, len, 802, "default-heap buffer after RDMA WRITE");

	memset(tmp, 0, len);
	E2E_ASSERT_WC_OK(e2e_read(&e2e, tmp, rbuf, len), "RDMA READ from the read-only heap");
	E2E_ASSERT_PATTERN(tmp, len, 800, "RDMA READ from the read-only heap");

	/* LOCAL_WRITE: the read-only heap's memory may still receive a READ's data. */
	E2E_ASSERT_WC_OK(e2e_read(&e2e, rbuf, dbuf, len),
			 "RDMA READ into a read-only-heap buffer (local write)");
	E2E_ASSERT_PATTERN(rbuf, len, 802, "RDMA READ into a read-only-heap buffer");

	rdma_free(rbuf);
	rdma_free(dbuf);
	rdma_free(src);
	rdma_free(tmp);
	cr_assert(rdma_heap_destroy(ro) == 0);
}

E2E_TEST(two_pds, 90)
{
	const size_t small = 256 * KiB, big = 16 * MiB;
	/* One buffer whose chunk exists before the attach, one allocated after. */
	uint8_t *before = rdma_malloc(small), *src = rdma_malloc(big);
	cr_assert(before && src, "allocation: %s", strerror(errno));

	struct ibv_pd *pd2 = ibv_alloc_pd(e2e.ctx);
	cr_assert(pd2, "ibv_alloc_pd: %s", strerror(errno));
	int err = rdma_malloc_attach_pd(pd2);
	cr_assert(err == 0, "rdma_malloc_attach_pd: %s", strerror(err));
	err = rdma_malloc_attach_pd(pd2);
	cr_assert(err == EEXIST, "attaching the PD twice gave %s, want EEXIST", strerror(err));
	uint8_t *after = rdma_malloc(big);
	cr_assert(after, "rdma_malloc(%zu) after attach: %s", big, strerror(errno));

	uint8_t *bufs[2] = { before, after };
	size_t lens[2] = { small, big };
	uint32_t r1[2];
	for (int i = 0; i < 2; i++) {
		uint32_t l1, l2, r2;
		E2E_ASSERT_KEYS(bufs[i], lens[i], NULL, &l1, &r1[i], "keys under the default PD");
		E2E_ASSERT_KEYS(bufs[i], lens[i], pd2, &l2, &r2, "keys under the second PD");
		cr_assert(l1 != l2 && r1[i] != r2,
			  "buffer %d has the same keys under both PDs (lkey 0x%x/0x%x, rkey 0x%x/0x%x)",
			  i, l1, l2, r1[i], r2);
		struct ibv_mr *mr2 = rdma_malloc_mr(bufs[i], lens[i], pd2);
		cr_assert(mr2 && mr2->pd == pd2 && mr2->lkey == l2 && mr2->rkey == r2,
			  "rdma_malloc_mr(pd2) of buffer %d is not pd2's region with those keys", i);
	}

	struct e2e_pair q;
	err = e2e_pair_open(&q, pd2);
	cr_assert(err == 0, "QP pair on the second PD: %s", q.err);
	for (int i = 0; i < 2; i++) {
		char what[96];
		snprintf(what, sizeof(what), "RDMA WRITE of %zu B through the second PD (buffer %s attach)",
			 lens[i], i ? "allocated after" : "existing before");
		e2e_fill(src, lens[i], 1000u + (uint32_t)i);
		memset(bufs[i], 0, lens[i]);
		int st = e2e_write(&q, bufs[i], src, lens[i]);
		cr_assert(st == IBV_WC_SUCCESS, "%s: %s (%s)", what, e2e_status_str(st), q.err);
		E2E_ASSERT_PATTERN(bufs[i], lens[i], 1000u + (uint32_t)i, what);
	}
	/* The default PD's rkey is no key on a QP of the second PD. */
	e2e_fill(src, 4 * KiB, 1010);
	int st = e2e_write_raw(&q, src, 4 * KiB, (uintptr_t)before, r1[0]);
	cr_assert(st > IBV_WC_SUCCESS,
		  "RDMA WRITE through a pd2 QP with the default PD's rkey: want an error completion, got %s",
		  st == IBV_WC_SUCCESS ? "success" : e2e_status_str(st));
	E2E_ASSERT_PATTERN(before, small, 1000, "buffer after a write with another PD's rkey");
	e2e_pair_close(&q);

	err = rdma_malloc_detach_pd(pd2);
	cr_assert(err == 0, "rdma_malloc_detach_pd: %s", strerror(err));
	for (int i = 0; i < 2; i++) {
		uint32_t l, r;
		err = rdma_malloc_keys(bufs[i], 1, pd2, &l, &r);
		cr_assert(err == ENODEV, "keys under a detached PD: %s, want ENODEV", strerror(err));
		errno = 0;
		cr_assert(rdma_malloc_mr(bufs[i], 1, pd2) == NULL && errno == ENODEV,
			  "rdma_malloc_mr under a detached PD: errno %s, want ENODEV", strerror(errno));
	}
	err = rdma_malloc_detach_pd(pd2);
	cr_assert(err == ENODEV, "detaching twice gave %s, want ENODEV", strerror(err));
	/* Every region of pd2 was deregistered, or the PD could not go. */
	err = ibv_dealloc_pd(pd2);
	cr_assert(err == 0, "ibv_dealloc_pd after detach: %s (regions of it still registered?)",
		  strerror(err));

	/* The default PD is unaffected. */
	e2e_fill(src, small, 1020);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, before, src, small), "RDMA WRITE through the default PD after detach");
	E2E_ASSERT_PATTERN(before, small, 1020, "RDMA WRITE through the default PD after detach");
	rdma_free(before);
	rdma_free(after);
	rdma_free(src);
}

E2E_TEST(heap_use_after_destroy, 60)
{
	const size_t len = 64 * KiB;
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h, "rdma_heap_create: %s", strerror(errno));
	uint8_t *victim = rdma_heap_malloc(h, len);
	uint8_t *canary = rdma_malloc(len), *src = rdma_malloc(len);
	cr_assert(victim && canary && src, "allocation: %s", strerror(errno));
	uint32_t rkey;
	E2E_ASSERT_KEYS(victim, len, NULL, NULL, &rkey, "keys of the doomed heap's buffer");
	uintptr_t vaddr = (uintptr_t)victim;

	/* While the heap lives, its key works. */
	e2e_fill(src, len, 1100);
	E2E_ASSERT_WC_OK(e2e_write_raw(&e2e, src, len, vaddr, rkey), "RDMA WRITE before destroy");
	E2E_ASSERT_PATTERN(victim, len, 1100, "RDMA WRITE before destroy");

	e2e_fill(canary, len, 1101);
	cr_assert(rdma_heap_destroy(h) == 0, "rdma_heap_destroy");
	int err = rdma_malloc_keys(victim, 1, NULL, NULL, NULL);
	cr_assert(err == ENOENT, "keys of memory of a destroyed heap: %s, want ENOENT", strerror(err));

	/* Live memory that may now sit at the same addresses. */
	rdma_heap_t *h2 = rdma_heap_create(NULL);
	cr_assert(h2, "rdma_heap_create: %s", strerror(errno));
	uint8_t *reuse = rdma_heap_malloc(h2, len);
	uint8_t *reuse_d = rdma_malloc(len);
	cr_assert(reuse && reuse_d, "allocation: %s", strerror(errno));
	e2e_fill(reuse, len, 1102);
	e2e_fill(reuse_d, len, 1103);
	cr_log_info("destroyed buffer %p; new heap buffer %p, new default buffer %p", (void *)vaddr,
		    (void *)reuse, (void *)reuse_d);

	e2e_fill(src, len, 1104);
	int st = e2e_write_raw(&e2e, src, len, vaddr, rkey);
	cr_assert(st > IBV_WC_SUCCESS,
		  "RDMA WRITE with the rkey of a destroyed heap: want an error completion, got %s",
		  st == IBV_WC_SUCCESS ? "success" : e2e_status_str(st));
	E2E_ASSERT_PATTERN(canary, len, 1101, "live canary after a write with a stale rkey");
	E2E_ASSERT_PATTERN(reuse, len, 1102, "new heap's buffer after a write with a stale rkey");
	E2E_ASSERT_PATTERN(reuse_d, len, 1103, "new default buffer after a write with a stale rkey");

	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, canary, src, len), "RDMA WRITE after the refused one");
	E2E_ASSERT_PATTERN(canary, len, 1104, "RDMA WRITE after the refused one");
	rdma_free(reuse);
	rdma_free(reuse_d);
	rdma_free(canary);
	rdma_free(src);
	cr_assert(rdma_heap_destroy(h2) == 0);
}

/*
 * Memory freed in one heap must never come back from another: free a batch
 * of default-heap objects, then allocate from a read-only heap (and the
 * reverse) with the thread caches warm.  The new objects must lie in chunks
 * of their own heap (other regions), and the device must enforce it: a
 * remote WRITE into the read-only heap's object fails, one into the default
 * heap's object succeeds.
 */
E2E_TEST(heap_isolation, 60)
{
	enum { N = 32 };
	static const size_t isizes[] = { 64, 4 * KiB, 32 * KiB };
	const unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	rdma_heap_t *ro = rdma_heap_create(&(struct rdma_heap_attr){ .access = acc });
	cr_assert(ro, "rdma_heap_create(LOCAL_WRITE|REMOTE_READ): %s", strerror(errno));
	uint8_t *src = rdma_malloc(32 * KiB);
	cr_assert(src);
	for (size_t s = 0; s < sizeof(isizes) / sizeof(isizes[0]); s++) {
		const size_t len = isizes[s];
		for (int dir = 0; dir < 2; dir++) {
			/* dir 0: default heap frees, read-only heap allocates; dir 1: reverse. */
			rdma_heap_t *from = dir ? ro : NULL, *to = dir ? NULL : ro;
			const char *from_name = dir ? "read-only" : "default";
			const char *to_name = dir ? "default" : "read-only";
			void *old[N];
			struct ibv_mr *old_mr[N];
			for (int i = 0; i < N; i++) {
				old[i] = from ? rdma_heap_malloc(from, len) : rdma_malloc(len);
				cr_assert(old[i], "allocation: %s", strerror(errno));
				old_mr[i] = rdma_malloc_mr(old[i], len, NULL);
				cr_assert(old_mr[i], "rdma_malloc_mr: %s", strerror(errno));
			}
			for (int i = 0; i < N; i++)
				rdma_free(old[i]);
			uint8_t *fresh[N];
			for (int i = 0; i < N; i++) {
				fresh[i] = to ? rdma_heap_malloc(to, len) : rdma_malloc(len);
				cr_assert(fresh[i], "allocation: %s", strerror(errno));
			}
			/* First what the device says about the first one (the most recently
			 * freed slot, were the caches shared), then the regions of all. */
			uint8_t *t = fresh[0];
			e2e_fill(t, len, 1400);
			e2e_fill(src, len, 1401);
			char what[128];
			snprintf(what, sizeof(what), "RDMA WRITE into a %zu-byte %s-heap object allocated "
				 "after %s-heap frees", len, to_name, from_name);
			int st = e2e_write(&e2e, t, src, len);
			if (to == ro) {
				E2E_ASSERT_WC_REFUSED(st, what);
				E2E_ASSERT_PATTERN(t, len, 1400, what);
				cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
			} else {
				E2E_ASSERT_WC_OK(st, what);
				E2E_ASSERT_PATTERN(t, len, 1401, what);
			}
			for (int i = 0; i < N; i++) {
				struct ibv_mr *mr = rdma_malloc_mr(fresh[i], len, NULL);
				cr_assert(mr, "rdma_malloc_mr: %s", strerror(errno));
				for (int j = 0; j < N; j++)
					cr_assert(mr != old_mr[j],
						  "a %zu-byte object of the %s heap (%p) lies in a chunk of the "
						  "%s heap (region [%p, +%zu)) after %d frees there",
						  len, to_name, (void *)fresh[i], from_name, mr->addr,
						  mr->length, N);
			}
			for (int i = 0; i < N; i++)
				rdma_free(fresh[i]);
		}
	}
	rdma_free(src);
	cr_assert(rdma_heap_destroy(ro) == 0);
}
