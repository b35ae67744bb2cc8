/* SPDX-License-Identifier: MIT */
/*
 * odp.c - on-demand-paging heaps (RDMA_HEAP_ODP, doc/modes.md).
 *
 * An ODP region pins nothing: the NIC asks the kernel for translations on
 * a fault and the kernel invalidates them (MMU notifiers) when pages go.
 * So the reason every other heap refuses jemalloc's purges (pinned pages
 * the NIC keeps using after MADV_DONTNEED) does not hold: ODP heaps purge.
 * Decommit and dalloc stay refused (chunks stay mapped and registered).
 */
#include "odp.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "regtable.h"
#include "stats.h"
#include "verbs.h"

int rdmalloc_odp_check(struct ibv_pd *pd, unsigned int access)
{
	if (!pd)
		return 0;
	uint32_t general = 0, rc = 0;
	int err = rdmalloc_query_odp(pd, &general, &rc);
	if (err)
		return err == ENOSYS ? EOPNOTSUPP : err;
	uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
	if (access & IBV_ACCESS_REMOTE_WRITE)
		need |= IBV_ODP_SUPPORT_WRITE;
	if (access & IBV_ACCESS_REMOTE_READ)
		need |= IBV_ODP_SUPPORT_READ;
	if (access & IBV_ACCESS_REMOTE_ATOMIC)
		need |= IBV_ODP_SUPPORT_ATOMIC;
	if (!(general & IBV_ODP_SUPPORT) || (rc & need) != need)
		return EOPNOTSUPP;
	return 0;
}

bool rdmalloc_odp_purge(extent_hooks_t *self, void *addr, size_t size, size_t offset, size_t length,
			unsigned arena_ind)
{
	(void)self, (void)size, (void)arena_ind;
	if (madvise((char *)addr + offset, length, MADV_DONTNEED) != 0)
		return true;
	STAT_INC(odp_purges);
	return false;
}

RDMA_EXPORT int rdma_malloc_prefetch(const void *ptr, size_t len, struct ibv_pd *pd, int write)
{
	rdmalloc_init();
	struct ibv_mr *mr = rdma_malloc_mr(ptr, len, pd);
	if (!mr)
		return errno;
	struct rdmalloc_chunk *c = rdmalloc_table_lookup(ptr);
	if (!c || !(rdmalloc_heap_flags_of(c->heap) & RDMA_HEAP_ODP))
		return EINVAL;
	return rdmalloc_advise_mr(mr->pd, write ? IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE : IBV_ADVISE_MR_ADVICE_PREFETCH,
				  IBV_ADVISE_MR_FLAG_FLUSH, (void *)ptr, len ? len : 1, mr->lkey);
}
