/* SPDX-License-Identifier: MIT */
/*
 * test_regressions.c - library bugs the fault sweeps found, each fixed; the
 * tests keep them fixed (doc/reliability.md, "Bugs found and fixed").
 * The comments describe each bug as it was found.
 */
#include "fault_util.h"

#include <criterion/redirect.h>

/*
 * BUG 1 (src/reg/chunk.c, rdmalloc_chunk_create(), label "fail:"): when a new
 * chunk's registration with one PD fails, the registrations already made for
 * it are undone with dereg_all(c) and the chunk is then unmapped whatever
 * dereg_all() returned.  If a deregistration fails there, a chunk that is
 * still registered (pinned, reachable by its rkey) is unmapped: the very
 * thing release() refuses to do ("kept mapped: deregistration failed").
 * Fix: `if (dereg_all(c)) { log; keep the mapping, do not free the
 * descriptor's range } else munmap(p, size);`, as release() does.
 */
Test(known_bugs, chunk_undo_unmaps_a_chunk_that_is_still_registered, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	/* The next chunk registers with the default PD (call 1), then with the
	 * second PD (call 2, made to fail); the undo deregisters the first
	 * (made to fail too). */
	rdmalloc_fault_arm(RDMALLOC_FAULT_REG, 2, 1, 0);
	rdmalloc_fault_arm(RDMALLOC_FAULT_DEREG, 1, 1, 0);
	errno = 0;
	void *p = rdma_malloc((size_t)64 << 20);
	rdmalloc_fault_disarm_all();
	cr_assert_eq(rdmalloc_fault_injected(RDMALLOC_FAULT_DEREG), 1, "the undo did not deregister");
	fu_check_accounting("after the failed chunk");
	/* The region is still registered: its memory must still be mapped. */
	fu_check_registered_mapped("after a chunk whose undo failed to deregister");
	rdma_free(p);
}

/*
 * BUG 2 (src/heap/heap.c, rdma_heap_destroy(), the range check): a handle inside
 * heap_store[] but not at the start of a heap passes the check, and h->slot
 * is then read from the middle of a heap struct (misaligned; UBSan reports
 * it) and used as an index into heaps[]: an out-of-bounds read, a crash or
 * the destruction of the wrong heap instead of EINVAL.  Fix: also refuse
 * ((uintptr_t)h - (uintptr_t)heap_store) % sizeof(*h) != 0.
 */
Test(known_bugs, heap_destroy_of_a_misaligned_handle_is_einval)
{
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	for (size_t off = 1; off < 96; off++)
		cr_assert_eq(rdma_heap_destroy((rdma_heap_t *)((char *)h + off)), EINVAL,
			     "a handle %zu bytes into a heap was not refused", off);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/*
 * BUG 3 (src/reg/chunk.c, rdmalloc_chunks_detach() then release()): when
 * ibv_dereg_mr fails in rdma_malloc_detach_pd(), the region is leaked
 * (documented: "the PD is detached all the same; the failure is counted")
 * but the chunk keeps no trace of it.  When the chunk's heap is destroyed
 * later, release() deregisters the remaining slots, which succeed, and
 * unmaps a chunk that the leaked region still covers: registered memory is
 * unmapped, against invariant 2 and release()'s own "kept mapped" rule.
 * Fix: remember a failed deregistration in the chunk (a flag set where
 * rdmalloc_dereg_mr() fails in detach, attach's undo and sync_regs()) and keep
 * such a chunk mapped in release().
 */
Test(known_bugs, chunk_with_a_region_leaked_by_detach_stays_mapped, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *p = rdma_heap_malloc(h, (size_t)4 << 20);
	cr_assert(p);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	rdmalloc_fault_arm(RDMALLOC_FAULT_DEREG, 1, 0, 0);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), EIO);
	rdmalloc_fault_disarm_all();
	fu_check_registered_mapped("after the failed detach");
	cr_assert_eq(rdma_heap_destroy(h), 0);
	fu_check_accounting("after destroy");
	fu_check_registered_mapped("after destroying the heap of a chunk with a leaked region");
}

/*
 * BUG 5 (src/reg/chunk.c, rereg_one(), found in review): when an access change
 * replaced a region (new keys) and ibv_dereg_mr of the old region failed,
 * the old region stayed registered but the chunk kept no trace of it, so
 * destroying the heap unmapped memory that region still covered: the twin
 * of bug 3 on the re-registration path.  Fix: every deregistration of a
 * chunk's region goes through one helper that marks the chunk.
 */
Test(known_bugs, chunk_with_a_region_leaked_by_an_access_change_stays_mapped, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *p = rdma_heap_malloc(h, (size_t)4 << 20);
	cr_assert(p);
	rdmalloc_fault_arm(RDMALLOC_FAULT_DEREG, 1, 0, 0);
	cr_assert_eq(rdma_heap_set_access(h, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
					  RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL), 0);
	rdmalloc_fault_disarm_all();
	fu_check_registered_mapped("after the access change whose deregistration failed");
	cr_assert_eq(rdma_heap_destroy(h), 0);
	fu_check_registered_mapped("after destroying the heap of a chunk with a leaked region");
}

/*
 * BUG 4 (src/api/init.c, rdmalloc_init_slow(); the cause is src/sys/options.c's
 * rdmalloc_parse_size() setting errno = 0 before strtoull): the call that
 * initialises the library changes errno even when it succeeds, against the
 * header's "Allocation functions leave errno alone when they succeed".
 * Fix: save errno in rdmalloc_init_slow() and restore it after pthread_once.
 */
Test(known_bugs, first_allocation_of_the_process_keeps_errno)
{
	fake_verbs_install(1);
	errno = 1234;
	void *p = rdma_malloc(100);
	cr_assert(p);
	cr_assert_eq(errno, 1234, "the first allocation of the process set errno to %d", errno);
	rdma_free(p);
}
