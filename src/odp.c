/* SPDX-License-Identifier: MIT */
/*
 * odp.c - on-demand-paging heaps (RDMA_HEAP_ODP, doc/modes.md).
 *
 * An ODP region pins nothing: the NIC asks the kernel for translations on
 * a fault and the kernel invalidates them (MMU notifiers) when pages go.
 * So the reason every other heap refuses jemalloc's purges (pinned pages
 * the NIC keeps using after MADV_DONTNEED) does not hold: ODP heaps purge.
 * Decommit and dalloc stay refused (chunks stay mapped and registered).
 *
 * Implicit ODP heaps share one region per (PD, access) that covers the
 * whole address space; chunk.c asks for it instead of registering each
 * chunk, and gives it back instead of deregistering.  The table below
 * counts its users: chunk x PD slot.  Its lock is a leaf, like the chunk
 * lock: the registration runs outside it (a chunk is created inside
 * jemalloc's extent hook, and libibverbs allocates while registering), so
 * two creators may both register; the loser deregisters its own.
 */
#include "odp.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "keys.h"
#include "log.h"
#include "lock.h"
#include "pd.h"
#include "regtable.h"
#include "stats.h"
#include "verbs.h"

int rdmalloc_odp_check(struct ibv_pd *pd, unsigned int access, int implicit)
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
	if (implicit && !(general & IBV_ODP_SUPPORT_IMPLICIT))
		return EOPNOTSUPP;
	return 0;
}

/* (PD, access) pairs: a few heaps' flags on each attachable PD. */
#define IMPLICIT_MAX (4 * RDMA_MALLOC_MAX_PDS)

static struct implicit {
	struct ibv_pd *pd;
	unsigned access;
	struct ibv_mr *mr; /* NULL: a free entry */
	unsigned long refs;
} implicit[IMPLICIT_MAX];

/* ODP lock held. */
static struct implicit *implicit_find(struct ibv_pd *pd, unsigned access)
{
	for (size_t i = 0; i < IMPLICIT_MAX; i++)
		if (implicit[i].mr && implicit[i].pd == pd && implicit[i].access == access)
			return &implicit[i];
	return NULL;
}

struct ibv_mr *rdmalloc_odp_implicit_get(struct ibv_pd *pd, unsigned int access)
{
	rdmalloc_lock(RDMALLOC_LOCK_ODP);
	struct implicit *e = implicit_find(pd, access);
	if (e) {
		e->refs++;
		struct ibv_mr *mr = e->mr;
		rdmalloc_unlock(RDMALLOC_LOCK_ODP);
		return mr;
	}
	rdmalloc_unlock(RDMALLOC_LOCK_ODP);
	struct ibv_mr *mr = rdmalloc_reg(pd, NULL, SIZE_MAX, access);
	if (!mr)
		return NULL;
	rdmalloc_lock(RDMALLOC_LOCK_ODP);
	struct ibv_mr *use = mr;
	if ((e = implicit_find(pd, access)) != NULL) { /* another creator won */
		e->refs++;
		use = e->mr;
	} else {
		for (size_t i = 0; i < IMPLICIT_MAX && !e; i++)
			if (!implicit[i].mr)
				e = &implicit[i];
		if (e)
			*e = (struct implicit){ pd, access, mr, 1 };
		else
			use = NULL;
	}
	rdmalloc_unlock(RDMALLOC_LOCK_ODP);
	if (use != mr) {
		int err = rdmalloc_dereg(mr);
		if (!use) {
			rdmalloc_log(RDMALLOC_LOG_ERROR, "more than %d implicit ODP regions (PD x access flags)",
				     IMPLICIT_MAX);
			errno = err ? err : ENOSPC;
			return NULL;
		}
	}
	return use;
}

int rdmalloc_odp_implicit_put(struct ibv_mr *mr)
{
	rdmalloc_lock(RDMALLOC_LOCK_ODP);
	struct implicit *e = NULL;
	for (size_t i = 0; i < IMPLICIT_MAX && !e; i++)
		if (implicit[i].mr == mr)
			e = &implicit[i];
	if (!e) {
		rdmalloc_unlock(RDMALLOC_LOCK_ODP);
		rdmalloc_fatal("implicit ODP region %p is not ours", (void *)mr);
	}
	int last = --e->refs == 0;
	if (last)
		*e = (struct implicit){ 0 };
	rdmalloc_unlock(RDMALLOC_LOCK_ODP);
	return last ? rdmalloc_dereg(mr) : 0;
}

void rdmalloc_odp_forget(void)
{
	for (size_t i = 0; i < IMPLICIT_MAX; i++)
		implicit[i] = (struct implicit){ 0 };
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
	int err = rdmalloc_lookup(ptr, len, pd, &c, &r);
	if (!err && !(rdmalloc_heap_flags_of(c->heap) & RDMA_HEAP_ODP))
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
