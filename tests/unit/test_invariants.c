/* SPDX-License-Identifier: MIT */
/*
 * test_invariants.c - invariants 2, 4, 6 and 7 of the design:
 *  2 registered memory is never purged, decommitted or unmapped;
 *  4 no hook on jemalloc's own arenas, no deadlock when jemalloc is
 *    re-entered from inside a registration;
 *  6 with no device, allocation works and lookups say ENODEV;
 *  7 a failed registration fails the allocation cleanly, leaving nothing.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "reserve.h"
#include "heap.h"
#include "rdma_malloc.h"

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

/* Every page of every live region is resident and still mapped. */
static void assert_all_registered_pages_resident(void)
{
	static struct fake_mr_info mrs[FAKE_MAX_MRS];
	rdmalloc_reserves_settle(); /* no region half made or half dropped by the reserve's thread */
	size_t n = fake_snapshot(mrs, FAKE_MAX_MRS);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	cr_assert_gt(n, 0);
	for (size_t i = 0; i < n; i++) {
		size_t pages = mrs[i].len / page;
		unsigned char *vec = malloc(pages);
		cr_assert_eq(mincore(mrs[i].addr, mrs[i].len, vec), 0,
			     "registered region [%p, +%zu) is no longer mapped: %s", mrs[i].addr, mrs[i].len,
			     strerror(errno));
		for (size_t k = 0; k < pages; k++)
			cr_assert(vec[k] & 1, "page %zu of registered region %p was purged", k, mrs[i].addr);
		free(vec);
	}
}

Test(invariants, 2_no_purge_of_registered_memory, .init = NULL, .timeout = 120)
{
	fake_verbs_install(1);
	/* Sizes that jemalloc purges eagerly when it may: large extents,
	 * oversize ones (>= 8 MiB) and slabs emptied by mass frees. */
	static const size_t sizes[] = { 64, 4096, 300000, 1 << 20, 9 << 20, 16 << 20 };
	enum { N = 48 };
	for (int round = 0; round < 30; round++) {
		void *p[N];
		for (int i = 0; i < N; i++) {
			size_t s = sizes[(i + round) % 6];
			p[i] = rdma_malloc(s);
			cr_assert(p[i]);
			memset(p[i], round, s < 65536 ? s : 65536);
		}
		for (int i = 0; i < N; i++)
			rdma_free(p[i]);
	}
	/* Give a decay-driven purge time to happen if it were allowed. */
	usleep(200000);
	void *again = rdma_malloc(1 << 20);
	rdma_free(again);
	assert_all_registered_pages_resident();
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.chunks, st.mrs, "one region per chunk with one PD");
}

Test(invariants, 4_no_hooks_on_jemallocs_own_arenas)
{
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *p = rdma_malloc(10);
	const void *def = rdmalloc_default_extent_hooks();
	cr_assert(def);
	unsigned n = rdmalloc_automatic_arenas();
	cr_assert_gt(n, 0);
	for (unsigned a = 0; a < n; a++) {
		const void *hooks = rdmalloc_arena_hooks(a);
		cr_assert(hooks == NULL /* not initialised yet */ || hooks == def,
			  "automatic arena %u carries non-default hooks", a);
	}
	unsigned ours[] = { rdmalloc_heap_arena((struct rdmalloc_heap *)rdma_heap_default()),
			    rdmalloc_heap_arena((struct rdmalloc_heap *)h) };
	for (size_t i = 0; i < 2; i++) {
		cr_assert_geq(ours[i], n, "a heap uses automatic arena %u", ours[i]);
		cr_assert_neq(rdmalloc_arena_hooks(ours[i]), def, "heap arena %u has default hooks", ours[i]);
	}
	rdma_free(p);
	rdma_heap_destroy(h);
}

Test(invariants, 4_jemalloc_reentered_inside_registration, .timeout = 60)
{
	fake_verbs_install(1);
	fake_reenter_jemalloc(1);
	/* Each new chunk registers while jemalloc is re-entered; a hook on
	 * arena 0 or a lock held across the hook would deadlock here. */
	void *p[64];
	for (int i = 0; i < 64; i++)
		cr_assert(p[i] = rdma_malloc((size_t)(i + 1) << 18));
	cr_assert(rdma_malloc_attach_pd(fake_pd(1)) == 0);
	for (int i = 0; i < 64; i++)
		rdma_free(p[i]);
	cr_assert_gt(fake_reg_calls(), 4);
}

Test(invariants, 6_no_device_allocation_works, .init = cr_redirect_stderr)
{
	fake_verbs_install(0);
	errno = 0;
	cr_assert_null(rdma_malloc_default_pd());
	cr_assert_eq(errno, ENODEV);
	char *p = rdma_malloc(1 << 20);
	cr_assert(p);
	memset(p, 1, 1 << 20);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, NULL, NULL), ENODEV, "rdmalloc memory, no PD");
	int on_stack = 0;
	cr_assert_eq(rdma_malloc_keys(&on_stack, 1, NULL, NULL, NULL), ENOENT);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.pds, 0);
	cr_assert_gt(st.chunks, 0);
	cr_assert_eq(st.unregistered_chunks, st.chunks);
	cr_assert_eq(st.fallbacks, 1);
	cr_assert_eq(fake_reg_calls(), 0);
	rdma_free(p);
	fflush(stderr);
	cr_assert_stderr_eq_str("rdmalloc: warning: fake backend: no device: memory is allocated but not "
				"registered (key lookups fail with ENODEV)\n");
}

Test(invariants, 7_failed_registration_fails_cleanly, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_BIG_BLOCK", "0", 1); /* jemalloc's chunks: it retries a smaller one */
	fake_verbs_install(1);
	void *warm = rdma_malloc(16);
	struct rdma_malloc_stats before = stats();
	size_t mrs = fake_live_mrs();
	fake_fail_reg_from(fake_reg_calls() + 1);
	for (int i = 0; i < 5; i++) {
		errno = 0;
		cr_assert_null(rdma_malloc((size_t)64 << 20), "allocation succeeded without registration");
		cr_assert_eq(errno, ENOMEM);
	}
	struct rdma_malloc_stats after = stats();
	/* Under that pressure the reserve was given up first (its chunk and
	 * region gone); every other count is as before. */
	cr_assert_eq(after.chunks - after.reserve_chunks, before.chunks - before.reserve_chunks,
		     "a chunk was kept after its registration failed");
	cr_assert_eq(after.chunk_bytes - after.reserve_bytes, before.chunk_bytes - before.reserve_bytes);
	cr_assert_eq(after.mrs - after.reserve_chunks, before.mrs - before.reserve_chunks);
	cr_assert_eq(fake_live_mrs(), mrs - (before.reserve_chunks - after.reserve_chunks));
	cr_assert_geq(after.registration_failures, 5);
	/* A registration that fails once, then succeeds on jemalloc's retry
	 * with a smaller chunk: the allocation succeeds and errno is intact. */
	unsigned long failures = stats().registration_failures;
	fake_fail_reg(fake_reg_calls() + 1, 1);
	errno = 4321;
	void *after_retry = rdma_malloc((size_t)40 << 20);
	cr_assert(after_retry);
	cr_assert_eq(stats().registration_failures, failures + 1, "no registration failed and was retried");
	cr_assert_eq(errno, 4321, "errno changed by a successful allocation");
	rdma_free(after_retry);
	fake_fail_reg_from(fake_reg_calls() + 1);
	/* Memory that needs no new chunk still works, and recovery is clean. */
	void *small = rdma_malloc(16);
	cr_assert(small);
	fake_fail_reg_from(0);
	void *big = rdma_malloc((size_t)64 << 20);
	cr_assert(big);
	cr_assert_eq(rdma_malloc_keys(big, (size_t)64 << 20, NULL, NULL, NULL), 0);
	rdma_free(big);
	rdma_free(small);
	rdma_free(warm);
	fflush(stderr);
	cr_assert_stderr_neq_str("", "the failure was not logged");
}

Test(invariants, 7_max_registered_refuses_cleanly, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_MAX_REGISTERED", "24M", 1);
	fake_verbs_install(1);
	void *a = rdma_malloc(1 << 20);
	cr_assert(a);
	errno = 0;
	cr_assert_null(rdma_malloc((size_t)32 << 20));
	cr_assert_eq(errno, ENOMEM);
	struct rdma_malloc_stats st = stats();
	cr_assert_geq(st.limit_refusals, 1);
	cr_assert_leq(st.chunk_bytes, (uint64_t)24 << 20);
	rdma_free(a);
}

Test(invariants, heap_destroy_releases_everything)
{
	fake_verbs_install(1);
	struct rdma_malloc_stats before = stats();
	size_t mrs = fake_live_mrs();
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(h);
	void *p[20];
	for (int i = 0; i < 20; i++)
		cr_assert(p[i] = rdma_heap_malloc(h, (size_t)(i + 1) << 19));
	const struct fake_mr_info *f = fake_find(fake_pd(0), p[19]);
	cr_assert(f);
	void *region = f->addr;
	size_t len = f->len;
	cr_assert_eq(f->access, IBV_ACCESS_LOCAL_WRITE, "the heap's access flags were not used");
	rdma_free(p[3]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	struct rdma_malloc_stats after = stats();
	cr_assert_eq(after.chunks, before.chunks);
	cr_assert_eq(after.chunk_bytes, before.chunk_bytes);
	cr_assert_eq(after.mrs, before.mrs);
	cr_assert_eq(fake_live_mrs(), mrs, "regions of the destroyed heap are still registered");
	unsigned char v;
	cr_assert_eq(mincore(region, len < 4096 ? len : 4096, &v), -1, "the heap's chunk is still mapped");
	cr_assert_eq(rdma_malloc_keys(p[0], 1, NULL, NULL, NULL), ENOENT, "stale pointer still has keys");
	cr_assert_eq(rdma_heap_destroy(h), EINVAL, "a second destroy was not refused");
	cr_assert_eq(rdma_heap_destroy(NULL), EINVAL);
	cr_assert_eq(rdma_heap_destroy(rdma_heap_default()), EINVAL);
}
