/* SPDX-License-Identifier: MIT */
/*
 * rereg.c - rdma_heap_set_access(): new access flags for every chunk of a
 * heap at once (doc/modes.md, "Re-registration").
 *
 * Locking: the PD lock (outer) is held for the whole change, so attach,
 * detach and heap destruction wait, and the chunks and their registrations stay
 * put; pdtable.c takes the chunk lock only to find the next registration to
 * change, never across ibv_rereg_mr/ibv_reg_mr/ibv_dereg_mr.  Chunks being
 * created meanwhile register with the heap's new flags: the heap's access
 * is stored, then the PD generation is bumped, so a creator that read the
 * old flags registers again before it publishes (pdtable.c), and one that
 * published before is found by the scan.
 */
#include <errno.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "log.h"
#include "options.h"
#include "os.h"
#include "pd.h"
#include "rereg.h"

/* heap.h spells these without verbs.h (rdmalloc_heap_implied_access). */
_Static_assert(IBV_ACCESS_MW_BIND_ == IBV_ACCESS_MW_BIND && IBV_ACCESS_ON_DEMAND_ == IBV_ACCESS_ON_DEMAND,
	       "heap.h's copies of the verbs access bits");

/* Key changes, recorded under the PD lock and told to the program after it
 * is released: its callback may then allocate, look up, create and destroy
 * heaps or read the stats (which take the heap lock, outside the PD lock)
 * without deadlocking.  Space comes from mmap, never from an allocator
 * whose locks we might hold; sized first from the registrations the heap
 * has, grown with mremap if chunks are created meanwhile. */
struct key_change {
	struct ibv_pd *pd;
	void *addr;
	size_t len;
	uint32_t ol, ok, nl, nk;
	size_t seq; /* order of the changes of one registration */
};

struct key_changes {
	struct key_change *v;
	size_t n, cap;
	int err; /* ENOMEM: a change could not be recorded */
};

RDMALLOC_TESTABLE size_t rdmalloc_rereg_records_max = SIZE_MAX;

static int changes_reserve(struct key_changes *kc, size_t cap)
{
	if (cap > rdmalloc_rereg_records_max)
		cap = rdmalloc_rereg_records_max;
	if (cap <= kc->cap)
		return ENOMEM;
	size_t bytes = cap * sizeof(*kc->v);
	void *m = kc->v ? rdmalloc_os_remap(kc->v, kc->cap * sizeof(*kc->v), bytes) : rdmalloc_os_map(bytes);
	if (!m)
		return ENOMEM;
	kc->v = m;
	kc->cap = cap;
	return 0;
}

static void record(void *ctx, struct ibv_pd *pd, void *addr, size_t len, uint32_t ol, uint32_t ok,
		   uint32_t nl, uint32_t nk)
{
	struct key_changes *kc = ctx;
	if (kc->n == kc->cap && changes_reserve(kc, 2 * kc->cap)) {
		if (!kc->err)
			rdmalloc_log(RDMALLOC_LOG_ERROR, "rdma_heap_set_access: no memory to record the key "
				     "changes: the callback is not called (look the keys up again)");
		kc->err = ENOMEM;
		return;
	}
	kc->v[kc->n] = (struct key_change){ pd, addr, len, ol, ok, nl, nk, kc->n };
	kc->n++;
}

static int by_region(const void *a, const void *b)
{
	const struct key_change *x = a, *y = b;
	if (x->pd != y->pd)
		return (uintptr_t)x->pd < (uintptr_t)y->pd ? -1 : 1;
	if (x->addr != y->addr)
		return (uintptr_t)x->addr < (uintptr_t)y->addr ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Tell @cb each region's net change (a failed change undone replaces a
 * region twice, or gives it its old keys back).  No lock held. */
static void report(struct key_changes *kc, rdma_heap_key_change_fn cb, void *ctx)
{
	qsort(kc->v, kc->n, sizeof(*kc->v), by_region);
	for (size_t i = 0, j; i < kc->n; i = j) {
		const struct key_change *first = &kc->v[i];
		for (j = i + 1; j < kc->n && kc->v[j].pd == first->pd && kc->v[j].addr == first->addr; j++)
			;
		const struct key_change *last = &kc->v[j - 1];
		if (last->nl != first->ol || last->nk != first->ok)
			cb(ctx, first->pd, first->addr, first->len, first->ol, first->ok, last->nl, last->nk);
	}
}

RDMA_EXPORT int rdma_heap_set_access(rdma_heap_t *heap, unsigned int access, unsigned int flags,
				     rdma_heap_key_change_fn cb, void *ctx)
{
	rdmalloc_init();
	if (flags & ~RDMA_HEAP_SET_ACCESS_NEW_KEYS)
		return EINVAL;
	int new_keys = (flags & RDMA_HEAP_SET_ACCESS_NEW_KEYS) != 0;
	rdmalloc_pd_lock();
	struct rdmalloc_heap *h = rdmalloc_heap_live(heap);
	/* An ODP heap's flags, as rdma_heap_access() gives them, include
	 * ON_DEMAND, which it keeps whatever the caller says. */
	if (h && (rdmalloc_heap_flags_of(h) & RDMA_HEAP_ODP))
		access &= ~(unsigned)IBV_ACCESS_ON_DEMAND;
	if (!h || !rdmalloc_access_valid(access)) {
		rdmalloc_pd_unlock();
		return EINVAL;
	}
	if (rdmalloc_heap_flags_of(h) & RDMA_HEAP_ODP_IMPLICIT) {
		/* The shared region's keys reach the whole address space, and
		 * they are other heaps' keys too: not one heap's to replace,
		 * nor to bind windows on. */
		int e = (access & IBV_ACCESS_MW_BIND)	    ? EINVAL
			: (access & RDMALLOC_ACCESS_REMOTE) ? EPERM
			: new_keys			    ? EOPNOTSUPP
							    : 0;
		if (e) {
			rdmalloc_pd_unlock();
			return e;
		}
	}
	/* A region with a window on it cannot be deregistered (IBA
	 * 10.6.7.2.6), nor changed in place; the window's owner frees it
	 * first.  Nor may the keys of a chunk change under the drop-in's
	 * elided regions, which the program holds as struct ibv_mr with
	 * those keys: their owner deregisters them first. */
	if (rdmalloc_chunks_pinned(h)) {
		rdmalloc_pd_unlock();
		return EBUSY;
	}
	/* Every registration may change twice (the change, then its undoing).
	 * Recorded only for a callback. */
	struct key_changes kc = { 0 };
	if (cb && changes_reserve(&kc, 2 * rdmalloc_chunks_count_regs(h) + 16)) {
		rdmalloc_pd_unlock();
		return ENOMEM;
	}
	access = rdmalloc_heap_implied_access(rdmalloc_heap_flags_of(h), access);
	unsigned old = rdmalloc_heap_access_of(h);
	unsigned stamp = atomic_fetch_add(&rdmalloc_rereg_stamp, 1) + 1;
	rdmalloc_heap_store_access(h, access);
	rdmalloc_chunks_bump_gen();
	unsigned long changed = 0;
	rdma_heap_key_change_fn rec = cb ? record : NULL;
	int err = rdmalloc_chunks_rereg(h, access, new_keys, stamp, rec, &kc, &changed);
	if (err) {
		/* Back to the old flags, in place where possible. */
		rdmalloc_heap_store_access(h, old);
		rdmalloc_chunks_bump_gen();
		stamp = atomic_fetch_add(&rdmalloc_rereg_stamp, 1) + 1;
		int e2 = rdmalloc_chunks_rereg(h, old, 0, stamp, rec, &kc, &changed);
		if (e2) {
			char first[64]; /* rdmalloc_strerror: one call per message */
			snprintf(first, sizeof(first), "%s", rdmalloc_strerror(err));
			rdmalloc_log(RDMALLOC_LOG_ERROR, "changing a heap's access flags failed (%s) and "
				     "changing them back failed too (%s): its chunks have mixed flags",
				     first, rdmalloc_strerror(e2));
		}
	}
	if (changed)
		rdmalloc_heap_bump_key_gen(h);
	rdmalloc_pd_unlock();
	/* Some changes not recorded: no report at all, rather than one that
	 * may name keys a later change (an undoing) replaced. */
	if (cb && !kc.err)
		report(&kc, cb, ctx);
	if (kc.v)
		rdmalloc_os_unmap(kc.v, kc.cap * sizeof(*kc.v));
	return err ? err : kc.err; /* done, but cb not called: the caller must know */
}
