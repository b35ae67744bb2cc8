/* SPDX-License-Identifier: MIT */
/* keys.c - rdma_malloc_mr() and rdma_malloc_keys(): pointer to keys. */
#include "lookup.h"

#include <errno.h>

#include "chunk.h"
#include "compiler.h"
#include "init.h"
#include "pd.h"
#include "addrmap.h"
#include "counters.h"
#include "fault.h"
#include "reserve.h"

#if RDMALLOC_HAVE_MLX5DV_MKEY
/*
 * UMR hook point (doc/modes.md, "UMR"): where the headers offer mlx5dv
 * indirect mkeys, a key spanning several chunks would be looked up here,
 * after the per-chunk lookup fails with ERANGE: [ptr, ptr+len) crossing a
 * chunk boundary, answered from a cache of indirect mkeys (mlx5dv_wr_mr_list
 * over the chunks' regions) keyed by the chunks' first granules.  Nothing is
 * compiled here: no device of the test bed (rxe) has UMR, and the design
 * note says why such a key is rarely worth it for an allocator.
 */
#endif

/*
 * The keys and region of [ptr, ptr+len) with @pd, read as one with the PD
 * their registration belongs to: a read that overlapped a change of that
 * PD (region.c brackets it with reg->seq) answers ENODEV, which is right
 * for a lookup concurrent with the attach or detach.  Wait-free.
 */
static int lookup_keys(const void *ptr, size_t len, struct ibv_pd *pd, uint64_t *keys, struct ibv_mr **mr)
{
	struct rdmalloc_chunk *c;
	struct rdmalloc_reg *r;
	if (!pd)
		pd = rdmalloc_pd_default(); /* NULL: rdmalloc_lookup says why */
	int err = rdmalloc_lookup(ptr, len, pd, &c, &r);
	if (err)
		return err;
	/* The PD index's use before the keys (chunk.h): if its PD goes
	 * after we read them, the hand-out below sees it. */
	unsigned s = (unsigned)(r - c->reg), use = rdmalloc_pd_slot_peek(s);
	/* Acquires, so that the second read of the sequence sees a change
	 * whose stores any of them saw (region.c: change_begin). */
	unsigned q = atomic_load_explicit(&r->seq, memory_order_acquire);
	struct ibv_pd *owner = atomic_load_explicit(&r->pd, memory_order_acquire);
	*keys = atomic_load_explicit(&r->keys, memory_order_acquire); /* lkey and rkey: one unit */
	*mr = atomic_load_explicit(&r->mr, memory_order_acquire);
	if ((q & 1) || atomic_load_explicit(&r->seq, memory_order_relaxed) != q || owner != pd || !*mr)
		return ENODEV;
	/* Handed out: the PD is no longer evicted under the program. */
	return rdmalloc_pd_slot_hand_out(s, use);
}

/*
 * ENODEV from the lookup: RDMA initialised if it was not (the drop-in's
 * first lookup, init.h), and if [ptr, ptr+len) is in a chunk of an on-demand
 * heap (the drop-in's) that has no registration with attached @pd yet,
 * this is its first use there: register it (demand.c, under the PD lock)
 * and look again.  Otherwise ENODEV stands.  The chunk is found again
 * under the PD lock: a program that frees the block meanwhile (its bug)
 * may have its descriptor released and made another chunk's under a
 * lock-free look, which only the crew's start-up reads.
 */
static __attribute__((noinline)) int first_use(const void *ptr, size_t len, struct ibv_pd *pd, uint64_t *keys,
					       struct ibv_mr **mr)
{
	int saved = errno; /* rdma_malloc_keys() leaves it alone: ibv_reg_mr sets it */
	rdmalloc_init(); /* under the drop-in, the default PD opens on first need */
	if (!pd)
		pd = rdmalloc_pd_default();
	if (!pd || !rdmalloc_pd_attached(pd)) {
		errno = saved;
		return ENODEV;
	}
	struct rdmalloc_chunk *seen = rdmalloc_addrmap_lookup(ptr);
	RDMALLOC_TEST_PAUSE(RDMALLOC_PAUSE_FIRST_USE);
	if (seen)
		rdmalloc_chunk_demand_prepare(seen); /* outside every lock */
	rdmalloc_pd_lock();
	int err = rdmalloc_chunk_demand_at(ptr, pd);
	rdmalloc_pd_unlock();
	rdmalloc_threads_start_wanted(); /* the tick of its decay: outside every lock */
	errno = saved;
	return err ? err : lookup_keys(ptr, len, pd, keys, mr);
}

static inline int find_keys(const void *ptr, size_t len, struct ibv_pd *pd, uint64_t *keys, struct ibv_mr **mr)
{
	int err = lookup_keys(ptr, len, pd, keys, mr);
	return unlikely(err == ENODEV) ? first_use(ptr, len, pd, keys, mr) : err;
}

RDMA_EXPORT struct ibv_mr *rdma_malloc_mr(const void *ptr, size_t len, struct ibv_pd *pd)
{
	uint64_t keys;
	struct ibv_mr *mr;
	int err = find_keys(ptr, len, pd, &keys, &mr);
	rdmalloc_stat_lookup(!err);
	if (err) {
		errno = err;
		return NULL;
	}
	return mr;
}

RDMA_EXPORT int rdma_malloc_keys(const void *ptr, size_t len, struct ibv_pd *pd, uint32_t *lkey,
				 uint32_t *rkey)
{
	uint64_t keys;
	struct ibv_mr *mr;
	int err = find_keys(ptr, len, pd, &keys, &mr);
	rdmalloc_stat_lookup(!err);
	if (err)
		return err;
	if (lkey)
		*lkey = rdmalloc_keys_lkey(keys);
	if (rkey)
		*rkey = rdmalloc_keys_rkey(keys);
	return 0;
}
