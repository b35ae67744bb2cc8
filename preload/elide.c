/* SPDX-License-Identifier: MIT */
/*
 * elide.c - registration elision: the program's own ibv_reg_mr of memory
 * that already lies in one of rdmalloc's registered chunks.
 *
 * When the range is inside one chunk, the PD is attached (or can be attached
 * now: every chunk is then registered with it too), and the chunk's access
 * flags cover the requested ones (optional flags such as relaxed ordering
 * are hints and ignored), the program gets a struct ibv_mr of its own whose
 * keys are the chunk's: no kernel call.  ibv_dereg_mr of such a region just
 * frees it.  Everything else goes to libibverbs unchanged.  The keys of an
 * elided region grant what the chunk's registration grants: the whole chunk
 * (doc/preload.md).
 */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "heap.h"
#include "lock.h"
#include "log.h"
#include "pd.h"
#include "preload.h"
#include "rdma_malloc.h"
#include "addrmap.h"
#include "counters.h"
#include "verbs.h"

/* verbs.h wraps these two in macros; here we define the functions. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

struct elided {
	struct ibv_mr mr; /* first: the program holds &e->mr */
	struct rdmalloc_chunk *chunk; /* pinned until ibv_dereg_mr: never given back under it */
	struct elided *next;
};

static struct elided *elided_list;
/* PDs of the program that elision attached: they are detached again when
 * the program deallocates them, or ibv_dealloc_pd would find them busy. */
static struct ibv_pd *attached_by_us[RDMA_MALLOC_MAX_PDS];

typedef struct ibv_mr *(*reg_fn)(struct ibv_pd *, void *, size_t, int);
typedef struct ibv_mr *(*reg_iova_fn)(struct ibv_pd *, void *, size_t, uint64_t, int);
typedef struct ibv_mr *(*reg_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
typedef int (*dereg_fn)(struct ibv_mr *);

/* libibverbs' own definitions, by the versions a program links against. */
static void *real(const char *name, const char *version)
{
	void *f = dlvsym(RTLD_NEXT, name, version);
	if (!f)
		rdmalloc_fatal("cannot find libibverbs' %s@%s: %s", name, version, dlerror());
	return f;
}

#define OPTIONAL_ACCESS ((unsigned int)IBV_ACCESS_OPTIONAL_RANGE)

/* A copy of chunk @c's region with @pd, if it was registered with every
 * flag of @access: 0, EACCES or ENODEV (@pd not attached).  Checked and
 * copied under the PD lock, which every access change, replacement and
 * deregistration of a published region holds.  @c is pinned by the
 * caller: it stays registered (preload chunks are never destroyed, and a
 * pinned one is never given back). */
static int copy_chunk_mr(struct rdmalloc_chunk *c, struct ibv_pd *pd, unsigned int access, struct ibv_mr *out)
{
	int err = ENODEV;
	rdmalloc_pd_lock();
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		struct rdmalloc_reg *r = &c->reg[s];
		if (atomic_load_explicit(&r->pd, memory_order_acquire) != pd)
			continue;
		err = (access & ~OPTIONAL_ACCESS & ~r->access) ? EACCES : 0;
		if (!err)
			*out = *atomic_load_explicit(&r->mr, memory_order_relaxed);
		break;
	}
	rdmalloc_pd_unlock();
	return err;
}

/* Elision attached @pd: ibv_dealloc_pd detaches it. */
static void remember_attached(struct ibv_pd *pd)
{
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	for (int i = 0; i < RDMA_MALLOC_MAX_PDS; i++)
		if (!attached_by_us[i]) {
			attached_by_us[i] = pd;
			break;
		}
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
}

/* The elided region for [addr, addr+len), or NULL when not eligible. */
static struct ibv_mr *elide(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	if (rdmalloc_tl_in_verbs || !rdmalloc_preload_heap() || !pd || !len)
		return NULL;
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(addr);
	if (!c || len > c->size - ((uintptr_t)addr - c->base))
		return NULL;
	if ((access & ~OPTIONAL_ACCESS) & ~rdmalloc_heap_access_of(c->heap))
		return NULL; /* early: copy_chunk_mr decides */
	struct elided *e = calloc(1, sizeof(*e)); /* before any lock: it may enter a hook */
	if (!e)
		return NULL;
	if (rdmalloc_chunk_pin(c)) { /* given back meanwhile: the program registers freed memory */
		free(e);
		return NULL;
	}
	e->chunk = c;
	int err = copy_chunk_mr(c, pd, access, &e->mr);
	if (err == ENODEV) {
		err = rdmalloc_pd_attach(pd); /* first sight of this PD */
		if (!err) {
			remember_attached(pd);
		}
		if (err && err != EEXIST) {
			rdmalloc_log_once(RDMALLOC_LOG_INFO, "cannot attach the program's PD (%s): its "
					  "registrations go to libibverbs", strerror(err));
		} else {
			err = copy_chunk_mr(c, pd, access, &e->mr); /* attach registered every chunk */
		}
	}
	if (err) {
		rdmalloc_chunk_unpin(c);
		free(e);
		return NULL;
	}
	e->mr.addr = addr;
	e->mr.length = len;
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	e->next = elided_list;
	elided_list = e;
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	STAT_INC(elided_registrations);
	return &e->mr;
}

static struct ibv_mr *passed(struct ibv_mr *mr)
{
	if (!rdmalloc_tl_in_verbs)
		STAT_INC(passthrough_registrations);
	return mr;
}

PRELOAD_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr *mr = elide(pd, addr, length, (unsigned int)access);
	if (mr)
		return mr;
	static reg_fn next;
	if (!next)
		next = (reg_fn)real("ibv_reg_mr", "IBVERBS_1.1");
	return passed(next(pd, addr, length, access));
}

PRELOAD_API struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					   int access)
{
	struct ibv_mr *mr = iova == (uintptr_t)addr ? elide(pd, addr, length, (unsigned int)access) : NULL;
	if (mr)
		return mr;
	static reg_iova_fn next;
	if (!next)
		next = (reg_iova_fn)real("ibv_reg_mr_iova", "IBVERBS_1.7");
	return passed(next(pd, addr, length, iova, access));
}

PRELOAD_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					    unsigned int access)
{
	struct ibv_mr *mr = iova == (uintptr_t)addr ? elide(pd, addr, length, access) : NULL;
	if (mr)
		return mr;
	static reg_iova2_fn next;
	if (!next)
		next = (reg_iova2_fn)real("ibv_reg_mr_iova2", "IBVERBS_1.8");
	return passed(next(pd, addr, length, iova, access));
}

PRELOAD_API int ibv_dereg_mr(struct ibv_mr *mr)
{
	if (!rdmalloc_tl_in_verbs) {
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		struct elided **pp = &elided_list;
		while (*pp && &(*pp)->mr != mr)
			pp = &(*pp)->next;
		struct elided *e = *pp;
		if (e)
			*pp = e->next;
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
		if (e) {
			rdmalloc_chunk_unpin(e->chunk); /* its chunk may be given back now */
			free(e);
			return 0;
		}
	}
	static dereg_fn next;
	if (!next)
		next = (dereg_fn)real("ibv_dereg_mr", "IBVERBS_1.1");
	return next(mr);
}

typedef int (*dealloc_pd_fn)(struct ibv_pd *);

/* The program deallocates a PD: if elision attached it, detach it first
 * (its chunk registrations would keep it busy); while elided regions of it
 * are alive, refuse as libibverbs would with live regions. */
PRELOAD_API int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int ours = -1;
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	for (int i = 0; i < RDMA_MALLOC_MAX_PDS; i++)
		if (pd && attached_by_us[i] == pd)
			ours = i;
	int busy = 0;
	for (struct elided *e = elided_list; e && ours >= 0; e = e->next)
		busy |= e->mr.pd == pd;
	if (ours >= 0 && !busy)
		attached_by_us[ours] = NULL;
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	if (busy)
		return EBUSY;
	if (ours >= 0) {
		int err = rdmalloc_pd_detach(pd);
		if (err == EBUSY) { /* a window on it: still attached, and still ours */
			remember_attached(pd);
			return EBUSY;
		}
		if (err)
			rdmalloc_log(RDMALLOC_LOG_ERROR, "detaching the program's PD before ibv_dealloc_pd: %s",
				     strerror(err));
	}
	static dealloc_pd_fn next;
	if (!next)
		next = (dealloc_pd_fn)real("ibv_dealloc_pd", "IBVERBS_1.1");
	return next(pd);
}
