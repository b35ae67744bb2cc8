/* SPDX-License-Identifier: MIT */
/*
 * mw.c - memory windows on rdmalloc memory (doc/modes.md, "Memory windows").
 *
 * A window is bound to the region of the chunk holding [ptr, ptr+len): the
 * chunk must have been registered with IBV_ACCESS_MW_BIND (a heap created
 * with RDMA_HEAP_MW_BIND).  Binding and revoking are work requests on the
 * caller's QP; the caller owns the CQ and polls their completions.  Nothing
 * here takes a lock: the window belongs to the caller.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "options.h"
#include "regtable.h"
#include "stats.h"
#include "verbs.h"


/*
 * The region each type 1 window is bound on.  Unbinding a type 1 window is
 * a bind to zero length, and some providers (rxe) read the lkey of the
 * bind's region even then, so the revocation passes the same region.
 * Lock-free (no lock to order against fork or the others): an entry is
 * claimed with a compare-and-swap; only the window's owner reads it.
 */
#define MW1_MAX 4096
static struct {
	_Atomic(struct ibv_mw *) mw;
	_Atomic(struct ibv_mr *) mr;
} mw1[MW1_MAX];

static int mw1_put(struct ibv_mw *mw, struct ibv_mr *mr)
{
	for (size_t i = 0; i < MW1_MAX; i++) {
		struct ibv_mw *expected = NULL;
		if (atomic_compare_exchange_strong(&mw1[i].mw, &expected, mw)) {
			atomic_store(&mw1[i].mr, mr);
			return 1;
		}
	}
	return 0;
}

/* The region @mw was bound on (NULL if unknown); @forget drops the entry. */
static struct ibv_mr *mw1_get(struct ibv_mw *mw, int forget)
{
	for (size_t i = 0; i < MW1_MAX; i++) {
		if (atomic_load(&mw1[i].mw) == mw) {
			struct ibv_mr *mr = atomic_load(&mw1[i].mr);
			if (forget) {
				atomic_store(&mw1[i].mr, NULL);
				atomic_store(&mw1[i].mw, NULL);
			}
			return mr;
		}
	}
	return NULL;
}

RDMA_EXPORT struct ibv_mw *rdma_malloc_mw_grant(struct ibv_qp *qp, const void *ptr, size_t len,
						unsigned int access, int type, uint64_t wr_id,
						unsigned int send_flags)
{
	rdmalloc_init();
	if (!qp || !len || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) || !access ||
	    (access & ~RDMALLOC_ACCESS_REMOTE)) {
		errno = EINVAL;
		return NULL;
	}
	struct ibv_mr *mr = rdma_malloc_mr(ptr, len, qp->pd);
	if (!mr)
		return NULL; /* errno ENOENT, ERANGE or ENODEV */
	struct rdmalloc_chunk *c = rdmalloc_table_lookup(ptr);
	if (!c || !(rdmalloc_heap_access_of(c->heap) & IBV_ACCESS_MW_BIND)) {
		errno = EPERM;
		return NULL;
	}
	struct ibv_mw *mw = rdmalloc_alloc_mw(qp->pd, type);
	if (!mw)
		return NULL;
	if (type == IBV_MW_TYPE_1 && !mw1_put(mw, mr)) {
		rdmalloc_dealloc_mw(mw);
		errno = ENOMEM; /* MW1_MAX type 1 windows alive */
		return NULL;
	}
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	int err = rdmalloc_bind_mw(qp, mw, mr, (uintptr_t)ptr, len, access, rkey, wr_id, send_flags);
	if (err) {
		if (type == IBV_MW_TYPE_1)
			mw1_get(mw, 1);
		rdmalloc_dealloc_mw(mw);
		errno = err;
		return NULL;
	}
	if (type == IBV_MW_TYPE_2) /* ibv_bind_mw() does this itself for type 1 */
		mw->rkey = rkey;
	STAT_INC(mw_binds);
	return mw;
}

RDMA_EXPORT int rdma_malloc_mw_revoke(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id,
				      unsigned int send_flags)
{
	if (!qp || !mw)
		return EINVAL;
	rdmalloc_init();
	int err;
	if (mw->type == IBV_MW_TYPE_1) {
		struct ibv_mr *mr = mw1_get(mw, 0);
		err = rdmalloc_bind_mw(qp, mw, mr, mr ? (uintptr_t)mr->addr : 0, 0, 0, 0, wr_id, send_flags);
	} else {
		err = rdmalloc_local_inv(qp, mw->rkey, wr_id, send_flags);
	}
	if (!err)
		STAT_INC(mw_revokes);
	return err;
}

RDMA_EXPORT int rdma_malloc_mw_free(struct ibv_mw *mw)
{
	if (!mw)
		return 0;
	rdmalloc_init();
	if (mw->type == IBV_MW_TYPE_1)
		mw1_get(mw, 1);
	return rdmalloc_dealloc_mw(mw);
}
