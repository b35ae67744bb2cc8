/* SPDX-License-Identifier: MIT */
/*
 * rereg.c - rdma_heap_set_access(): new access flags for every chunk of a
 * heap at once (doc/modes.md, "Re-registration").
 *
 * Locking: the PD lock (outer) is held for the whole change, so attach,
 * detach and heap destruction wait, and the chunks and their slots stay
 * put; chunk.c takes the chunk lock only to find the next registration to
 * change, never across ibv_rereg_mr/ibv_reg_mr/ibv_dereg_mr.  Chunks being
 * created meanwhile register with the heap's new flags: the heap's access
 * is stored, then the PD generation is bumped, so a creator that read the
 * old flags registers again before it publishes (chunk.c), and one that
 * published before is found by the scan.
 */
#include <errno.h>
#include <infiniband/verbs.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "log.h"
#include "odp.h"
#include "options.h"
#include "pd.h"

RDMA_EXPORT int rdma_heap_set_access(rdma_heap_t *heap, unsigned int access, unsigned int flags,
				     rdma_heap_key_change_fn cb, void *ctx)
{
	rdmalloc_init();
	if ((flags & ~RDMA_HEAP_SET_ACCESS_NEW_KEYS) || !rdmalloc_access_valid(access))
		return EINVAL;
	int new_keys = (flags & RDMA_HEAP_SET_ACCESS_NEW_KEYS) != 0;
	rdmalloc_pd_lock();
	struct rdmalloc_heap *h = rdmalloc_heap_live(heap);
	if (!h) {
		rdmalloc_pd_unlock();
		return EINVAL;
	}
	if (rdmalloc_heap_flags_of(h) & RDMA_HEAP_ODP_IMPLICIT) {
		/* The shared region's keys reach the whole address space, and
		 * they are other heaps' keys too: not one heap's to replace. */
		int e = (access & RDMALLOC_ACCESS_REMOTE) ? EPERM : new_keys ? EOPNOTSUPP : 0;
		if (e) {
			rdmalloc_pd_unlock();
			return e;
		}
	}
	if (rdmalloc_heap_flags_of(h) & RDMA_HEAP_MW_BIND)
		access |= IBV_ACCESS_MW_BIND;
	if (rdmalloc_heap_flags_of(h) & RDMA_HEAP_ODP)
		access |= IBV_ACCESS_ON_DEMAND;
	unsigned old = rdmalloc_heap_access_of(h);
	unsigned stamp = atomic_fetch_add(&rdmalloc_rereg_stamp, 1) + 1;
	rdmalloc_heap_store_access(h, access);
	rdmalloc_chunks_bump_gen();
	unsigned long changed = 0;
	int err = rdmalloc_chunks_rereg(h, access, new_keys, stamp, cb, ctx, &changed);
	if (err) {
		/* Back to the old flags, in place where possible. */
		rdmalloc_heap_store_access(h, old);
		rdmalloc_chunks_bump_gen();
		stamp = atomic_fetch_add(&rdmalloc_rereg_stamp, 1) + 1;
		int e2 = rdmalloc_chunks_rereg(h, old, 0, stamp, cb, ctx, &changed);
		if (e2)
			rdmalloc_log(RDMALLOC_LOG_ERROR, "changing a heap's access flags failed (%s) and "
				     "changing them back failed too (%s): its chunks have mixed flags",
				     strerror(err), strerror(e2));
	}
	if (changed)
		rdmalloc_heap_bump_key_gen(h);
	rdmalloc_pd_unlock();
	return err;
}
