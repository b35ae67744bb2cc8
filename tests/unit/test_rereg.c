/* SPDX-License-Identifier: MIT */
/*
 * test_rereg.c - rdma_heap_set_access(): every registration of a heap's
 * chunks (every chunk x every attached PD) gets the new flags, in place or
 * replaced; the table never holds a deregistered key; changed keys are
 * reported (callback, generation); new chunks get the new flags, also while
 * other threads allocate during the change; a failure is undone.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "chunk.h"
#include "fake_verbs.h"
#include "reserve.h"
#include "stderr_said.h"
#include "rereg.h"
#include "rdma_malloc.h"
#include "addrmap.h"

#define MiB ((size_t)1 << 20)
#define LW IBV_ACCESS_LOCAL_WRITE
#define RR IBV_ACCESS_REMOTE_READ
#define RW IBV_ACCESS_REMOTE_WRITE

static void setup(void)
{
	fake_verbs_install(1);
}

TestSuite(rereg, .init = setup);

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

struct report {
	int calls;
	int stale; /* a lookup inside the callback returned the old keys */
	void *addr[64];
	struct ibv_pd *pd[64];
};

static void on_change(void *ctx, struct ibv_pd *pd, void *addr, size_t len, uint32_t ol, uint32_t ok,
		      uint32_t nl, uint32_t nk)
{
	struct report *r = ctx;
	uint32_t l, k;
	(void)len;
	cr_assert_eq(rdma_malloc_keys(addr, 1, pd, &l, &k), 0);
	if (l != nl || k != nk || (nl == ol && nk == ok))
		r->stale++;
	if (r->calls < 64) {
		r->addr[r->calls] = addr;
		r->pd[r->calls] = pd;
	}
	r->calls++;
}

/* Every live region of @heap's chunks under @pd has @access, and the table
 * names a live region (never a deregistered one). */
static void check_regions(void **ptrs, int n, struct ibv_pd *pd, unsigned access)
{
	for (int i = 0; i < n; i++) {
		struct ibv_mr *mr = rdma_malloc_mr(ptrs[i], 1, pd);
		cr_assert(mr, "lookup: %s", strerror(errno));
		const struct fake_mr_info *f = fake_find(pd, ptrs[i]);
		cr_assert(f, "no live region");
		cr_assert_eq(f->mr, mr, "the table names region %p, the live one is %p", (void *)mr, (void *)f->mr);
		cr_assert_eq(f->access, access, "region of %p: access %#x, want %#x", ptrs[i], f->access, access);
		uint32_t l, k;
		cr_assert_eq(rdma_malloc_keys(ptrs[i], 1, pd, &l, &k), 0);
		cr_assert(l == mr->lkey && k == mr->rkey, "table keys %#x/%#x, region's %#x/%#x", l, k,
			  mr->lkey, mr->rkey);
	}
}

#define NCH 4
static rdma_heap_t *heap;
static void *ptr[NCH];

static void make_heap(void)
{
	heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW | RR | RW });
	cr_assert(heap);
	for (int i = 0; i < NCH; i++) /* 3 MiB each: chunks of their own */
		cr_assert(ptr[i] = rdma_heap_malloc(heap, 3 * MiB));
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	rdmalloc_reserves_settle(); /* the reserve's thread done: counts hold still */
}

Test(rereg, in_place_keeps_keys)
{
	make_heap();
	void *other = rdma_malloc(100);
	rdmalloc_reserves_settle(); /* the default heap's first growth queued a reserve */
	uint32_t ok0;
	cr_assert_eq(rdma_malloc_keys(ptr[0], 1, NULL, NULL, &ok0), 0);
	size_t live = fake_live_mrs();
	uint64_t gen = rdma_heap_key_generation(heap);
	struct report r = { 0 };
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, 0, on_change, &r), 0);
	cr_assert_eq(rdma_heap_access(heap), LW | RR);
	check_regions(ptr, NCH, fake_pd(0), LW | RR);
	check_regions(ptr, NCH, fake_pd(1), LW | RR);
	check_regions(&other, 1, fake_pd(0), LW | RR | RW | IBV_ACCESS_REMOTE_ATOMIC); /* other heap untouched */
	uint32_t ok1;
	cr_assert_eq(rdma_malloc_keys(ptr[0], 1, NULL, NULL, &ok1), 0);
	cr_assert_eq(ok0, ok1);
	cr_assert_eq(r.calls, 0, "keys did not change, %d reported", r.calls);
	cr_assert_eq(rdma_heap_key_generation(heap), gen);
	cr_assert_eq(fake_live_mrs(), live);
	struct rdma_malloc_stats st = stats();
	cr_assert_geq(st.rereg_in_place, 2 * NCH);
	cr_assert_eq(st.rereg_replaced, 0);
	/* A chunk made afterwards has the new flags. */
	void *later = rdma_heap_malloc(heap, 3 * MiB);
	check_regions(&later, 1, fake_pd(0), LW | RR);
}

Test(rereg, in_place_new_keys_are_reported)
{
	make_heap();
	fake_set_rereg(FAKE_REREG_NEW_KEYS);
	uint64_t gen = rdma_heap_key_generation(heap);
	struct report r = { 0 };
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, 0, on_change, &r), 0);
	check_regions(ptr, NCH, fake_pd(0), LW | RR);
	check_regions(ptr, NCH, fake_pd(1), LW | RR);
	cr_assert_geq(r.calls, 2 * NCH);
	cr_assert_eq(r.calls, (int)stats().key_changes);
	cr_assert_eq(r.stale, 0, "a lookup in the callback returned old keys");
	cr_assert_eq(rdma_heap_key_generation(heap), gen + 1);
}

static void replaced(enum fake_rereg_mode mode, unsigned flags)
{
	make_heap();
	fake_set_rereg(mode);
	size_t live = fake_live_mrs();
	struct ibv_mr *old[NCH];
	for (int i = 0; i < NCH; i++)
		old[i] = rdma_malloc_mr(ptr[i], 1, NULL);
	struct report r = { 0 };
	unsigned long calls0 = fake_rereg_calls();
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, flags, on_change, &r), 0);
	check_regions(ptr, NCH, fake_pd(0), LW | RR);
	check_regions(ptr, NCH, fake_pd(1), LW | RR);
	for (int i = 0; i < NCH; i++)
		cr_assert_neq(rdma_malloc_mr(ptr[i], 1, NULL), old[i], "region not replaced");
	cr_assert_eq(fake_live_mrs(), live, "old regions not deregistered");
	cr_assert_geq(r.calls, 2 * NCH);
	cr_assert_eq(r.stale, 0);
	cr_assert_geq(stats().rereg_replaced, 2 * NCH);
	if (flags & RDMA_HEAP_SET_ACCESS_NEW_KEYS)
		cr_assert_eq(fake_rereg_calls(), calls0, "NEW_KEYS must not try ibv_rereg_mr");
}

/* No memory to record every key change for the callback (here: room for
 * one): the change is made all the same, the keys in the table are right,
 * and the call says ENOMEM, with an error, since the program did not hear
 * of the new rkeys; the callback is not called rather than with some (it
 * said 0, having reported one).  Without a callback nothing is recorded:
 * 0. */
Test(rereg, unrecorded_key_changes_are_enomem, .init = cr_redirect_stderr)
{
	make_heap();
	rdmalloc_rereg_records_max = 1;
	struct report r = { 0 };
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, RDMA_HEAP_SET_ACCESS_NEW_KEYS, on_change, &r), ENOMEM);
	cr_assert_eq(rdma_heap_access(heap), LW | RR, "the heap does not have its new flags");
	check_regions(ptr, NCH, fake_pd(0), LW | RR);
	check_regions(ptr, NCH, fake_pd(1), LW | RR);
	cr_assert_eq(r.calls, 0, "%d changes reported, not all of them", r.calls);
	char said[4096];
	stderr_said(said, sizeof(said));
	cr_assert(strstr(said, "rdmalloc: error: rdma_heap_set_access: no memory to record the key changes: "
			       "the callback is not called"),
		  "not said: \"%s\"", said);
	cr_assert_eq(rdma_heap_set_access(heap, LW, RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL), 0,
		     "without a callback");
	rdmalloc_rereg_records_max = SIZE_MAX;
	check_regions(ptr, NCH, fake_pd(0), LW);
}

Test(rereg, refused_rereg_replaces, .init = cr_redirect_stderr)
{
	replaced(FAKE_REREG_REFUSE, 0);
}

Test(rereg, broken_rereg_replaces, .init = cr_redirect_stderr)
{
	replaced(FAKE_REREG_BROKEN, 0);
}

Test(rereg, new_keys_flag_replaces)
{
	replaced(FAKE_REREG_KEEP_KEYS, RDMA_HEAP_SET_ACCESS_NEW_KEYS);
}

Test(rereg, failure_is_undone, .init = cr_redirect_stderr)
{
	make_heap();
	fake_set_rereg(FAKE_REREG_REFUSE);
	/* The third replacement registration fails. */
	fake_fail_reg(fake_reg_calls() + 3, 1);
	struct report r = { 0 };
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, 0, on_change, &r), ENOMEM);
	cr_assert_eq(rdma_heap_access(heap), LW | RR | RW, "the heap keeps its old flags");
	check_regions(ptr, NCH, fake_pd(0), LW | RR | RW);
	check_regions(ptr, NCH, fake_pd(1), LW | RR | RW);
	cr_assert_eq(r.stale, 0);
}

/* ibv_rereg_mr fails with a command error, which leaves the region
 * unusable, and its replacement fails too: the undoing replaces it, with
 * the old flags and new keys reported; where that fails as well, the key
 * generation moves and the next call replaces it (it was passed by for
 * good, its dead keys published). */
Test(rereg, a_broken_region_is_replaced_by_the_undoing, .init = cr_redirect_stderr)
{
	make_heap();
	uint64_t gen = rdma_heap_key_generation(heap);
	fake_set_rereg(FAKE_REREG_BROKEN);
	fake_fail_reg_errno(EIO);
	fake_fail_reg(fake_reg_calls() + 1, 1); /* the first replacement */
	struct report r = { 0 };
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, 0, on_change, &r), EIO);
	cr_assert_eq(rdma_heap_access(heap), LW | RR | RW, "the heap keeps its old flags");
	check_regions(ptr, NCH, fake_pd(0), LW | RR | RW);
	check_regions(ptr, NCH, fake_pd(1), LW | RR | RW);
	cr_assert_eq(r.calls, 1, "%d key changes reported, want the broken region's", r.calls);
	cr_assert_eq(r.stale, 0);
	cr_assert_neq(rdma_heap_key_generation(heap), gen);
	/* The replacement and the undoing's both fail: the next call mends it. */
	fake_fail_reg(fake_reg_calls() + 1, 2);
	gen = rdma_heap_key_generation(heap);
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, 0, NULL, NULL), EIO);
	cr_assert_neq(rdma_heap_key_generation(heap), gen, "keys stopped working, the generation stayed");
	fake_fail_reg(0, 0);
	cr_assert_eq(rdma_heap_access(heap), LW | RR | RW);
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR | RW, 0, NULL, NULL), 0);
	check_regions(ptr, NCH, fake_pd(0), LW | RR | RW);
	check_regions(ptr, NCH, fake_pd(1), LW | RR | RW);
}

Test(rereg, bad_arguments)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert_eq(rdma_heap_set_access(h, RW, 0, NULL, NULL), EINVAL, "remote write without local write");
	cr_assert_eq(rdma_heap_set_access(h, 1u << 20, 0, NULL, NULL), EINVAL);
	cr_assert_eq(rdma_heap_set_access(h, LW, 2, NULL, NULL), EINVAL, "unknown flag");
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(rdma_heap_set_access(h, LW, 0, NULL, NULL), EINVAL, "destroyed heap");
	cr_assert_eq(rdma_heap_set_access(NULL, LW | RR, 0, NULL, NULL), 0, "NULL is the default heap");
	cr_assert_eq(rdma_heap_access(NULL), LW | RR);
}

Test(rereg, mw_bind_heap_keeps_mw_bind)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_MW_BIND });
	void *p = rdma_heap_malloc(h, 100);
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), 0);
	check_regions(&p, 1, fake_pd(0), LW | RR | IBV_ACCESS_MW_BIND);
}

/* Chunks created while the flags change: none may keep the old flags. */
static atomic_int stop;
static void *grower(void *arg)
{
	void **out = arg;
	int n = 0;
	while (!atomic_load(&stop) && n < 200) {
		void *p = rdma_heap_malloc(heap, (size_t)(1 + n % 5) * MiB);
		if (p)
			out[n++] = p;
	}
	out[n] = NULL;
	return NULL;
}

Test(rereg, chunks_created_meanwhile_get_the_new_flags, .timeout = 120)
{
	heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW | RR | RW });
	static void *got[2][201];
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, grower, got[i]);
	unsigned acc = LW | RR;
	for (int round = 0; round < 40; round++) {
		acc = (round & 1) ? (LW | RR | RW) : (LW | RR);
		fake_set_rereg(round % 3 == 0 ? FAKE_REREG_REFUSE : FAKE_REREG_KEEP_KEYS);
		cr_assert_eq(rdma_heap_set_access(heap, acc, 0, NULL, NULL), 0);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++)
		for (int k = 0; got[i][k]; k++)
			check_regions(&got[i][k], 1, fake_pd(0), acc);
}

/* Deterministic: a chunk registers with the old flags while the change runs
 * (before it is published); it must register again before publishing. */
static void *alloc_one(void *arg)
{
	*(void **)arg = rdma_heap_malloc(heap, 3 * MiB);
	return NULL;
}

Test(rereg, chunk_registering_during_the_change_gets_the_new_flags, .timeout = 60)
{
	heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW | RR | RW });
	void *p = NULL;
	pthread_t t;
	fake_block_next_reg();
	pthread_create(&t, NULL, alloc_one, &p);
	fake_wait_blocked(); /* the new chunk is inside ibv_reg_mr with LW|RR|RW */
	cr_assert_eq(rdma_heap_set_access(heap, LW | RR, 0, NULL, NULL), 0);
	fake_release_reg();
	pthread_join(t, NULL);
	cr_assert(p);
	check_regions(&p, 1, fake_pd(0), LW | RR);
}
