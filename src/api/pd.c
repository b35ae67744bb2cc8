/* SPDX-License-Identifier: MIT */
/* pd.c - the default protection domain, and attach/detach of PDs. */
#include "pd.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "chunk.h"
#include "mw.h"
#include "compiler.h"
#include "init.h"
#include "job.h"
#include "log.h"
#include "lock.h"
#include "options.h"
#include "counters.h"
#include "verbs.h"

static _Atomic(struct ibv_pd *) default_pd;
static struct rdmalloc_pd_hooks hooks; /* set once, before any elided region exists */
static struct ibv_pd *opened_pd; /* what we opened, attached or not */
static char no_device_why[160];

void rdmalloc_pd_lock(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_PD);
}

void rdmalloc_pd_unlock(void)
{
	rdmalloc_unlock(RDMALLOC_LOCK_PD);
}

struct ibv_pd *rdmalloc_pd_default(void)
{
	return atomic_load_explicit(&default_pd, memory_order_acquire);
}

unsigned rdmalloc_pd_count(void)
{
	unsigned n = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		n += rdmalloc_pd_at(s) != NULL;
	return n;
}

int rdmalloc_pd_attached(const struct ibv_pd *pd)
{
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if (rdmalloc_pd_at(s) == pd)
			return 1;
	return 0;
}

int rdmalloc_pd_odp_supported(unsigned access, int implicit)
{
	int err = 0;
	rdmalloc_pd_lock();
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS && !err; s++) {
		struct ibv_pd *pd = rdmalloc_pd_at(s);
		if (pd)
			err = rdmalloc_odp_supported(pd, access, implicit);
	}
	rdmalloc_pd_unlock();
	return err;
}

void rdmalloc_pd_forget(void)
{
	atomic_store_explicit(&default_pd, NULL, memory_order_relaxed);
	opened_pd = NULL;
}

void rdmalloc_pd_init(void)
{
	struct ibv_pd *pd = rdmalloc_open_default_pd(rdmalloc_opts.device, no_device_why,
						     sizeof(no_device_why));
	if (!pd) {
		STAT_INC(fallbacks);
		/* Once per job: every process of a shell script or an MPI
		 * rank under the drop-in would say it (doc/preload.md). */
		rdmalloc_log_job_once("no-device", "%s: memory is allocated but not registered "
				      "(key lookups fail with ENODEV)", no_device_why);
		return;
	}
	opened_pd = pd;
	rdmalloc_pd_lock();
	int err = rdmalloc_chunks_attach(pd); /* no chunk exists yet */
	if (!err)
		atomic_store_explicit(&default_pd, pd, memory_order_release);
	rdmalloc_pd_unlock();
	if (err)
		rdmalloc_fatal("attaching the default PD failed: %s", rdmalloc_strerror(err));
}

RDMA_EXPORT struct ibv_pd *rdma_malloc_default_pd(void)
{
	rdmalloc_init();
	struct ibv_pd *pd = rdmalloc_pd_default();
	if (!pd)
		errno = ENODEV;
	return pd;
}

void rdmalloc_pd_fork_child_hook(void)
{
	if (hooks.fork_child)
		hooks.fork_child();
}

void rdmalloc_pd_set_hooks(const struct rdmalloc_pd_hooks *h)
{
	rdmalloc_pd_lock();
	hooks = *h;
	rdmalloc_pd_unlock();
}

RDMA_EXPORT int rdma_malloc_attach_pd(struct ibv_pd *pd)
{
	if (!pd)
		return EINVAL;
	rdmalloc_init();
	rdmalloc_pd_lock();
	int err = rdmalloc_pd_attach_locked(pd);
	if ((!err || err == EEXIST) && hooks.adopted)
		hooks.adopted(pd);
	rdmalloc_pd_unlock();
	return err;
}

int rdmalloc_pd_attach_locked(struct ibv_pd *pd)
{
	int err = rdmalloc_chunks_attach(pd);
	if (!err && pd == opened_pd)
		atomic_store_explicit(&default_pd, pd, memory_order_release);
	return err;
}

RDMA_EXPORT int rdma_malloc_detach_pd(struct ibv_pd *pd)
{
	if (!pd)
		return ENODEV;
	rdmalloc_init();
	rdmalloc_pd_lock();
	int err = hooks.detach_busy ? hooks.detach_busy(pd) : 0;
	if (!err)
		err = rdmalloc_pd_detach_locked(pd);
	rdmalloc_pd_unlock();
	return err;
}

static int detach_locked(struct ibv_pd *pd, int unused_only)
{
	int err = unused_only ? rdmalloc_chunks_detach_unused(pd) : rdmalloc_chunks_detach(pd);
	/* Only a detach that took the PD's index takes the default away: a
	 * failed deregistration detaches all the same, EBUSY does not. */
	int still = 0;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++)
		still |= rdmalloc_pd_at(i) == pd;
	if (!still && pd == rdmalloc_pd_default())
		atomic_store_explicit(&default_pd, NULL, memory_order_release);
	return err;
}

int rdmalloc_pd_detach_locked(struct ibv_pd *pd)
{
	return detach_locked(pd, 0);
}

int rdmalloc_pd_detach_unused_locked(struct ibv_pd *pd)
{
	return detach_locked(pd, 1);
}

void rdmalloc_pd_forget_hand_outs_locked(struct ibv_pd *pd)
{
	rdmalloc_chunks_forget_hand_outs(pd);
}
