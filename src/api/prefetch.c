/* SPDX-License-Identifier: MIT */
/* prefetch.c - rdma_malloc_prefetch(): fault an ODP heap's pages in for the
 * NIC ahead of use (doc/modes.md). */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>

#include "chunk.h"
#include "init.h"
#include "lookup.h"
#include "pd.h"
#include "rdma_malloc.h"
#include "verbs.h"

/* One advice per gigabyte: an ibv_sge carries 32 bits of length. */
#define PREFETCH_PIECE ((size_t)1 << 30)

RDMA_EXPORT int rdma_malloc_prefetch(const void *ptr, size_t len, struct ibv_pd *pd, int write)
{
	rdmalloc_init();
	struct rdmalloc_chunk *c;
	struct rdmalloc_reg *r;
	/* The PD lock keeps the region and its PD from being replaced or
	 * detached between the lookup and the advice. */
	rdmalloc_pd_lock();
	int err = rdmalloc_lookup(ptr, len, pd ? pd : rdmalloc_pd_default(), &c, &r);
	const struct rdmalloc_chunk_spec *spec = err ? NULL : rdmalloc_chunk_spec_seen(c);
	if (!err && (!spec || !rdmalloc_spec_odp(spec)))
		err = EINVAL;
	if (!err) {
		struct ibv_pd *rpd = atomic_load_explicit(&r->pd, memory_order_relaxed);
		uint32_t lkey = rdmalloc_keys_lkey(atomic_load_explicit(&r->keys, memory_order_relaxed));
		int advice = write ? IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE : IBV_ADVISE_MR_ADVICE_PREFETCH;
		const char *p = ptr;
		for (size_t left = len ? len : 1; left && !err;) {
			size_t n = left < PREFETCH_PIECE ? left : PREFETCH_PIECE;
			err = rdmalloc_advise_mr(rpd, advice, IBV_ADVISE_MR_FLAG_FLUSH, (void *)p, n, lkey);
			p += n;
			left -= n;
		}
	}
	rdmalloc_pd_unlock();
	return err;
}
