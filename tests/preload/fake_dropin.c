/* SPDX-License-Identifier: MIT */
/*
 * fake_dropin.c - the drop-in over the fake backend (tests/unit/fake_verbs.c):
 * installed before the drop-in's constructor (priority 101) initialises the
 * library, so that a host without a device registers, and allocates inside
 * registration as libibverbs does (more, so that the allocator must often
 * grow while a hook runs).  For the fork tests (issue 10, item 1).
 *
 * What elide.c hands on to libibverbs (the program's registrations it does
 * not elide, deregistrations, re-registrations, PD deallocations) goes to
 * stand-ins here, not to libibverbs, which would follow the test's fake
 * PDs into a device context that does not exist (issue 13, item 3).  They
 * act as the kernel would: a region is registered with new keys and a
 * handle; an unknown one is refused (ENOENT, as the kernel refuses a
 * handle it never issued); a PD with live regions (the program's or a
 * chunk's) is busy.  The test program reads what they saw through
 * fake_dropin_* (exported: this library has no version script).
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdlib.h>

#include "fake_dropin.h"
#include "fake_verbs.h"
#include "preload.h"

#define PASSED_MAX 1024

static pthread_mutex_t passed_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_mr *passed[PASSED_MAX];
static uint32_t passed_keys = FAKE_DROPIN_KEY_BASE;
static unsigned long deallocs, dealloc_calls;

static struct ibv_mr *passed_reg_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	(void)iova, (void)access;
	if (pd->handle == FAKE_DROPIN_PD_REFUSES) {
		errno = EPERM;
		return NULL;
	}
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	pthread_mutex_lock(&passed_mu);
	int i = 0;
	while (i < PASSED_MAX && passed[i])
		i++;
	if (i == PASSED_MAX) {
		pthread_mutex_unlock(&passed_mu);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	uint32_t lkey = passed_keys++, rkey = passed_keys++;
	*mr = (struct ibv_mr){ .pd = pd, .addr = addr, .length = length, .handle = (uint32_t)i,
			       .lkey = lkey, .rkey = rkey };
	passed[i] = mr;
	pthread_mutex_unlock(&passed_mu);
	return mr;
}

/* libibverbs' ibv_reg_mr and ibv_reg_mr_iova call its exported
 * ibv_reg_mr_iova2, which the drop-in's wrapper preempts: so do these. */
static struct ibv_mr *passed_reg(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

static struct ibv_mr *passed_reg_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

/* The index of @mr among the stand-ins' regions, by its handle, as the
 * kernel finds it; -1 when it has no such region.  passed_mu held. */
static int passed_index(const struct ibv_mr *mr)
{
	return mr && mr->handle < PASSED_MAX && passed[mr->handle] == mr ? (int)mr->handle : -1;
}

static int passed_dereg(struct ibv_mr *mr)
{
	pthread_mutex_lock(&passed_mu);
	int i = passed_index(mr);
	if (i >= 0)
		passed[i] = NULL;
	pthread_mutex_unlock(&passed_mu);
	if (i < 0)
		return ENOENT;
	free(mr);
	return 0;
}

static int passed_rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)access;
	pthread_mutex_lock(&passed_mu);
	int i = passed_index(mr);
	if (i >= 0) {
		if (flags & IBV_REREG_MR_CHANGE_PD)
			mr->pd = pd;
		if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
			mr->addr = addr;
			mr->length = length;
		}
		mr->lkey = passed_keys++;
		mr->rkey = passed_keys++;
	}
	pthread_mutex_unlock(&passed_mu);
	if (i < 0) {
		errno = ENOENT;
		return IBV_REREG_MR_ERR_CMD;
	}
	return 0;
}

/* Busy while a region of the stand-ins or of the fake backend (a chunk's)
 * is registered with it; else the PD is marked deallocated. */
static int passed_dealloc_pd(struct ibv_pd *pd)
{
	static struct fake_mr_info snap[FAKE_MAX_MRS];
	pthread_mutex_lock(&passed_mu);
	dealloc_calls++;
	int busy = 0;
	for (int i = 0; i < PASSED_MAX; i++)
		busy |= passed[i] && passed[i]->pd == pd;
	size_t n = fake_snapshot(snap, FAKE_MAX_MRS);
	for (size_t i = 0; i < n; i++)
		busy |= snap[i].pd == pd;
	if (!busy) {
		pd->handle = FAKE_DROPIN_PD_DEALLOCATED;
		deallocs++;
	}
	pthread_mutex_unlock(&passed_mu);
	return busy ? EBUSY : 0;
}

size_t fake_dropin_passed_live(void)
{
	size_t n = 0;
	pthread_mutex_lock(&passed_mu);
	for (int i = 0; i < PASSED_MAX; i++)
		n += passed[i] != NULL;
	pthread_mutex_unlock(&passed_mu);
	return n;
}

unsigned long fake_dropin_dealloc_calls(void)
{
	pthread_mutex_lock(&passed_mu);
	unsigned long n = dealloc_calls;
	pthread_mutex_unlock(&passed_mu);
	return n;
}

unsigned long fake_dropin_deallocs(void)
{
	pthread_mutex_lock(&passed_mu);
	unsigned long n = deallocs;
	pthread_mutex_unlock(&passed_mu);
	return n;
}

/* 100 is below every priority a program may use, and above none we need. */
#ifndef __clang__ /* gcc's warning */
#pragma GCC diagnostic ignored "-Wprio-ctor-dtor"
#endif
__attribute__((constructor(100))) static void fake_dropin_init(void)
{
	fake_verbs_install(1);
	fake_reg_mallocs((size_t)4 << 20);
	static const struct rdmalloc_elide_next next = {
		.reg_mr = passed_reg,
		.reg_mr_iova = passed_reg_iova,
		.reg_mr_iova2 = passed_reg_iova2,
		.dereg_mr = passed_dereg,
		.rereg_mr = passed_rereg,
		.dealloc_pd = passed_dealloc_pd,
	};
	rdmalloc_elide_set_next(&next);
}
