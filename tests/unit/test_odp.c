/* SPDX-License-Identifier: MIT */
/*
 * test_odp.c - RDMA_HEAP_ODP against the fake backend: the capability check
 * (ibv_query_device_ex odp_caps) refuses a device without RC ODP for the
 * heap's operations; chunks are registered with IBV_ACCESS_ON_DEMAND; an ODP
 * heap's freed pages are purged (no pinning) while every other heap still
 * refuses; rdma_malloc_prefetch() advises the right region.  rxe has no ODP:
 * the guest only proves the refusal (tests/e2e/test_modes.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "heap.h"
#include "rdma_malloc.h"

#define MiB ((size_t)1 << 20)
#define LW IBV_ACCESS_LOCAL_WRITE
#define RR IBV_ACCESS_REMOTE_READ
#define RW IBV_ACCESS_REMOTE_WRITE
#define ALL_RC (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | \
		IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC)

static void setup(void)
{
	fake_verbs_install(1);
}

TestSuite(odp, .init = setup);

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static rdma_heap_t *odp_heap(unsigned access)
{
	return rdma_heap_create(&(struct rdma_heap_attr){ .access = access, .flags = RDMA_HEAP_ODP });
}

Test(odp, device_without_odp_is_refused)
{
	fake_set_odp(0, 0);
	errno = 0;
	cr_assert_null(odp_heap(LW | RR | RW));
	cr_assert_eq(errno, EOPNOTSUPP);
	/* RC ODP without WRITE: a heap peers may write is refused, a read-only one not. */
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC & ~IBV_ODP_SUPPORT_WRITE);
	errno = 0;
	cr_assert_null(odp_heap(LW | RR | RW));
	cr_assert_eq(errno, EOPNOTSUPP);
	cr_assert(odp_heap(LW | RR), "%s", strerror(errno));
	/* ODP with huge pages makes no sense (ODP does not keep huge pages). */
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	errno = 0;
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){
		.access = LW, .flags = RDMA_HEAP_ODP | RDMA_HEAP_HUGEPAGES }));
	cr_assert_eq(errno, EINVAL);
	/* The default heap and allocation are unaffected by a refused ODP heap. */
	void *p = rdma_malloc(100);
	cr_assert(p);
	rdma_free(p);
}

Test(odp, chunks_are_registered_on_demand)
{
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	rdma_heap_t *h = odp_heap(LW | RR | RW);
	cr_assert(h, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_flags(h), RDMA_HEAP_ODP);
	cr_assert_eq(rdma_heap_access(h), LW | RR | RW | IBV_ACCESS_ON_DEMAND);
	void *p = rdma_heap_malloc(h, 1000);
	cr_assert_eq(fake_find(fake_pd(0), p)->access, LW | RR | RW | IBV_ACCESS_ON_DEMAND);
	/* A change of flags keeps ON_DEMAND. */
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), 0);
	cr_assert_eq(fake_find(fake_pd(0), p)->access, LW | RR | IBV_ACCESS_ON_DEMAND);
}

static size_t resident_pages(void *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 0;
	unsigned char *vec = malloc(len / page);
	cr_assert_eq(mincore(p, len, vec), 0, "mincore(%p, %zu): %s", p, len, strerror(errno));
	for (size_t i = 0; i < len / page; i++)
		n += vec[i] & 1;
	free(vec);
	return n;
}

/* Freed memory of an ODP heap goes back to the kernel; a pinned heap's
 * stays (invariant 2 still holds for it). */
Test(odp, odp_heaps_purge_pinned_heaps_do_not)
{
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	rdma_heap_t *odp = odp_heap(LW), *pinned = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(odp && pinned);
	const size_t len = 8 * MiB;
	char *a = rdma_heap_aligned_alloc(odp, 4096, len), *b = rdma_heap_aligned_alloc(pinned, 4096, len);
	cr_assert(a && b);
	memset(a, 1, len);
	memset(b, 1, len);
	uint64_t refused0 = stats().purges_refused;
	rdma_free(a);
	rdma_free(b);
	rdmalloc_heap_purge(odp);
	rdmalloc_heap_purge(pinned);
	struct rdma_malloc_stats st = stats();
	cr_assert_gt(st.odp_purges, 0, "the ODP heap purged nothing");
	cr_assert_gt(st.purges_refused, refused0, "the pinned heap's purge was not refused");
	cr_assert_lt(resident_pages(a, len), len / 4096 / 2, "ODP heap kept %zu resident pages",
		     resident_pages(a, len));
	cr_assert_eq(resident_pages(b, len), len / 4096, "the pinned heap lost pages");
}

Test(odp, prefetch)
{
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	rdma_heap_t *h = odp_heap(LW | RR);
	char *p = rdma_heap_malloc(h, 4096);
	cr_assert_eq(rdma_malloc_prefetch(p + 10, 100, NULL, 1), 0);
	struct fake_advice a = fake_last_advice();
	cr_assert_eq(a.calls, 1);
	cr_assert_eq(a.advice, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE);
	cr_assert_eq(a.flags, IBV_ADVISE_MR_FLAG_FLUSH);
	cr_assert_eq(a.addr, p + 10);
	cr_assert_eq(a.len, 100);
	cr_assert_eq(a.lkey, rdma_malloc_mr(p, 1, NULL)->lkey);
	cr_assert_eq(rdma_malloc_prefetch(p, 100, NULL, 0), 0);
	cr_assert_eq(fake_last_advice().advice, IBV_ADVISE_MR_ADVICE_PREFETCH);
	/* Not ODP memory, not rdmalloc memory, unattached PD. */
	char *q = rdma_malloc(100);
	cr_assert_eq(rdma_malloc_prefetch(q, 100, NULL, 0), EINVAL);
	int x;
	cr_assert_eq(rdma_malloc_prefetch(&x, 4, NULL, 0), ENOENT);
	cr_assert_eq(rdma_malloc_prefetch(p, 100, fake_pd(3), 0), ENODEV);
	cr_assert_eq(fake_last_advice().calls, 2, "advised although refused");
}
