/* SPDX-License-Identifier: MIT */
/* pd.c - the attached protection domains and the default one. */
#include "pd.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "chunk.h"
#include "compiler.h"
#include "init.h"
#include "log.h"
#include "options.h"
#include "stats.h"
#include "verbs.h"

static _Atomic(struct ibv_pd *) slots[RDMA_MALLOC_MAX_PDS];
static _Atomic(struct ibv_pd *) default_pd;
static struct ibv_pd *opened_pd; /* what we opened, attached or not */
static char no_device_why[160];

struct ibv_pd *rdmalloc_pd_slot(unsigned s)
{
	return atomic_load_explicit(&slots[s], memory_order_acquire);
}

struct ibv_pd *rdmalloc_pd_default(void)
{
	return atomic_load_explicit(&default_pd, memory_order_acquire);
}

unsigned rdmalloc_pd_count(void)
{
	unsigned n = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		n += rdmalloc_pd_slot(s) != NULL;
	return n;
}

static int find_slot(struct ibv_pd *pd)
{
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if (rdmalloc_pd_slot(s) == pd)
			return (int)s;
	return -1;
}

/* Chunk lock held. */
static int attach_locked(struct ibv_pd *pd)
{
	if (find_slot(pd) >= 0)
		return EEXIST;
	int s = find_slot(NULL);
	if (s < 0)
		return ENOSPC;
	int err = rdmalloc_chunks_register_slot((unsigned)s, pd);
	if (err)
		return err;
	atomic_store_explicit(&slots[s], pd, memory_order_release);
	return 0;
}

void rdmalloc_pd_init(void)
{
	struct ibv_pd *pd = rdmalloc_open_default_pd(rdmalloc_opts.device, no_device_why,
						     sizeof(no_device_why));
	if (!pd) {
		STAT_INC(fallbacks);
		rdmalloc_log(RDMALLOC_LOG_WARN, "%s: memory is allocated but not registered "
			     "(key lookups fail with ENODEV)", no_device_why);
		return;
	}
	opened_pd = pd;
	rdmalloc_chunk_lock();
	/* No chunk exists yet, so this cannot fail. */
	int err = attach_locked(pd);
	if (!err)
		atomic_store_explicit(&default_pd, pd, memory_order_release);
	rdmalloc_chunk_unlock();
	if (err)
		rdmalloc_fatal("attaching the default PD failed: %s", strerror(err));
}

RDMA_EXPORT struct ibv_pd *rdma_malloc_default_pd(void)
{
	rdmalloc_init();
	struct ibv_pd *pd = rdmalloc_pd_default();
	if (!pd)
		errno = ENODEV;
	return pd;
}

RDMA_EXPORT int rdma_malloc_attach_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	rdmalloc_init();
	rdmalloc_chunk_lock();
	int err = attach_locked(pd);
	if (!err && pd == opened_pd)
		atomic_store_explicit(&default_pd, pd, memory_order_release);
	rdmalloc_chunk_unlock();
	return err;
}

RDMA_EXPORT int rdma_malloc_detach_pd(struct ibv_pd *pd)
{
	if (!pd)
		return ENODEV;
	rdmalloc_init();
	rdmalloc_chunk_lock();
	int s = find_slot(pd);
	int err = ENODEV;
	if (s >= 0) {
		if (pd == rdmalloc_pd_default())
			atomic_store_explicit(&default_pd, NULL, memory_order_release);
		atomic_store_explicit(&slots[s], NULL, memory_order_release);
		err = rdmalloc_chunks_deregister_slot((unsigned)s);
	}
	rdmalloc_chunk_unlock();
	return err;
}
