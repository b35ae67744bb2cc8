/* SPDX-License-Identifier: MIT */
/*
 * test_mw.c - memory windows on rdmalloc memory (rdma_malloc_mw_*) against
 * the fake backend, which checks binds as a device does (IB spec C10-72..75)
 * and records every window.  That a NIC enforces the windows is proven in
 * the Soft-RoCE guest (tests/e2e/test_modes.c).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <string.h>

#include "fake_verbs.h"
#include "reserve.h"
#include "rdma_malloc.h"

static struct ibv_qp qp0, qp_other;
static rdma_heap_t *mwheap;
static char *buf;

static void setup(void)
{
	fake_verbs_install(1);
	qp0.pd = fake_pd(0);
	qp_other.pd = fake_pd(2); /* not attached */
	mwheap = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
							    .flags = RDMA_HEAP_MW_BIND });
	cr_assert(mwheap, "%s", strerror(errno));
	buf = rdma_heap_malloc(mwheap, 16384);
	cr_assert(buf);
}

TestSuite(mw, .init = setup);

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

Test(mw, heap_registers_with_mw_bind)
{
	cr_assert_eq(rdma_heap_access(mwheap), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	cr_assert_eq(rdma_heap_flags(mwheap), RDMA_HEAP_MW_BIND);
	const struct fake_mr_info *m = fake_find(fake_pd(0), buf);
	cr_assert(m);
	cr_assert_eq(m->access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	cr_assert_eq(rdma_heap_set_access(mwheap, rdma_heap_access(mwheap), 0, NULL, NULL), 0,
		     "its flags not taken back");
	cr_assert_eq(rdma_heap_access(mwheap), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	errno = 0;
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .flags = 1u }), "bit 0 is reserved");
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .flags = 1u << 4 }));
	cr_assert_eq(errno, EINVAL);
}

static void grant_exact_range(int type)
{
	const unsigned acc = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp0, buf + 100, 1000, acc, type, 7, IBV_SEND_SIGNALED);
	cr_assert(mw, "grant: %s", strerror(errno));
	const struct fake_mw_info *w = fake_mw(mw);
	cr_assert(w && w->bound);
	cr_assert_eq(w->addr, (uintptr_t)(buf + 100));
	cr_assert_eq(w->len, 1000);
	cr_assert_eq(w->access, acc);
	cr_assert_eq(w->mr, rdma_malloc_mr(buf, 1, qp0.pd), "bound to the chunk's region");
	if (type == IBV_MW_TYPE_2)
		cr_assert_eq(w->qp, &qp0);
	uint32_t rkey = mw->rkey, mr_rkey;
	cr_assert_eq(rdma_malloc_keys(buf, 1, NULL, NULL, &mr_rkey), 0);
	cr_assert_neq(rkey, mr_rkey, "the window's rkey is its own");
	cr_assert(fake_mw_allows(rkey, (uintptr_t)(buf + 100), 1000, IBV_ACCESS_REMOTE_WRITE));
	cr_assert(!fake_mw_allows(rkey, (uintptr_t)(buf + 99), 1, IBV_ACCESS_REMOTE_WRITE), "one byte before");
	cr_assert(!fake_mw_allows(rkey, (uintptr_t)(buf + 1100), 1, IBV_ACCESS_REMOTE_READ), "one byte after");
	cr_assert(!fake_mw_allows(rkey, (uintptr_t)(buf + 100), 1001, IBV_ACCESS_REMOTE_READ));
	cr_assert(!fake_mw_allows(rkey, (uintptr_t)(buf + 100), 8, IBV_ACCESS_REMOTE_ATOMIC));
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.mws, 1);
	cr_assert_eq(st.mw_binds, 1);

	cr_assert_eq(rdma_malloc_mw_revoke(&qp0, mw, 8, IBV_SEND_SIGNALED), 0);
	cr_assert(!fake_mw(mw)->bound, "still bound after revoke");
	cr_assert(!fake_mw_allows(rkey, (uintptr_t)(buf + 100), 1, IBV_ACCESS_REMOTE_READ));
	cr_assert(!fake_mw_allows(mw->rkey, (uintptr_t)(buf + 100), 1, IBV_ACCESS_REMOTE_READ));
	if (type == IBV_MW_TYPE_1)
		cr_assert_neq(mw->rkey, rkey, "a type 1 unbind gives the window a new rkey");
	cr_assert_eq(stats().mw_revokes, 1);
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	cr_assert_eq(fake_live_mws(), 0);
	cr_assert_eq(stats().mws, 0);
}

Test(mw, type2_exact_range_and_invalidate)
{
	grant_exact_range(IBV_MW_TYPE_2);
}

Test(mw, type1_exact_range_and_unbind)
{
	grant_exact_range(IBV_MW_TYPE_1);
}

Test(mw, type2_rkey_is_incremented)
{
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp0, buf, 64, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0);
	cr_assert(mw);
	/* The fake allocates windows with key tag 0x11: the bind must post 0x12. */
	cr_assert_eq(mw->rkey & 0xff, 0x12);
	cr_assert(fake_mw_allows(mw->rkey, (uintptr_t)buf, 64, IBV_ACCESS_REMOTE_READ));
	rdma_malloc_mw_free(mw);
}

Test(mw, bad_arguments)
{
	const unsigned rw = IBV_ACCESS_REMOTE_WRITE;
	struct {
		struct ibv_qp *qp;
		const void *p;
		size_t len;
		unsigned acc;
		int type;
		int err;
	} cases[] = {
		{ NULL, buf, 8, rw, IBV_MW_TYPE_2, EINVAL },
		{ &qp0, buf, 0, rw, IBV_MW_TYPE_2, EINVAL },
		{ &qp0, buf, 8, rw, 3, EINVAL },
		{ &qp0, buf, 8, 0, IBV_MW_TYPE_2, EINVAL },
		{ &qp0, buf, 8, IBV_ACCESS_LOCAL_WRITE, IBV_MW_TYPE_1, EINVAL },
		{ &qp0, buf, 8, IBV_ACCESS_MW_BIND, IBV_MW_TYPE_1, EINVAL },
		{ &qp0, &qp0, 8, rw, IBV_MW_TYPE_2, ENOENT },
		{ &qp0, buf, (size_t)1 << 40, rw, IBV_MW_TYPE_2, ERANGE },
		{ &qp_other, buf, 8, rw, IBV_MW_TYPE_2, ENODEV },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		errno = 0;
		cr_assert_null(rdma_malloc_mw_grant(cases[i].qp, cases[i].p, cases[i].len, cases[i].acc,
						    cases[i].type, 0, 0), "case %zu granted", i);
		cr_assert_eq(errno, cases[i].err, "case %zu: %s", i, strerror(errno));
	}
	cr_assert_eq(fake_live_mws(), 0, "a refused grant left a window behind");
	cr_assert_eq(rdma_malloc_mw_revoke(NULL, NULL, 0, 0), EINVAL);
	cr_assert_eq(rdma_malloc_mw_free(NULL), 0);
}

Test(mw, heap_without_mw_bind_is_eperm)
{
	char *p = rdma_malloc(100); /* default heap: no MW_BIND */
	errno = 0;
	cr_assert_null(rdma_malloc_mw_grant(&qp0, p, 100, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0));
	cr_assert_eq(errno, EPERM);
	cr_assert_eq(fake_live_mws(), 0);
	rdma_free(p);
}

/* EPERM is the region's want of MW_BIND: a heap given the access flag
 * without RDMA_HEAP_MW_BIND (rdma_heap_create(3)) grants windows too. */
Test(mw, heap_with_the_access_flag_grants)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND });
	cr_assert(h, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_flags(h), 0);
	char *p = rdma_heap_malloc(h, 100);
	cr_assert(p);
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp0, p, 100, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0);
	cr_assert(mw, "%s", strerror(errno));
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	rdma_free(p);
}

Test(mw, refused_bind_frees_the_window)
{
	/* A read-only heap with MW_BIND: a REMOTE_WRITE window needs LOCAL_WRITE
	 * on the region (C10-74), so the device refuses the bind. */
	rdma_heap_t *ro = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_REMOTE_READ,
								    .flags = RDMA_HEAP_MW_BIND });
	char *p = rdma_heap_malloc(ro, 64);
	errno = 0;
	cr_assert_null(rdma_malloc_mw_grant(&qp0, p, 64, IBV_ACCESS_REMOTE_WRITE, IBV_MW_TYPE_2, 0, 0));
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(fake_live_mws(), 0);
	cr_assert_eq(stats().mws, 0);
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp0, p, 64, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0);
	cr_assert(mw, "a read window on the same memory: %s", strerror(errno));
	rdma_malloc_mw_free(mw);
}

Test(mw, device_without_windows_is_eopnotsupp)
{
	fake_without_mw(1);
	errno = 0;
	cr_assert_null(rdma_malloc_mw_grant(&qp0, buf, 8, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_1, 0, 0));
	cr_assert_eq(errno, EOPNOTSUPP);
	fake_without_mw(0);
}

Test(mw, type2_revoke_needs_its_qp)
{
	struct ibv_qp qp1 = { .pd = fake_pd(0) };
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp0, buf, 64, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0);
	cr_assert(mw);
	cr_assert_eq(rdma_malloc_mw_revoke(&qp1, mw, 0, 0), EINVAL, "invalidated through another QP");
	cr_assert(fake_mw(mw)->bound);
	cr_assert_eq(rdma_malloc_mw_revoke(&qp0, mw, 0, 0), 0);
	/* Once invalidated, a type 2 window may be bound again (new key). */
	rdma_malloc_mw_free(mw);
}

/* A region a failed ibv_rereg_mr left unusable, not replaced yet: no
 * window is bound on it (EIO, not EPERM: the heap has MW_BIND). */
Test(mw, no_window_on_a_broken_region, .init = NULL)
{
	cr_redirect_stderr();
	setup();
	rdmalloc_reserves_settle(); /* no fill of the reserve's thread takes a failure meant for these */
	fake_set_rereg(FAKE_REREG_BROKEN);
	fake_fail_reg_errno(EIO);
	fake_fail_reg(fake_reg_calls() + 1, 2); /* the replacement, then the undoing's */
	cr_assert_eq(rdma_heap_set_access(mwheap, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0, NULL, NULL),
		     EIO);
	fake_fail_reg(0, 0);
	fake_set_rereg(FAKE_REREG_KEEP_KEYS);
	errno = 0;
	cr_assert_null(rdma_malloc_mw_grant(&qp0, buf, 64, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0));
	cr_assert_eq(errno, EIO, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_set_access(mwheap, IBV_ACCESS_LOCAL_WRITE, 0, NULL, NULL), 0);
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp0, buf, 64, IBV_ACCESS_REMOTE_READ, IBV_MW_TYPE_2, 0, 0);
	cr_assert(mw, "once replaced: %s", strerror(errno));
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
}
