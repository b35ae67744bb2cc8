/* SPDX-License-Identifier: MIT */
/*
 * mw.c - memory windows on rdmalloc memory (doc/modes.md, "Memory windows").
 *
 * A window is bound to the region of the chunk holding [ptr, ptr+len): the
 * chunk must have been registered with IBV_ACCESS_MW_BIND (a heap created
 * with RDMA_HEAP_MW_BIND).  Binding and revoking are work requests on the
 * caller's QP; the caller owns the CQ and polls their completions.
 *
 * Each window is recorded with the chunk registration it is bound on, and
 * counts on it (rdmalloc_reg.windows) until rdma_malloc_mw_free: a region
 * with a window may not be deregistered (IBA 10.6.7.2.6), so access
 * changes, detach and heap destruction refuse with EBUSY meanwhile, and a
 * type 1 revocation (a bind to zero length, for which some providers, rxe,
 * read the region's lkey) passes the very region of the bind.  The table
 * and the counts are guarded by the PD lock, which every deregistration of
 * a published region holds but a give-back's, and a window pins its chunk
 * (rdmalloc_chunk_pin), which is then never given back.
 */
#include "mw.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>

#include "addrmap.h"
#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "lookup.h"
#include "options.h"
#include "os.h"
#include "pd.h"
#include "counters.h"
#include "reserve.h"
#include "verbs.h"

/* An open-addressing table keyed by window, in mmap'd memory (an
 * allocation here could re-enter the drop-in under the PD lock). */
struct window {
	struct ibv_mw *mw; /* NULL: free entry */
	struct rdmalloc_chunk *chunk;
	unsigned index; /* its registration: chunk->reg[index] */
};

static struct window *table;
static size_t cap, used; /* cap: 0 or a power of two */

static size_t home(const struct ibv_mw *mw)
{
	return (size_t)(((uintptr_t)mw >> 4) * 0x9e3779b97f4a7c15ull) & (cap - 1);
}

static struct window *find(const struct ibv_mw *mw)
{
	for (size_t i = cap ? home(mw) : 0, n = 0; n < cap; i = (i + 1) & (cap - 1), n++) {
		if (table[i].mw == mw)
			return &table[i];
		if (!table[i].mw)
			return NULL;
	}
	return NULL;
}

static void put(struct window w)
{
	size_t i = home(w.mw);
	while (table[i].mw)
		i = (i + 1) & (cap - 1);
	table[i] = w;
	used++;
}

/* Room for one more at a load of at most 1/2.  0 or ENOMEM. */
static int reserve(void)
{
	if (2 * (used + 1) <= cap)
		return 0;
	size_t ncap = cap ? 2 * cap : 64;
	void *m = rdmalloc_os_map(ncap * sizeof(*table));
	if (!m)
		return ENOMEM;
	struct window *old = table;
	size_t ocap = cap;
	table = m;
	cap = ncap;
	used = 0;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].mw)
			put(old[i]);
	if (old)
		rdmalloc_os_unmap(old, ocap * sizeof(*old));
	return 0;
}

/* Remove @w, shifting back the entries its removal would cut off. */
static void drop(struct window *w)
{
	size_t i = (size_t)(w - table);
	table[i].mw = NULL;
	used--;
	for (size_t j = (i + 1) & (cap - 1); table[j].mw; j = (j + 1) & (cap - 1)) {
		size_t h = home(table[j].mw);
		/* Entry j may move to the hole at i if its home is not in (i, j]. */
		if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
			table[i] = table[j];
			table[j].mw = NULL;
			i = j;
		}
	}
}

void rdmalloc_mw_forget(void)
{
	/* A fork child (one thread): the windows and regions are the parent's;
	 * the chunks' counts are cleared with their registrations. */
	for (size_t i = 0; i < cap; i++)
		table[i].mw = NULL;
	used = 0;
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
	struct rdmalloc_chunk *c, *found;
	struct rdmalloc_reg *r;
	/* A first use's registration shared out (outside every lock), as a
	 * key lookup's (keys.c, first_use). */
	struct rdmalloc_chunk *seen = rdmalloc_addrmap_lookup(ptr);
	if (seen)
		rdmalloc_chunk_demand_prepare(seen);
	rdmalloc_pd_lock();
	/* Found and pinned as one (not given back under the window): a
	 * descriptor found without the chunk lock may meanwhile be released
	 * and made another chunk's (a big block freed; elide.c's eligible). */
	int err = rdmalloc_chunk_pin_at(ptr, len, 0, &c), pinned = !err; /* ENOENT or ERANGE */
	/* A chunk of an on-demand heap (the drop-in's) is registered with the
	 * QP's PD on its first use, as by rdma_malloc_keys(). */
	if (!err && rdmalloc_spec_on_demand(c->spec) && rdmalloc_pd_attached(qp->pd)) {
		int saved = errno;
		err = rdmalloc_chunk_demand(c, qp->pd);
		errno = saved;
	}
	if (!err)
		err = rdmalloc_lookup(ptr, len, qp->pd, &found, &r); /* ENODEV; found is c, pinned */
	if (!err && r->access == RDMALLOC_REG_BROKEN)
		err = EIO; /* unusable after a failed ibv_rereg_mr (rdma_heap_set_access) */
	if (!err && !(r->access & IBV_ACCESS_MW_BIND))
		err = EPERM;
	if (!err)
		err = reserve();
	struct ibv_mw *mw = NULL;
	if (!err && !(mw = rdmalloc_alloc_mw(qp->pd, type)))
		err = errno;
	if (!err) {
		struct ibv_mr *mr = atomic_load_explicit(&r->mr, memory_order_relaxed);
		uint32_t rkey = rdmalloc_next_rkey(mw->rkey);
		err = rdmalloc_bind_mw(qp, mw, mr, (uintptr_t)ptr, len, access, rkey, wr_id, send_flags);
		if (err) {
			rdmalloc_dealloc_mw(mw);
		} else {
			if (type == IBV_MW_TYPE_2) /* ibv_bind_mw() does this itself for type 1 */
				mw->rkey = rkey;
			put((struct window){ mw, c, (unsigned)(r - c->reg) });
			r->windows++;
			STAT_INC(mw_binds);
		}
	}
	if (err && pinned)
		rdmalloc_chunk_unpin(c);
	rdmalloc_pd_unlock();
	rdmalloc_threads_start_wanted(); /* the tick of a first use's decay: outside every lock */
	if (err) {
		errno = err;
		return NULL;
	}
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
		rdmalloc_pd_lock(); /* the region stays while its window is recorded */
		struct window *w = find(mw);
		struct ibv_mr *mr = w ? atomic_load_explicit(&w->chunk->reg[w->index].mr, memory_order_relaxed)
				      : NULL;
		err = rdmalloc_bind_mw(qp, mw, mr, mr ? (uintptr_t)mr->addr : 0, 0, 0, 0, wr_id, send_flags);
		rdmalloc_pd_unlock();
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
	rdmalloc_pd_lock();
	int err = rdmalloc_dealloc_mw(mw);
	struct window *w;
	if (!err && (w = find(mw)) != NULL) { /* a failed dealloc leaves the window bound */
		struct rdmalloc_chunk *c = w->chunk;
		c->reg[w->index].windows--;
		drop(w);
		rdmalloc_chunk_unpin(c);
	}
	rdmalloc_pd_unlock();
	return err;
}
