/* SPDX-License-Identifier: MIT */
/*
 * test_keys.c - invariant 1 (every allocation lies inside exactly one
 * registered region per attached PD, for its whole usable size) and the
 * lookup's answers; PD attach/detach.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "reserve.h"
#include "rdma_malloc.h"

static void with_device(void)
{
	fake_verbs_install(1);
}

TestSuite(keys, .init = with_device);

/* Every check of invariant 1 for @p under @pd. */
static void assert_covered(void *p, struct ibv_pd *pd)
{
	size_t u = rdma_malloc_usable_size(p);
	cr_assert_gt(u, 0, "%p has no usable size", p);
	struct ibv_mr *mr = rdma_malloc_mr(p, u, pd);
	cr_assert(mr, "no region covers [%p, +%zu) under pd %p: %s", p, u, (void *)pd, strerror(errno));
	const struct fake_mr_info *f = fake_find(pd ? pd : fake_pd(0), p);
	cr_assert(f, "the backend has no live region of pd %p holding %p", (void *)pd, p);
	cr_assert_eq(f->mr, mr, "lookup returned a region that is not the one holding %p", p);
	cr_assert((char *)p >= (char *)f->addr && (char *)p + u <= (char *)f->addr + f->len,
		  "[%p, +%zu) straddles its region [%p, +%zu)", p, u, f->addr, f->len);
	uint32_t lkey = 0, rkey = 0;
	cr_assert_eq(rdma_malloc_keys(p, u, pd, &lkey, &rkey), 0);
	cr_assert_eq(lkey, mr->lkey);
	cr_assert_eq(rkey, mr->rkey);
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t random_size(void)
{
	/* Log-uniform from 1 byte to 32 MiB. */
	unsigned bits = (unsigned)(next() % 25);
	return 1 + (size_t)(next() % ((size_t)1 << bits));
}

Test(keys, invariant1_every_allocation_in_one_region_per_pd, .timeout = 120)
{
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	struct ibv_pd *pds[] = { NULL, fake_pd(1), fake_pd(2) };
	enum { LIVE = 200, OPS = 3000 };
	void *live[LIVE] = { 0 };
	for (int op = 0; op < OPS; op++) {
		if (op == OPS / 3) /* attach a PD while memory is live */
			cr_assert_eq(rdma_malloc_attach_pd(fake_pd(2)), 0);
		int i = (int)(next() % LIVE);
		void *p;
		switch (next() % 5) {
		case 0: p = rdma_malloc(random_size()); break;
		case 1: p = rdma_calloc(1 + next() % 64, 1 + random_size() / 64); break;
		case 2: p = rdma_aligned_alloc((size_t)1 << (next() % 23), random_size()); break;
		case 3: {
			void *q = NULL;
			cr_assert_eq(rdma_posix_memalign(&q, (size_t)8 << (next() % 12), random_size()), 0);
			p = q;
			break;
		}
		default:
			p = rdma_realloc(live[i], random_size());
			live[i] = NULL;
			break;
		}
		cr_assert(p, "allocation failed at op %d", op);
		rdma_free(live[i]);
		live[i] = p;
		for (size_t k = 0; k < (op < OPS / 3 ? 2u : 3u); k++)
			assert_covered(p, pds[k]);
	}
	for (int i = 0; i < LIVE; i++) {
		assert_covered(live[i], NULL);
		assert_covered(live[i], fake_pd(2));
		rdma_free(live[i]);
	}
}

Test(keys, foreign_pointers_are_enoent)
{
	int on_stack = 0;
	void *heap = malloc(64);
	static char in_bss[64];
	(void)in_bss;
	void *ptrs[] = { &on_stack, heap, in_bss, NULL, (void *)1, (void *)UINTPTR_MAX };
	for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
		uint32_t l = 7;
		cr_assert_eq(rdma_malloc_keys(ptrs[i], 1, NULL, &l, NULL), ENOENT, "pointer %p", ptrs[i]);
		cr_assert_eq(l, 7, "lkey written on failure");
		errno = 0;
		cr_assert_null(rdma_malloc_mr(ptrs[i], 8, NULL));
		cr_assert_eq(errno, ENOENT);
	}
	free(heap);
}

Test(keys, range_past_region_is_erange)
{
	char *p = rdma_malloc(100);
	struct ibv_mr *mr = rdma_malloc_mr(p, 100, NULL);
	cr_assert(mr);
	size_t to_end = (size_t)((char *)mr->addr + mr->length - p);
	cr_assert_eq(rdma_malloc_keys(p, to_end, NULL, NULL, NULL), 0);
	cr_assert_eq(rdma_malloc_keys(p, to_end + 1, NULL, NULL, NULL), ERANGE);
	cr_assert_eq(rdma_malloc_keys(p, SIZE_MAX, NULL, NULL, NULL), ERANGE, "overflowing length");
	cr_assert_eq(rdma_malloc_keys(p, 0, NULL, NULL, NULL), 0, "length 0 is length 1");
	rdma_free(p);
}

Test(keys, unattached_pd_is_enodev)
{
	char *p = rdma_malloc(100);
	cr_assert_eq(rdma_malloc_keys(p, 1, fake_pd(3), NULL, NULL), ENODEV);
	errno = 0;
	cr_assert_null(rdma_malloc_mr(p, 1, fake_pd(3)));
	cr_assert_eq(errno, ENODEV);
	rdma_free(p);
}

Test(keys, default_pd_is_the_backends)
{
	cr_assert_eq(rdma_malloc_default_pd(), fake_pd(0));
}

Test(keys, attach_detach)
{
	char *p = rdma_malloc(1000);
	cr_assert_eq(rdma_malloc_attach_pd(NULL), EINVAL);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(0)), EEXIST);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	uint32_t k0, k1;
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &k0, NULL), 0);
	cr_assert_eq(rdma_malloc_keys(p, 1, fake_pd(1), &k1, NULL), 0);
	cr_assert_neq(k0, k1, "one key per PD");
	rdmalloc_reserves_settle(); /* no reserve chunk registered meanwhile */
	size_t mrs = fake_live_mrs();
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), 0);
	cr_assert_lt(fake_live_mrs(), mrs, "detach deregistered nothing");
	cr_assert_eq(rdma_malloc_keys(p, 1, fake_pd(1), NULL, NULL), ENODEV);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), ENODEV);
	/* The default PD can go too; NULL lookups then say ENODEV. */
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(0)), 0);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, NULL, NULL), ENODEV);
	cr_assert_eq(fake_live_mrs(), 0);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(0)), 0);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, NULL, NULL), 0, "re-attached default PD");
	rdma_free(p);
}

Test(keys, attach_is_all_or_nothing, .init = cr_redirect_stderr)
{
	void *ps[8];
	for (int i = 0; i < 8; i++)
		ps[i] = rdma_malloc((size_t)(i + 1) << 21); /* several chunks */
	rdmalloc_reserves_settle(); /* no reserve chunk registered meanwhile */
	size_t before = fake_live_mrs();
	cr_assert_geq(before, 3);
	fake_fail_reg_from(fake_reg_calls() + 2); /* the second registration fails */
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), ENOMEM);
	cr_assert_eq(fake_live_mrs(), before, "a failed attach left registrations behind");
	cr_assert_eq(rdma_malloc_keys(ps[0], 1, fake_pd(1), NULL, NULL), ENODEV);
	fake_fail_reg_from(0);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	for (int i = 0; i < 8; i++)
		assert_covered(ps[i], fake_pd(1));
	fflush(stderr);
	cr_assert_stderr_neq_str("", "the failed attach was not logged (rdma_malloc_attach_pd(3) says it is)");
}

Test(keys, too_many_pds_is_enospc)
{
	static struct ibv_pd extra[RDMA_MALLOC_MAX_PDS];
	int attached = 0, err = 0;
	for (int i = 0; i < RDMA_MALLOC_MAX_PDS && !err; i++)
		if (!(err = rdma_malloc_attach_pd(&extra[i])))
			attached++;
	cr_assert_eq(err, ENOSPC);
	cr_assert_eq(attached, RDMA_MALLOC_MAX_PDS - 1, "the default PD holds one slot");
}

/* A fork child has none of the parent's registrations (doc/preload.md,
 * fork): its lookups say ENODEV, of old memory and new, until it attaches
 * a PD of its own, which registers both there; the parent keeps its keys. */
Test(keys, a_fork_child_has_keys_only_once_it_attaches_a_pd_of_its_own)
{
	char *p = rdma_malloc(100 << 10);
	cr_assert(p);
	uint32_t before, after;
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &before, NULL), 0);
	rdmalloc_reserves_settle();
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		if (rdma_malloc_keys(p, 1, NULL, NULL, NULL) != ENODEV)
			_exit(10); /* the parent's registration */
		char *q = rdma_malloc(3 << 20);
		if (!q)
			_exit(11);
		if (rdma_malloc_keys(q, 1, NULL, NULL, NULL) != ENODEV)
			_exit(12); /* a new chunk registered with the parent's PD */
		if (rdma_malloc_attach_pd(fake_pd(1)))
			_exit(13);
		uint32_t kp, kq;
		if (rdma_malloc_keys(p, 100 << 10, fake_pd(1), &kp, NULL) || rdma_malloc_keys(q, 3 << 20, fake_pd(1), &kq, NULL))
			_exit(14);
		const struct fake_mr_info *fp = fake_find(fake_pd(1), p), *fq = fake_find(fake_pd(1), q);
		if (!fp || !fq || fp->mr->lkey != kp || fq->mr->lkey != kq)
			_exit(15); /* keys of no region of the child's PD */
		rdma_free(q);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	static const char *why[] = { [10] = "the child kept the parent's keys",
				     [11] = "the child could not allocate",
				     [12] = "the child's new chunk had keys of the parent's PD",
				     [13] = "the child could not attach a PD",
				     [14] = "the child had no keys under its own PD",
				     [15] = "the child's keys are of no region of its PD" };
	cr_assert(WIFEXITED(status), "child: status %#x", status);
	int code = WEXITSTATUS(status);
	cr_assert_eq(code, 0, "child: %s (exit %d)", code < 16 && why[code] ? why[code] : "?", code);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &after, NULL), 0);
	cr_assert_eq(after, before, "the parent's key changed");
	cr_assert(fake_find(fake_pd(0), p), "the child's exit took the parent's region");
	rdma_free(p);
}

/* RDMALLOC_MAX_REGISTERED counts a chunk registered with two PDs once
 * (pinned_bytes; doc/options.md): 6 MiB under two PDs fits in 8 MiB, a
 * second 6 MiB does not. */
Test(keys, the_limit_counts_a_chunk_of_two_pds_once, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_MAX_REGISTERED", "8M", 1);
	setenv("RDMALLOC_RESERVE", "0", 1);
	fake_verbs_install(1);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	char *p = rdma_malloc(6 << 20);
	cr_assert(p, "6 MiB under two PDs refused by an 8 MiB limit: %s", strerror(errno));
	cr_assert(fake_find(fake_pd(0), p) && fake_find(fake_pd(1), p), "not registered with both PDs");
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_leq(st.pinned_bytes, 8 << 20, "pinned_bytes %llu", (unsigned long long)st.pinned_bytes);
	cr_assert_geq(st.registered_bytes, 2 * st.pinned_bytes - (2 << 20),
		      "registered_bytes %llu, pinned_bytes %llu: not two PDs' worth", (unsigned long long)st.registered_bytes,
		      (unsigned long long)st.pinned_bytes);
	errno = 0;
	char *q = rdma_malloc(6 << 20);
	cr_assert_null(q, "a second 6 MiB passed an 8 MiB limit");
	cr_assert_eq(errno, ENOMEM);
	rdma_free(p);
}
