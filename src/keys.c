/* SPDX-License-Identifier: MIT */
/* keys.c - rdma_malloc_mr() and rdma_malloc_keys(): pointer to keys. */
#include "keys.h"

#include <errno.h>

#include "chunk.h"
#include "pd.h"
#include "regtable.h"
#include "stats.h"

int rdmalloc_lookup(const void *ptr, size_t len, struct ibv_pd *pd, struct rdmalloc_chunk **cp,
		    struct rdmalloc_reg **out)
{
	struct rdmalloc_chunk *c = rdmalloc_table_lookup(ptr);
	if (!c)
		return ENOENT;
	size_t off = (uintptr_t)ptr - c->base;
	if ((len ? len : 1) > c->size - off)
		return ERANGE;
	if (!pd && !(pd = rdmalloc_pd_default()))
		return ENODEV;
#ifdef RDMALLOC_MUTATION_WRONG_KEY /* test-only: a neighbouring chunk's keys */
	if (c->next)
		c = c->next;
#endif
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		if (atomic_load_explicit(&c->reg[s].pd, memory_order_acquire) == pd) {
			*cp = c;
			*out = &c->reg[s];
			return 0;
		}
	}
	return ENODEV;
}

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

RDMA_EXPORT struct ibv_mr *rdma_malloc_mr(const void *ptr, size_t len, struct ibv_pd *pd)
{
	struct rdmalloc_chunk *c;
	struct rdmalloc_reg *r;
	int err = rdmalloc_lookup(ptr, len, pd, &c, &r);
	rdmalloc_stat_lookup(!err);
	if (err) {
		errno = err;
		return NULL;
	}
	return atomic_load_explicit(&r->mr, memory_order_relaxed);
}

RDMA_EXPORT int rdma_malloc_keys(const void *ptr, size_t len, struct ibv_pd *pd, uint32_t *lkey,
				 uint32_t *rkey)
{
	struct rdmalloc_chunk *c;
	struct rdmalloc_reg *r;
	int err = rdmalloc_lookup(ptr, len, pd, &c, &r);
	rdmalloc_stat_lookup(!err);
	if (err)
		return err;
	uint64_t keys = atomic_load_explicit(&r->keys, memory_order_acquire); /* one unit */
	if (lkey)
		*lkey = rdmalloc_keys_lkey(keys);
	if (rkey)
		*rkey = rdmalloc_keys_rkey(keys);
	return 0;
}
