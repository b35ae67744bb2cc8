/* SPDX-License-Identifier: MIT */
/*
 * implicit.c - the regions of implicit ODP heaps (RDMA_HEAP_ODP_IMPLICIT,
 * doc/modes.md).
 *
 * Implicit ODP heaps share one region per (PD, access) that covers the
 * whole address space; chunk.c asks for it instead of registering each
 * chunk, and gives it back instead of deregistering.  The table below
 * counts its users: chunk x PD (a registration).  Its lock is a leaf, like the chunk
 * lock: the registration runs outside it (a chunk is created inside
 * jemalloc's extent hook, and libibverbs allocates while registering), so
 * two creators may both register; the loser deregisters its own.
 */
#include "implicit.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "lock.h"
#include "log.h"
#include "rdma_malloc.h"
#include "verbs.h"

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

struct ibv_mr *rdmalloc_implicit_get(struct ibv_pd *pd, unsigned int access)
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
	struct ibv_mr *mr = rdmalloc_reg_mr(pd, NULL, SIZE_MAX, access);
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
	if (use != mr) { /* ours is spare */
		int err = rdmalloc_dereg_mr(mr);
		if (err)
			rdmalloc_log(RDMALLOC_LOG_ERROR, "ibv_dereg_mr of a spare implicit ODP region: %s",
				     rdmalloc_strerror(err));
		if (!use) {
			rdmalloc_log(RDMALLOC_LOG_ERROR, "more than %d implicit ODP regions (PD x access flags)",
				     IMPLICIT_MAX);
			errno = ENOMEM; /* (ENOSPC is attach's: too many PDs) */
			return NULL;
		}
	}
	return use;
}

int rdmalloc_implicit_put(struct ibv_mr *mr)
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
	return last ? rdmalloc_dereg_mr(mr) : 0;
}

void rdmalloc_implicit_forget(void)
{
	for (size_t i = 0; i < IMPLICIT_MAX; i++)
		implicit[i] = (struct implicit){ 0 };
}
