/* SPDX-License-Identifier: MIT */
/*
 * test_odp.c - RDMA_HEAP_ODP against the fake backend: the capability check
 * (ibv_query_device_ex odp_caps) refuses a device without RC ODP for the
 * heap's operations; chunks are registered with IBV_ACCESS_ON_DEMAND; an ODP
 * heap's freed pages go back to the kernel when jemalloc decommits them (no
 * pinning) while every other heap's stay; rdma_malloc_prefetch() advises
 * the right region.  rxe has no ODP:
 * the guest only proves the refusal (tests/e2e/test_modes.c).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "stderr_said.h"
#include "reserve.h"
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

/* Every block jemalloc's (the pinned heaps' 64 KiB and over are chunks of
 * their own by default, which no arena purge reaches). */
static void setup_no_big(void)
{
	setenv("RDMALLOC_BIG_BLOCK", "0", 1);
	setup();
}

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static rdma_heap_t *odp_heap(unsigned access)
{
	return rdma_heap_create(&(struct rdma_heap_attr){ .access = access, .flags = RDMA_HEAP_ODP });
}

static void setup_said(void)
{
	cr_redirect_stderr();
	setup();
}

Test(odp, device_without_odp_is_refused, .init = setup_said)
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
	/* A device whose capabilities cannot be queried: refused the same,
	 * never with the query's errno (rdma_heap_create(3) lists what it
	 * answers). */
	fake_fail_odp_query(ENOMEM);
	errno = 0;
	cr_assert_null(odp_heap(LW));
	cr_assert_eq(errno, EOPNOTSUPP, "%s", strerror(errno));
	fake_fail_odp_query(0);
	char said[4096];
	stderr_said(said, sizeof(said));
	cr_assert(strstr(said, "rdmalloc: warning: the device's on-demand paging could not be queried (Cannot "
			       "allocate memory): ODP heaps are refused with EOPNOTSUPP"),
		  "not said: \"%s\"", said);
	/* The default heap and allocation are unaffected by a refused ODP heap. */
	void *p = rdma_malloc(100);
	cr_assert(p);
	rdma_free(p);
}

/* Every attached PD's device is asked, not the default PD's only: with the
 * default detached and another attached, a device without ODP refuses. */
Test(odp, every_attached_pd_is_asked, .init = setup_said)
{
	fake_set_odp(0, 0);
	struct ibv_pd *def = rdma_malloc_default_pd();
	cr_assert(def);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	cr_assert_eq(rdma_malloc_detach_pd(def), 0);
	errno = 0;
	cr_assert_null(odp_heap(LW | RR | RW), "an ODP heap on a device without ODP");
	cr_assert_eq(errno, EOPNOTSUPP, "%s", strerror(errno));
	/* No PD attached at all: created, as without a device. */
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), 0);
	rdma_heap_t *h = odp_heap(LW | RR | RW);
	cr_assert(h, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_destroy(h), 0);
	/* Two attached, the second's device without ODP: refused too. */
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	fake_set_no_odp_on(fake_pd(1));
	cr_assert_eq(rdma_malloc_attach_pd(def), 0);
	cr_assert((h = odp_heap(LW | RR | RW)), "%s", strerror(errno));
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	errno = 0;
	cr_assert_null(odp_heap(LW | RR | RW), "an ODP heap with a PD whose device has no ODP");
	cr_assert_eq(errno, EOPNOTSUPP, "%s", strerror(errno));
	fake_set_no_odp_on(NULL);
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
	/* A change of flags keeps ON_DEMAND; the flags rdma_heap_access()
	 * gives, ON_DEMAND included, are taken back. */
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), 0);
	cr_assert_eq(fake_find(fake_pd(0), p)->access, LW | RR | IBV_ACCESS_ON_DEMAND);
	cr_assert_eq(rdma_heap_set_access(h, rdma_heap_access(h) | RW, 0, NULL, NULL), 0);
	cr_assert_eq(fake_find(fake_pd(0), p)->access, LW | RR | RW | IBV_ACCESS_ON_DEMAND);
	/* Not on a heap that is not ODP. */
	cr_assert_eq(rdma_heap_set_access(rdma_heap_default(), LW | IBV_ACCESS_ON_DEMAND, 0, NULL, NULL), EINVAL);
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
Test(odp, odp_heaps_give_freed_pages_back_pinned_heaps_do_not, .init = setup_no_big)
{
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	rdma_heap_t *odp = odp_heap(LW), *pinned = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(odp && pinned);
	const size_t len = 8 * MiB;
	char *a = rdma_heap_aligned_alloc(odp, 4096, len), *b = rdma_heap_aligned_alloc(pinned, 4096, len);
	cr_assert(a && b);
	memset(a, 1, len);
	memset(b, 1, len);
	rdma_free(a);
	rdma_free(b);
	rdmalloc_heap_purge(odp);
	uint64_t refused0 = stats().purges_refused; /* the ODP heap's unmaps are refused too */
	rdmalloc_heap_purge(pinned);
	struct rdma_malloc_stats st = stats();
	cr_assert_gt(st.odp_purges, 0, "the ODP heap purged nothing");
	cr_assert_geq(st.discarded_bytes, len, "discarded_bytes: %llu for a %zu-byte block's pages",
		      (unsigned long long)st.discarded_bytes, len);
	cr_assert_gt(st.purges_refused, refused0, "the pinned heap's purge was not refused");
	cr_assert_lt(resident_pages(a, len), len / 4096 / 2, "ODP heap kept %zu resident pages",
		     resident_pages(a, len));
	cr_assert_eq(resident_pages(b, len), len / 4096, "the pinned heap lost pages");
}

/* An ODP heap's decay time is its own (rdma_heap_attr.decay_ms), as any
 * heap's: its freed pages go back once it has passed, with no further call
 * into the library (the background thread, which a heap of this size
 * starts, ticks it), and -1 keeps them.  On 3238be7 ODP heaps kept
 * jemalloc's 10 s whatever they asked, and the thread did not tick them:
 * nothing went within the 5 s waited here. */
Test(odp, freed_pages_go_back_after_the_heaps_decay_time)
{
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	rdma_heap_t *soon = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_ODP,
								      .decay_ms = 50 });
	rdma_heap_t *never = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_ODP,
								       .decay_ms = -1 });
	cr_assert(soon && never);
	/* Blocks past the thread cache (1 MiB), 96 MiB of them. */
	enum { N = 64 };
	const size_t len = 1536 * 1024;
	char *a[N], *b = rdma_heap_aligned_alloc(never, 4096, 8 * MiB);
	cr_assert(b);
	memset(b, 1, 8 * MiB);
	for (int i = 0; i < N; i++) {
		a[i] = rdma_heap_aligned_alloc(soon, 4096, len);
		cr_assert(a[i]);
		memset(a[i], 1, len);
	}
	for (int i = 0; i < N; i++)
		rdma_free(a[i]);
	rdma_free(b);
	size_t left = 1;
	for (int k = 0; k < 50 && left; k++) {
		usleep(100000); /* no call into the library */
		left = 0;
		for (int i = 0; i < N; i++)
			left += resident_pages(a[i], len);
	}
	cr_assert_eq(left, 0, "%zu pages still resident 5 s after a 50 ms decay", left);
	cr_assert_eq(resident_pages(b, 8 * MiB), 8 * MiB / 4096, "a heap that never decays gave pages back");
}

/* Pages that cannot go back (mlock'ed: madvise(MADV_DONTNEED) fails with
 * EINVAL) are logged once and counted in fallbacks, and zeroed when
 * jemalloc commits them again: it takes decommitted memory for zeroed. */
Test(odp, freed_pages_that_cannot_go_back_are_zeroed_when_reused)
{
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	rdma_heap_t *h = odp_heap(LW);
	cr_assert(h);
	const size_t len = 4 * MiB;
	unsigned char *a = rdma_heap_aligned_alloc(h, 4096, len);
	cr_assert(a);
	memset(a, 0x77, len);
	/* The system call itself: ASan's mlock() does nothing. */
	if (syscall(SYS_mlock, a, len))
		cr_skip_test("mlock of %zu bytes: %s", len, strerror(errno));
	uint64_t fallbacks0 = stats().fallbacks, purges0 = stats().odp_purges, discarded0 = stats().discarded_bytes;
	rdma_free(a);
	rdmalloc_heap_purge(h);
	struct rdma_malloc_stats st = stats();
	cr_assert_gt(st.fallbacks, fallbacks0, "a discard that failed was not counted");
	cr_assert_eq(st.odp_purges, purges0, "a discard that failed was counted as done");
	cr_assert_eq(st.discarded_bytes, discarded0, "a discard that failed was counted in discarded_bytes");
	cr_assert_eq(resident_pages(a, len), len / 4096, "the locked pages went");
	/* Blocks until one lies on the old pages (jemalloc picks where). */
	int reused = 0;
	for (int k = 0; k < 8 && !reused; k++) {
		unsigned char *b = rdma_heap_malloc(h, len);
		cr_assert(b);
		reused = b < a + len && b + len > a;
		for (size_t i = 0; i < len; i++)
			cr_assert_eq(b[i], 0, "byte %zu of memory jemalloc takes for zeroed is %#x", i, b[i]);
	}
	cr_assert(reused, "no block of 8 lies on the freed pages");
	syscall(SYS_munlock, a, len);
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

/* ---- implicit ODP (RDMA_HEAP_ODP_IMPLICIT) ---- */

#define IMPLICIT (RDMA_HEAP_ODP | RDMA_HEAP_ODP_IMPLICIT)

static rdma_heap_t *implicit_heap(unsigned access)
{
	return rdma_heap_create(&(struct rdma_heap_attr){ .access = access, .flags = IMPLICIT });
}

/* The live implicit regions (NULL, SIZE_MAX) of @pd. */
static size_t implicit_regions(struct ibv_pd *pd)
{
	struct fake_mr_info all[FAKE_MAX_MRS];
	size_t n = fake_snapshot(all, FAKE_MAX_MRS), k = 0;
	for (size_t i = 0; i < n; i++)
		k += all[i].pd == pd && !all[i].addr && all[i].len == SIZE_MAX;
	return k;
}

Test(odp, implicit_refusals)
{
	/* Without ODP, with MW_BIND, with remote access, on a device without
	 * implicit ODP: each refused with its errno, nothing registered. */
	errno = 0;
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_ODP_IMPLICIT }));
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = LW,
								   .flags = IMPLICIT | RDMA_HEAP_MW_BIND }));
	cr_assert_eq(errno, EINVAL);
	const unsigned remote[] = { LW | RR, LW | RW, LW | IBV_ACCESS_REMOTE_ATOMIC };
	for (size_t i = 0; i < sizeof(remote) / sizeof(remote[0]); i++) {
		errno = 0;
		cr_assert_null(implicit_heap(remote[i]), "remote access 0x%x accepted", remote[i]);
		cr_assert_eq(errno, EPERM);
	}
	fake_set_odp(IBV_ODP_SUPPORT, ALL_RC);
	errno = 0;
	cr_assert_null(implicit_heap(LW));
	cr_assert_eq(errno, EOPNOTSUPP);
	cr_assert(odp_heap(LW), "explicit ODP refused too: %s", strerror(errno));
	cr_assert_eq(implicit_regions(fake_pd(0)), 0);
}

/* Every chunk of every implicit heap shares one region per PD: one
 * registration, the same keys everywhere, counted once; it goes with the
 * last chunk. */
Test(odp, implicit_region_is_shared_and_counted)
{
	struct rdma_malloc_stats st0 = stats();
	rdma_heap_t *a = implicit_heap(LW), *b = implicit_heap(LW);
	cr_assert(a && b, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_flags(a), IMPLICIT);
	cr_assert_eq(rdma_heap_access(a), LW | IBV_ACCESS_ON_DEMAND);
	cr_assert_eq(rdma_heap_set_access(a, rdma_heap_access(a), 0, NULL, NULL), 0, "its flags not taken back");
	cr_assert_eq(implicit_regions(fake_pd(0)), 0, "registered before any chunk");
	/* Several chunks in each heap (large blocks get chunks of their own). */
	void *p[6];
	for (int i = 0; i < 6; i++) {
		p[i] = rdma_heap_malloc(i % 2 ? b : a, 5 * MiB);
		cr_assert(p[i]);
		memset(p[i], i, 5 * MiB);
	}
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
	const struct fake_mr_info *r = fake_find(fake_pd(0), p[0]);
	cr_assert(r && !r->addr && r->len == SIZE_MAX);
	cr_assert_eq(r->access, LW | IBV_ACCESS_ON_DEMAND);
	struct ibv_mr *mr = rdma_malloc_mr(p[0], 1, NULL);
	cr_assert_eq(mr, r->mr);
	for (int i = 0; i < 6; i++) {
		uint32_t lkey = 0, rkey = 0;
		cr_assert_eq(rdma_malloc_keys(p[i], 5 * MiB, NULL, &lkey, &rkey), 0);
		cr_assert_eq(lkey, mr->lkey, "block %d has its own key", i);
		cr_assert_eq(rdma_malloc_mr(p[i], 5 * MiB, NULL), mr);
	}
	/* The lookup still knows the chunks' bounds: past one is ERANGE. */
	uint32_t lkey, rkey;
	cr_assert_eq(rdma_malloc_keys(p[0], 1ul << 40, NULL, &lkey, &rkey), ERANGE);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.mrs - st0.mrs, 1, "%lu regions for the implicit heaps", (unsigned long)(st.mrs - st0.mrs));
	cr_assert_eq(st.registered_bytes, st0.registered_bytes, "the implicit region counted bytes");
	cr_assert_geq(st.chunk_bytes - st0.chunk_bytes, 6 * 5 * MiB);
	/* One heap gone: the region stays for the other. */
	cr_assert_eq(rdma_heap_destroy(a), 0);
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
	cr_assert_eq(rdma_malloc_mr(p[1], 1, NULL), mr);
	cr_assert_eq(rdma_heap_destroy(b), 0);
	cr_assert_eq(implicit_regions(fake_pd(0)), 0, "the last chunk left its region registered");
	cr_assert_eq(stats().mrs, st0.mrs);
}

/* Each attached PD has its own region; detaching releases it. */
Test(odp, implicit_region_per_pd)
{
	rdma_heap_t *h = implicit_heap(LW);
	char *p = rdma_heap_malloc(h, 100), *q = rdma_heap_malloc(h, 7 * MiB);
	cr_assert(p && q);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
	cr_assert_eq(implicit_regions(fake_pd(1)), 1);
	struct ibv_mr *m0 = rdma_malloc_mr(p, 1, fake_pd(0)), *m1 = rdma_malloc_mr(q, 1, fake_pd(1));
	cr_assert(m0 && m1 && m0 != m1);
	cr_assert_eq(m1->pd, fake_pd(1));
	cr_assert_eq(rdma_malloc_mr(p, 1, fake_pd(1)), m1);
	/* A chunk made now registers with both. */
	char *r = rdma_heap_malloc(h, 9 * MiB);
	cr_assert_eq(rdma_malloc_mr(r, 1, fake_pd(1)), m1);
	cr_assert_eq(implicit_regions(fake_pd(1)), 1);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), 0);
	cr_assert_eq(implicit_regions(fake_pd(1)), 0, "detach left the implicit region");
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
}

/* A change of local flags moves the heap to the region of the new flags
 * (never rereg of the shared one); remote flags are refused. */
Test(odp, implicit_access_change)
{
	rdma_heap_t *h = implicit_heap(LW), *other = implicit_heap(LW);
	char *p = rdma_heap_malloc(h, 100), *o = rdma_heap_malloc(other, 100);
	cr_assert(p && o);
	/* The reserves made before the changes: one being made across a
	 * change is registered under the flags of that moment and keeps
	 * their region until it is handed over (access changes leave a
	 * reserve alone). */
	rdmalloc_reserves_settle();
	struct ibv_mr *shared = rdma_malloc_mr(p, 1, NULL);
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), EPERM);
	cr_assert_eq(rdma_heap_access(h), LW | IBV_ACCESS_ON_DEMAND);
	/* New keys for one heap would be new keys for every heap sharing it. */
	cr_assert_eq(rdma_heap_set_access(h, LW, RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL), EOPNOTSUPP);
	cr_assert_eq(rdma_malloc_mr(p, 1, NULL), shared);
	unsigned long rereg0 = fake_rereg_calls();
	cr_assert_eq(rdma_heap_set_access(h, 0, 0, NULL, NULL), 0);
	cr_assert_eq(fake_rereg_calls(), rereg0, "the shared region was re-registered in place");
	struct ibv_mr *now = rdma_malloc_mr(p, 1, NULL);
	cr_assert(now && now != shared);
	cr_assert_eq(fake_find(fake_pd(0), p)->access & IBV_ACCESS_ON_DEMAND, IBV_ACCESS_ON_DEMAND);
	cr_assert_eq(implicit_regions(fake_pd(0)), 2, "one region per access flags");
	cr_assert_eq(rdma_malloc_mr(o, 1, NULL), shared, "the other heap lost its region");
	/* Back to the same flags as the other heap: one region again. */
	cr_assert_eq(rdma_heap_set_access(h, LW, 0, NULL, NULL), 0);
	cr_assert_eq(rdma_malloc_mr(p, 1, NULL), shared);
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
}

/* A failed registration of the shared region fails the allocation cleanly
 * and leaves nothing behind; the next one works. */
Test(odp, implicit_registration_failure)
{
	rdma_heap_t *h = implicit_heap(LW);
	size_t mrs0 = fake_live_mrs();
	fake_fail_reg(fake_reg_calls() + 1, 1000);
	errno = 0;
	cr_assert_null(rdma_heap_malloc(h, 100));
	cr_assert_eq(errno, ENOMEM);
	cr_assert_eq(fake_live_mrs(), mrs0);
	fake_fail_reg_from(0);
	char *p = rdma_heap_malloc(h, 100);
	cr_assert(p, "%s", strerror(errno));
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
}

static rdma_heap_t *race_heap;

static void *alloc_in_race_heap(void *out)
{
	*(void **)out = rdma_heap_malloc(race_heap, 100);
	return NULL;
}

/* Two chunks registering the first region at once (the registration runs
 * outside the ODP lock): both register, one region is kept, the other is
 * deregistered, and both chunks use the kept one. */
Test(odp, implicit_first_registration_race, .timeout = 60)
{
	rdma_heap_t *other = implicit_heap(LW);
	race_heap = implicit_heap(LW);
	cr_assert(other && race_heap);
	size_t mrs0 = fake_live_mrs();
	void *p = NULL;
	pthread_t t;
	fake_block_next_reg();
	pthread_create(&t, NULL, alloc_in_race_heap, &p);
	fake_wait_blocked(); /* its chunk is inside ibv_reg_mr(NULL, SIZE_MAX) */
	char *q = rdma_heap_malloc(other, 100);
	cr_assert(q);
	fake_release_reg();
	pthread_join(t, NULL);
	cr_assert(p);
	cr_assert_eq(implicit_regions(fake_pd(0)), 1, "both regions kept");
	cr_assert_eq(fake_live_mrs(), mrs0 + 1);
	cr_assert_eq(rdma_malloc_mr(p, 1, NULL), rdma_malloc_mr(q, 1, NULL));
	cr_assert_eq(stats().mrs, fake_live_mrs());
	cr_assert_eq(rdma_heap_destroy(race_heap), 0);
	cr_assert_eq(implicit_regions(fake_pd(0)), 1);
	cr_assert_eq(rdma_heap_destroy(other), 0);
	cr_assert_eq(fake_live_mrs(), mrs0);
}
