/* SPDX-License-Identifier: MIT */
/*
 * test_firstuse.c - when a heap's chunks are registered (issue 22; chunk.h,
 * enum rdmalloc_reg_policy), against the fake backend: a first-use heap
 * (the drop-in's default) makes its chunks plain and registers one with a
 * PD on the first key lookup there, once; a refused registration fails
 * that lookup (ENOMEM), never an allocation; an eager-plain heap
 * (RDMALLOC_PRELOAD_REGISTER=eager) registers at creation but leaves a
 * refused chunk plain; pinned_bytes follows what is registered.  On main
 * e6168cb every allocation below past RDMALLOC_MAX_REGISTERED failed.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "fake_verbs.h"
#include "heap.h"
#include "reserve.h"
#include "rdma_malloc.h"

#define MiB ((size_t)1 << 20)
#define LW IBV_ACCESS_LOCAL_WRITE

static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static rdma_heap_t *heap_with(int policy)
{
	int err = 0;
	struct rdmalloc_heap *h = rdmalloc_heap_create(LW, 0, -1, &err);
	cr_assert(h, "%s", strerror(err));
	rdmalloc_heap_set_policy(h, policy);
	return (rdma_heap_t *)h;
}

TestSuite(firstuse, .timeout = 60);

Test(firstuse, plain_until_a_lookup_registers_once_per_pd)
{
	fake_verbs_install(1);
	cr_assert(rdma_malloc_default_pd());
	rdma_heap_t *h = heap_with(RDMALLOC_REG_FIRST_USE);
	size_t mrs = fake_live_mrs();
	unsigned long regs = fake_reg_calls();
	char *p = rdma_heap_malloc(h, 1 * MiB);
	char *q = rdma_heap_malloc(h, 100);
	cr_assert(p && q);
	memset(p, 7, 1 * MiB);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(fake_reg_calls(), regs, "a first-use heap registered at creation");
	cr_assert_geq(st.unregistered_chunks, 1);
	uint64_t pinned = st.pinned_bytes;

	uint32_t l, r;
	cr_assert_eq(rdma_malloc_keys(p, 1 * MiB, NULL, &l, &r), 0, "%s", strerror(errno));
	const struct fake_mr_info *f = fake_find(fake_pd(0), p);
	cr_assert(f, "the lookup's keys name no live region");
	cr_assert(f->mr->lkey == l && f->mr->rkey == r);
	cr_assert_eq(fake_live_mrs(), mrs + 1);
	st = stats();
	cr_assert_eq(st.demand_registrations, 1);
	cr_assert_gt(st.pinned_bytes, pinned, "a registered chunk is pinned");
	cr_assert_geq(st.peak_pinned_bytes, st.pinned_bytes);

	/* The same chunk again, by another block of it: no new registration. */
	uint32_t l2;
	if (rdma_malloc_keys(q, 1, NULL, &l2, NULL) == 0 && fake_find(fake_pd(0), q) == f)
		cr_assert_eq(l2, l);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &l2, NULL), 0);
	cr_assert_eq(l2, l);
	cr_assert_leq(stats().demand_registrations, 2);

	/* Another PD: registered there on its first lookup, and only there. */
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	cr_assert_null(fake_find(fake_pd(1), p), "an attach registered a first-use chunk");
	cr_assert_eq(rdma_malloc_keys(p, 1 * MiB, fake_pd(1), &l2, NULL), 0);
	cr_assert(fake_find(fake_pd(1), p));
	cr_assert_neq(l2, l);
	for (size_t i = 0; i < 1 * MiB; i++)
		cr_assert_eq(p[i], 7, "byte %zu changed by its registration", i);
	rdma_free(p);
	rdma_free(q);
}

/* RDMALLOC_MAX_REGISTERED below the heap: every allocation succeeds;
 * the lookup that would pin past it fails with ENOMEM, counted. */
Test(firstuse, limit_refuses_the_lookup_not_the_allocation, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_MAX_REGISTERED", "4M", 1);
	setenv("RDMALLOC_RESERVE", "0", 1);
	fake_verbs_install(1);
	rdma_heap_t *h = heap_with(RDMALLOC_REG_FIRST_USE);
	enum { N = 16 };
	char *p[N];
	for (int i = 0; i < N; i++) {
		p[i] = rdma_heap_malloc(h, 3 * MiB);
		cr_assert(p[i], "block %d: %s", i, strerror(errno));
		memset(p[i], i, 3 * MiB);
	}
	int ok = 0, refused = 0;
	for (int i = 0; i < N; i++) {
		int err = rdma_malloc_keys(p[i], 3 * MiB, NULL, NULL, NULL);
		cr_assert(err == 0 || err == ENOMEM, "block %d: %s", i, strerror(err));
		ok += err == 0, refused += err == ENOMEM;
	}
	cr_assert_gt(ok, 0);
	cr_assert_gt(refused, 0);
	struct rdma_malloc_stats st = stats();
	cr_assert_leq(st.pinned_bytes, 4 * MiB);
	cr_assert_eq(st.demand_refusals, (uint64_t)refused);
	cr_assert_eq(st.demand_registrations, (uint64_t)ok);
	for (int i = 0; i < N; i++)
		rdma_free(p[i]);
}

/* rdma_malloc_keys() leaves errno alone whatever its first use does (a
 * registration, which sets errno inside ibv_reg_mr; a refusal; no PD; not
 * ours), and a refused first registration is ENOMEM whatever ibv_reg_mr
 * said (here EFAULT), as the header has it; rdma_malloc_mr() says the same
 * in errno. */
Test(firstuse, lookups_leave_errno_alone_and_a_refusal_is_enomem, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	cr_assert(rdma_malloc_default_pd());
	rdma_heap_t *h = heap_with(RDMALLOC_REG_FIRST_USE), *g = heap_with(RDMALLOC_REG_FIRST_USE);
	char *p = rdma_heap_malloc(h, 1 * MiB), *q = rdma_heap_malloc(g, 1 * MiB), local = 0;
	cr_assert(p && q);
	const struct {
		const char *what;
		const void *ptr;
		struct ibv_pd *pd;
		int want;
	} cases[] = {
		{ "a first use that registers", p, NULL, 0 },
		{ "a registered chunk", p, NULL, 0 },
		{ "a PD not attached", p, fake_pd(3), ENODEV },
		{ "memory not ours", &local, NULL, ENOENT },
		{ "a first use refused with EFAULT", q, NULL, ENOMEM },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (cases[i].want == ENOMEM) {
			fake_fail_reg_errno(EFAULT);
			fake_fail_reg_from(fake_reg_calls() + 1);
		}
		errno = 1234;
		int err = rdma_malloc_keys(cases[i].ptr, 64, cases[i].pd, NULL, NULL);
		cr_assert_eq(err, cases[i].want, "%s: %s, not %s", cases[i].what, strerror(err), strerror(cases[i].want));
		cr_assert_eq(errno, 1234, "%s: errno is %d (%s)", cases[i].what, errno, strerror(errno));
		if (cases[i].want) {
			cr_assert_null(rdma_malloc_mr(cases[i].ptr, 64, cases[i].pd));
			cr_assert_eq(errno, cases[i].want, "rdma_malloc_mr, %s: %s", cases[i].what, strerror(errno));
		}
	}
	cr_assert_eq(stats().demand_refusals, 2);
	fake_fail_reg_from(0);
	fake_fail_reg_errno(0);
	cr_assert_eq(rdma_malloc_keys(q, 64, NULL, NULL, NULL), 0, "not registered once the refusals end");
	rdma_free(p);
	rdma_free(q);
}

/* RDMALLOC_PRELOAD_REGISTER=eager's policy: registered when made, but a
 * refusal leaves the chunk plain and the allocation succeeds. */
Test(firstuse, eager_plain_refusal_leaves_the_chunk_plain, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_MAX_REGISTERED", "4M", 1);
	setenv("RDMALLOC_RESERVE", "0", 1);
	fake_verbs_install(1);
	cr_assert(rdma_malloc_default_pd());
	rdma_heap_t *h = heap_with(RDMALLOC_REG_EAGER_PLAIN);
	unsigned long regs = fake_reg_calls();
	enum { N = 16 };
	char *p[N];
	for (int i = 0; i < N; i++) {
		p[i] = rdma_heap_malloc(h, 3 * MiB);
		cr_assert(p[i], "block %d: %s", i, strerror(errno));
		memset(p[i], i, 3 * MiB);
	}
	cr_assert_gt(fake_reg_calls(), regs, "an eager-plain heap registers when it can");
	struct rdma_malloc_stats st = stats();
	cr_assert_gt(st.refused_chunks, 0);
	cr_assert_gt(st.unregistered_chunks, 0);
	cr_assert_leq(st.pinned_bytes, 4 * MiB);
	rdma_heap_destroy(h);
}

/* An rdma_* heap stays eager: its caller asked for registered memory. */
Test(firstuse, api_heap_still_fails_past_the_limit, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_MAX_REGISTERED", "4M", 1);
	setenv("RDMALLOC_RESERVE", "0", 1);
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *p = NULL;
	int i;
	for (i = 0; i < 16 && (p = rdma_heap_malloc(h, 3 * MiB)); i++)
		;
	cr_assert_null(p, "an rdma_* heap went past RDMALLOC_MAX_REGISTERED");
	cr_assert_eq(errno, ENOMEM);
}

/* Chunks registered on first use, their blocks then freed by a program
 * that goes quiet: given back once idle for the heap's decay time (before,
 * only an eager heap's growth started the thread that ticks the decay: they
 * stayed pinned).  And a first-use heap that pins nothing starts no thread:
 * a drop-in program that does no RDMA stays single-threaded. */
Test(firstuse, registered_on_first_use_then_freed_goes_after_the_decay_time)
{
	setenv("RDMALLOC_BIG_BLOCK", "0", 1);
	fake_verbs_install(1);
	cr_assert(rdma_malloc_default_pd());
	int err = 0;
	struct rdmalloc_heap *hh = rdmalloc_heap_create(LW, 0, 300, &err);
	cr_assert(hh, "%s", strerror(err));
	rdmalloc_heap_set_policy(hh, RDMALLOC_REG_FIRST_USE);
	rdma_heap_t *h = (rdma_heap_t *)hh;
	enum { N = 64 };
	void *b[N];
	for (int i = 0; i < N; i++) { /* past the thread cache (1 MiB): none stays cached */
		b[i] = rdma_heap_malloc(h, 1536 << 10);
		cr_assert(b[i]);
		memset(b[i], 0x5a, 4096);
	}
	cr_assert_eq(atomic_load(&rdmalloc_reserve_thread_state), 0, "a thread with nothing pinned");
	for (int i = 0; i < N; i++)
		cr_assert_eq(rdma_malloc_keys(b[i], 1, NULL, NULL, NULL), 0, "%s", strerror(errno));
	cr_assert_eq(atomic_load(&rdmalloc_reserve_thread_state), 2, "no thread once memory is pinned");
	for (int i = 0; i < N; i++)
		rdma_free(b[i]);
	struct rdma_malloc_stats st = stats();
	cr_assert_gt(st.pinned_bytes, 64 * MiB);
	for (int i = 0; i < 50 && stats().pinned_bytes > 16 * MiB; i++)
		usleep(100000); /* no call into the library but the stats */
	st = stats();
	cr_assert_leq(st.pinned_bytes, 16 * MiB, "%llu bytes still pinned 5 s after a 300 ms decay",
		      (unsigned long long)st.pinned_bytes);
}

/* A memory window granted on a chunk not registered yet registers it with
 * the QP's PD first, as a key lookup does (rdma_malloc_mw_grant's errors
 * are rdma_malloc_keys()'s).  a489e41 answered ENODEV. */
Test(firstuse, a_grant_registers_on_first_use, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	cr_assert(rdma_malloc_default_pd());
	int err = 0;
	struct rdmalloc_heap *h = rdmalloc_heap_create(LW | IBV_ACCESS_MW_BIND, 0, -1, &err);
	cr_assert(h, "%s", strerror(err));
	rdmalloc_heap_set_policy(h, RDMALLOC_REG_FIRST_USE);
	char *p = rdma_heap_malloc((rdma_heap_t *)h, 4096);
	cr_assert(p);
	cr_assert_null(fake_find(fake_pd(0), p), "registered before its first use");
	struct ibv_qp qp = { .pd = fake_pd(0) };
	errno = 4321;
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp, p, 100, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 1, 0);
	cr_assert(mw, "grant: %s", strerror(errno));
	cr_assert_eq(errno, 4321, "a successful grant changed errno");
	cr_assert_not_null(fake_find(fake_pd(0), p), "granted on a chunk not registered with the QP's PD");
	cr_assert(fake_mw_allows(mw->rkey, (uintptr_t)p, 100, IBV_ACCESS_REMOTE_READ));
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	rdma_free(p);
}
