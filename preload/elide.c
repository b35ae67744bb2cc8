/* SPDX-License-Identifier: MIT */
/*
 * elide.c - registration elision: the program's own ibv_reg_mr of memory
 * that already lies in one of rdmalloc's registered chunks.
 *
 * When the range is inside one chunk, the PD is attached (or can be attached
 * now: every chunk is then registered with it too), and the chunk's access
 * flags cover the requested ones (optional flags such as relaxed ordering
 * are hints and ignored), the program gets a struct ibv_mr of its own whose
 * keys are the chunk's: no kernel call.  Everything else goes to libibverbs
 * unchanged.  The keys of an elided region grant what the chunk's
 * registration grants: the whole chunk (doc/preload.md).
 *
 * At the scale of an engine (issue 13, item 3):
 *  - Records come from a pool of our own (address space reserved at the
 *    first elision, records handed out from a free list, never from
 *    malloc, which could enter a hook): ibv_dereg_mr and ibv_rereg_mr know
 *    an mr is ours by its address, and every operation on one is O(1).
 *    When the pool is exhausted, registrations go to libibverbs (logged
 *    once, counted in elision_pool_full).
 *  - A record's handle is one the kernel never issued, so a verbs call we
 *    do not wrap fails instead of acting on the chunk's registration; we
 *    wrap ibv_rereg_mr: in place while the new region is still elidable,
 *    else the record gets a registration of its own.
 *  - Each PD that elided regions use has an entry with their count.  A PD
 *    that elision attached is detached when the program deallocates it
 *    (EBUSY while regions of it are alive, then detached with the last of
 *    them), and when a PD slot is needed and it has no region left (the
 *    least recently used first): leaked PDs never block elision.
 * ibv_advise_mr takes lkeys in SGEs, not regions: with an elided region's
 * lkey it advises on the chunk's registration, for a range inside it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "lock.h"
#include "log.h"
#include "os.h"
#include "pd.h"
#include "preload.h"
#include "reserve.h"
#include "rdma_malloc.h"
#include "addrmap.h"
#include "counters.h"
#include "verbs.h"

/* verbs.h wraps these two in macros; here we define the functions. */
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* How many elided regions may be alive at once (the pool's records).
 * The fake drop-in of the tests builds with fewer, to exhaust it. */
#ifndef RDMALLOC_ELIDED_MAX
#define RDMALLOC_ELIDED_MAX ((size_t)1 << 20)
#endif

/* The handle of every record: the kernel allocates object handles from 0
 * up (the lowest free one), so it never issued this one and rejects it. */
#define ELIDED_HANDLE UINT32_MAX

/* RECORD_ORPHAN: an elided region a fork child inherited; its keys were
 * the parent's registration's, so the child's copy has none (0): its
 * deregistration frees it, a re-registration elides it anew. */
enum record_state { RECORD_FREE = 0, RECORD_ELIDED, RECORD_BACKED, RECORD_ORPHAN };

struct elided {
	struct ibv_mr mr; /* first: the program holds &e->mr */
	/* Then what libibverbs' struct verbs_mr (its driver.h, not installed)
	 * has after the ibv_mr, and reads from any region it is given: the
	 * type (IBV_MR_TYPE_MR, a plain region, is 0), the access flags. */
	int mr_type;
	int access;
	struct rdmalloc_chunk *chunk; /* RECORD_ELIDED, _ORPHAN: pinned, never given back under it */
	struct ibv_mr *backing;       /* RECORD_BACKED: the registration of its own */
	struct elided *next_free;
	unsigned entry; /* RECORD_ELIDED: its PD's entry */
	unsigned state; /* enum record_state (ELIDED lock) */
};

/*
 * The pool: RDMALLOC_ELIDED_MAX records of address space (MAP_NORESERVE),
 * reserved at the first elision; pages are touched as records are first
 * handed out.  Under the ELIDED lock: the free list, the high-water mark.
 */
static _Atomic(struct elided *) pool;
static struct elided *pool_free;
static size_t pool_top;

/*
 * The PDs of elided regions (ELIDED lock; entries are created only under
 * the PD lock too, so a PD-lock holder sees no new one appear).  Twice the
 * PD slots: a PD the program detached itself may still have regions.
 */
#define ENTRIES (2 * RDMA_MALLOC_MAX_PDS)
struct pd_entry {
	struct ibv_pd *pd;  /* NULL: a free entry */
	unsigned long live; /* elided regions with it */
	unsigned long used; /* tick of its last elision: the least recently used goes first */
	int ours;           /* elision attached it: detached again by us */
	int doomed;         /* ibv_dealloc_pd found it busy: detach it with its last region */
};
static struct pd_entry entries[ENTRIES];
static unsigned long tick;

/* ---- what the wrappers hand on to ---- */

static struct rdmalloc_elide_next next_fn; /* resolved on first use, or installed */

void rdmalloc_elide_set_next(const struct rdmalloc_elide_next *next)
{
	next_fn = *next;
}

/* libibverbs' own definitions, by the versions a program links against. */
/*
 * libibverbs' own @name: in libibverbs wherever it was loaded, since a
 * program reaches these wrappers only with libibverbs loaded, but not
 * always in the global scope: UCX's and libfabric's providers load it
 * with the plugin that uses it (RTLD_LOCAL), and the drop-in no longer
 * brings it along (it loads it on first need).  RTLD_NEXT finds only what
 * the global scope holds after us.
 */
static void *real(const char *name, const char *version)
{
	void *f = rdmalloc_verbs_real(name, version);
	if (!f)
		f = dlvsym(RTLD_NEXT, name, version);
	if (!f)
		rdmalloc_fatal("cannot find libibverbs' %s@%s: %s", name, version, dlerror());
	return f;
}

#define NEXT(field, version)                                                                 \
	({                                                                                   \
		__typeof__(next_fn.field) f_ = __atomic_load_n(&next_fn.field, __ATOMIC_ACQUIRE); \
		if (!f_) {                                                                   \
			f_ = (__typeof__(f_))real("ibv_" #field, version);                    \
			__atomic_store_n(&next_fn.field, f_, __ATOMIC_RELEASE);              \
		}                                                                            \
		f_;                                                                          \
	})

/* ---- records ---- */

static int pd_detach_busy(struct ibv_pd *pd);
static void pd_adopted(struct ibv_pd *pd);
static void fork_child(void);

/* What knows of elided regions, installed before any thread can make one:
 * the PD hooks (a detach sees them, and the library's fork child handler
 * calls fork_child right after it forgot the parent's pins: no other
 * handler, which could deregister an elided region or free a big block,
 * runs while they are not counted). */
static void install_hooks(void)
{
	static const struct rdmalloc_pd_hooks pd_hooks = { pd_detach_busy, pd_adopted, fork_child };
	rdmalloc_pd_set_hooks(&pd_hooks);
}

static struct elided *pool_base(void)
{
	struct elided *p = atomic_load_explicit(&pool, memory_order_acquire);
	if (p)
		return p;
	/* Every thread that may publish or use the pool waits for the hooks
	 * here: the one that loses the race below as well. */
	static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
	pthread_once(&hooks_once, install_hooks);
	p = rdmalloc_os_reserve(RDMALLOC_ELIDED_MAX * sizeof(*p));
	if (!p)
		return NULL;
	struct elided *none = NULL;
	if (!atomic_compare_exchange_strong_explicit(&pool, &none, p, memory_order_acq_rel,
						     memory_order_acquire)) {
		rdmalloc_os_unmap(p, RDMALLOC_ELIDED_MAX * sizeof(*p));
		return none;
	}
	return p;
}

/* The record @mr is, or NULL when it is not one of the pool's: O(1). */
static struct elided *record_of(const struct ibv_mr *mr)
{
	struct elided *base = atomic_load_explicit(&pool, memory_order_acquire);
	if (!base || (uintptr_t)mr < (uintptr_t)base)
		return NULL;
	uintptr_t off = (uintptr_t)mr - (uintptr_t)base;
	if (off >= RDMALLOC_ELIDED_MAX * sizeof(*base) || off % sizeof(*base))
		return NULL;
	return base + off / sizeof(*base);
}

/* A free record (state still RECORD_FREE), or NULL: logged once, counted. */
static struct elided *record_take(void)
{
	struct elided *base = pool_base(), *e = NULL;
	if (base) {
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		e = pool_free;
		if (e)
			pool_free = e->next_free;
		else if (pool_top < RDMALLOC_ELIDED_MAX)
			e = &base[pool_top++];
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	}
	if (!e) {
		STAT_INC(elision_pool_full);
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "%zu elided regions alive%s: further registrations go "
				  "to libibverbs (counted in elision_pool_full)", (size_t)RDMALLOC_ELIDED_MAX,
				  base ? "" : " (no address space for them)");
	}
	return e;
}

/* ELIDED lock held. */
static void record_put(struct elided *e)
{
	e->state = RECORD_FREE;
	e->chunk = NULL;
	e->backing = NULL;
	e->next_free = pool_free;
	pool_free = e;
}

static void record_release(struct elided *e)
{
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	record_put(e);
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
}

/*
 * In a fork child (one thread; no lock taken): the parent's registrations
 * are not the child's (it forgot them, src/api/fork.c), so neither are its
 * elided regions' keys nor its PD entries.  Each elided region becomes an
 * orphan with no keys, and no PD is elision's: the child's lookups,
 * attaches and ibv_dealloc_pd see only what the child does.  Its chunks
 * start with no pin: each orphan pins its chunk again.
 */
static void fork_child(void)
{
	struct elided *base = atomic_load_explicit(&pool, memory_order_relaxed);
	uint64_t orphans = 0;
	for (size_t k = 0; base && k < pool_top; k++) {
		if (base[k].state == RECORD_ELIDED) {
			base[k].state = RECORD_ORPHAN;
			base[k].mr.lkey = base[k].mr.rkey = 0;
			orphans++;
		}
		if (base[k].state == RECORD_ORPHAN) /* its deregistration unpins */
			rdmalloc_chunk_pin_fork_child(base[k].chunk);
	}
	memset(entries, 0, sizeof(entries));
	STAT_SUB(elided_regions, orphans);
}

/* ---- PD entries (ELIDED lock held) ---- */

static int entry_of(const struct ibv_pd *pd)
{
	for (int i = 0; i < ENTRIES; i++)
		if (entries[i].pd == pd)
			return i;
	return -1;
}

/* Only with the PD lock held too. */
static int entry_for(struct ibv_pd *pd)
{
	int i = entry_of(pd);
	if (i < 0 && (i = entry_of(NULL)) >= 0)
		entries[i] = (struct pd_entry){ .pd = pd };
	return i;
}

static void entry_forget_if_unused(int i)
{
	if (!entries[i].live && !entries[i].ours)
		entries[i] = (struct pd_entry){ 0 };
}

/* One region of entry @i fewer: its PD, when that was the last region of a
 * PD the program tried to deallocate (the caller detaches it), else NULL. */
static struct ibv_pd *entry_drop(unsigned i)
{
	struct pd_entry *p = &entries[i];
	if (!p->live)
		rdmalloc_fatal("elided regions of PD %p miscounted", (void *)p->pd);
	p->live--;
	struct ibv_pd *doomed = !p->live && p->ours && p->doomed ? p->pd : NULL;
	entry_forget_if_unused((int)i);
	return doomed;
}

/* ---- what the program's own attach and detach ask (PD lock held) ---- */

/* rdma_malloc_detach_pd(@pd) would kill the keys of its elided regions:
 * EBUSY while any is alive (their owner deregisters them first). */
static int pd_detach_busy(struct ibv_pd *pd)
{
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	int i = entry_of(pd);
	int busy = i >= 0 && entries[i].live;
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	return busy ? EBUSY : 0;
}

/* The program attached @pd itself, or was told it is attached: it relies
 * on the attachment, so elision never detaches it (no eviction; its
 * ibv_dealloc_pd goes to libibverbs, after the program's detach). */
static void pd_adopted(struct ibv_pd *pd)
{
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	int i = entry_of(pd);
	if (i >= 0) {
		entries[i].ours = 0;
		entries[i].doomed = 0;
		entry_forget_if_unused(i);
	}
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
}

/* ---- attaching and detaching the program's PDs (PD lock held) ---- */

/* Detach @pd, which elision attached (its entry already cleared): 0, or
 * EBUSY when a memory window keeps it (nothing done), or with @unused_only
 * when a lookup handed out keys of it that the program may hold. */
static int detach_ours(struct ibv_pd *pd, int unused_only)
{
	int err = unused_only ? rdmalloc_pd_detach_unused_locked(pd) : rdmalloc_pd_detach_locked(pd);
	if (err == EBUSY)
		return EBUSY;
	if (err && err != ENODEV) /* ENODEV: the program detached it itself */
		rdmalloc_log(RDMALLOC_LOG_ERROR, "detaching the program's PD %p: %s", (void *)pd, rdmalloc_strerror(err));
	STAT_INC(elided_pds_detached);
	return 0;
}

/* Detach the least recently used PD that elision attached and no elided
 * region uses (skipping the entries in *@tried): whether one went. */
static int evict_one(unsigned *tried)
{
	for (;;) {
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		int v = -1;
		for (int i = 0; i < ENTRIES; i++)
			if (entries[i].pd && entries[i].ours && !entries[i].live && !(*tried & (1u << i)) &&
			    (v < 0 || entries[i].used < entries[v].used))
				v = i;
		struct pd_entry was = v >= 0 ? entries[v] : (struct pd_entry){ 0 };
		if (v >= 0)
			entries[v] = (struct pd_entry){ 0 };
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
		if (v < 0)
			return 0;
		*tried |= 1u << v;
		if (!detach_ours(was.pd, 1))
			return 1;
		/* A window on it, or keys of it handed out: still attached,
		 * still ours. */
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		entries[v] = was; /* nobody took it: entries are created under the PD lock */
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	}
}

/* Attach @pd for elision, evicting idle PDs of ours while every slot is
 * taken.  0 or an errno value (ENOSPC: no slot could be freed). */
static int attach_for_elision(struct ibv_pd *pd)
{
	unsigned tried = 0;
	for (;;) {
		int err = rdmalloc_pd_attach_locked(pd);
		if (err != ENOSPC || !evict_one(&tried))
			return err;
	}
}

/* The PD of entry @doomed lost its last region: detach it, unless an
 * elision of it came meanwhile, or keys of it were handed out since the
 * program's ibv_dealloc_pd was refused (EBUSY: nothing done, so it may have
 * gone on with the PD and looked keys up): those stay valid until its next
 * ibv_dealloc_pd, which detaches it (release_pd).  Takes the PD lock. */
static void detach_doomed(struct ibv_pd *doomed)
{
	rdmalloc_pd_lock();
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	int i = entry_of(doomed);
	int go = i >= 0 && entries[i].ours && entries[i].doomed && !entries[i].live;
	struct pd_entry was = go ? entries[i] : (struct pd_entry){ 0 };
	if (go)
		entries[i] = (struct pd_entry){ 0 };
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	if (go && detach_ours(doomed, 1) == EBUSY) { /* keys handed out, or a window on it */
		was.doomed = 0;
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		entries[i] = was;
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	}
	rdmalloc_pd_unlock();
}

/* ---- elision ---- */

#define OPTIONAL_ACCESS ((unsigned int)IBV_ACCESS_OPTIONAL_RANGE)

/* A copy of chunk @c's region with @pd, if it was registered with every
 * flag of @access: 0, EACCES or ENODEV (@pd not attached).  The PD lock,
 * held by the caller, is held by every access change, replacement and
 * deregistration of a published region.  @c is pinned by the caller: it
 * stays registered (a pinned chunk is never given back, nor released). */
static int copy_chunk_mr(struct rdmalloc_chunk *c, struct ibv_pd *pd, unsigned int access, struct ibv_mr *out)
{
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		struct rdmalloc_reg *r = &c->reg[s];
		if (atomic_load_explicit(&r->pd, memory_order_acquire) != pd)
			continue;
		if (access & ~OPTIONAL_ACCESS & ~r->access)
			return EACCES;
		*out = *atomic_load_explicit(&r->mr, memory_order_relaxed);
		return 0;
	}
	return ENODEV;
}

/* The chunk holding [addr, addr+len), pinned, when an elided region of it
 * may answer (the PD decides later); else NULL and in @why the reason. */
static struct rdmalloc_chunk *eligible(struct ibv_pd *pd, void *addr, size_t len, unsigned int access,
				       const char **why)
{
	*why = NULL; /* inside a verbs call of ours: libibverbs' own, not the program's */
	if (rdmalloc_tl_in_verbs)
		return NULL;
	*why = !rdmalloc_preload_heap() ? "the drop-in's heap is not there" : !pd ? "no PD" : "length 0";
	if (!rdmalloc_preload_heap() || !pd || !len)
		return NULL;
	*why = "remote write or atomic access without local write (the kernel refuses it)";
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
		return NULL;
	rdmalloc_init(); /* the first elision brings RDMA up (init.h) */
	/* Found, checked and pinned as one, under the PD lock: a big block
	 * freed meanwhile, or its heap destroyed (which checks for pins and
	 * releases under the PD lock), made the descriptor another chunk's,
	 * which the pin then held and a later unpin took from its owner. */
	struct rdmalloc_chunk *c;
	rdmalloc_pd_lock();
	int err = rdmalloc_chunk_pin_at(addr, len, access & ~OPTIONAL_ACCESS, &c);
	rdmalloc_pd_unlock();
	*why = err == ENOENT   ? "not rdmalloc's memory, or freed and given back"
	       : err == ERANGE ? "the range runs past its chunk"
			       : "it asks for more access than the chunk's";
	return err ? NULL : c; /* copy_chunk_mr decides */
}

/*
 * Make @e an elided region of @pd over [addr, addr+len) of chunk @c
 * (pinned by the caller) with @access: the chunk's keys, counted in @pd's
 * entry.  @e is a free record, an orphan, or an elided one moving (its old entry's
 * count moves with it; its old chunk stays pinned for the caller to unpin).
 * 0, or EACCES/ENODEV (not elidable), ENOSPC (no PD slot could be freed),
 * or the errno of a failed attach.  Takes the PD lock.
 */
static int settle(struct elided *e, struct rdmalloc_chunk *c, struct ibv_pd *pd, void *addr, size_t len,
		  unsigned int access)
{
	struct ibv_mr mr;
	int attached = 0;
	struct ibv_pd *doomed = NULL;
	rdmalloc_chunk_demand_prepare(c); /* outside every lock */
	rdmalloc_pd_lock();
	int err = copy_chunk_mr(c, pd, access, &mr);
	if (err == ENODEV && !rdmalloc_pd_attached(pd)) { /* first sight of this PD, or detached since */
		err = attach_for_elision(pd);
		attached = !err;
		if (!err)
			err = copy_chunk_mr(c, pd, access, &mr); /* attach registered an eager heap's chunks */
	}
	if (err == ENODEV && !(err = rdmalloc_chunk_demand(c, pd))) /* its first use with this PD */
		err = copy_chunk_mr(c, pd, access, &mr);
	if (!err || attached) {
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		int i = entry_for(pd);
		if (i < 0) {
			err = ENOSPC;
		} else {
			entries[i].ours |= attached;
			if (!err) {
				entries[i].live++;
				entries[i].used = ++tick;
				if (e->state == RECORD_ELIDED)
					doomed = entry_drop(e->entry);
				e->mr = mr;
				e->mr.addr = addr;
				e->mr.length = len;
				e->mr.handle = ELIDED_HANDLE;
				e->mr_type = 0; /* IBV_MR_TYPE_MR */
				e->access = (int)access;
				e->chunk = c;
				e->entry = (unsigned)i;
				e->state = RECORD_ELIDED;
			}
		}
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
		if (i < 0 && attached)
			detach_ours(pd, 0); /* no entry to remember it by: never leave it attached */
	}
	rdmalloc_pd_unlock();
	if (doomed)
		detach_doomed(doomed);
	rdmalloc_threads_start_wanted(); /* the tick of what it pinned: no lock held */
	return err;
}

static void not_elided(int err)
{
	if (err == ENOSPC) {
		STAT_INC(elision_no_pd_slot);
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "every PD slot is held by a PD with elided regions "
				  "or attached by the program: registrations with further PDs go to "
				  "libibverbs (counted in elision_no_pd_slot)");
	} else if (err != EACCES) {
		rdmalloc_log_once(RDMALLOC_LOG_INFO, "an ibv_reg_mr of the program on rdmalloc's memory goes "
				  "to libibverbs: %s (further ones are only counted in passthrough_registrations)",
				  rdmalloc_strerror(err));
	}
}

static void passed_on(void *addr, size_t len, const char *why)
{
	rdmalloc_debug("ibv_reg_mr(%p, %zu bytes) goes to libibverbs: %s", addr, len, why);
}

/* The elided region for [addr, addr+len), or NULL when not eligible. */
static struct ibv_mr *elide(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	const char *why;
	struct rdmalloc_chunk *c = eligible(pd, addr, len, access, &why);
	if (!c) {
		if (why)
			passed_on(addr, len, why);
		return NULL;
	}
	struct elided *e = record_take();
	int err = e ? settle(e, c, pd, addr, len, access) : ENOMEM;
	if (err) {
		if (e) {
			record_release(e);
			not_elided(err);
		}
		passed_on(addr, len, !e ? "no elided-region record left" : err == ENOSPC ? "no PD slot left" : rdmalloc_strerror(err));
		rdmalloc_chunk_unpin(c);
		return NULL;
	}
	STAT_INC(elided_registrations);
	STAT_INC(elided_regions);
	rdmalloc_debug("ibv_reg_mr(%p, %zu bytes) elided: the keys of chunk %p (lkey %#x)", addr, len,
		       (void *)c->base, e->mr.lkey);
	return &e->mr;
}

/* Raised while libibverbs registers for the program: its ibv_reg_mr and
 * ibv_reg_mr_iova call its exported ibv_reg_mr_iova2, which reaches our
 * wrapper again; that nested call is libibverbs' own (not elided again,
 * not counted twice). */
static RDMALLOC_TLS int handing_on;

#define HAND_ON(call)                                                       \
	({                                                                  \
		int was_ = handing_on;                                      \
		handing_on = 1;                                             \
		uint64_t t0_ = rdmalloc_now_ns();                           \
		struct ibv_mr *mr_ = (call);                                \
		handing_on = was_;                                          \
		if (!was_ && !rdmalloc_tl_in_verbs) {                       \
			STAT_INC(passthrough_registrations);                \
			STAT_ADD(passthrough_ns, rdmalloc_now_ns() - t0_);  \
		}                                                           \
		mr_;                                                        \
	})

PRELOAD_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr *mr = handing_on ? NULL : elide(pd, addr, length, (unsigned int)access);
	return mr ? mr : HAND_ON(NEXT(reg_mr, "IBVERBS_1.1")(pd, addr, length, access));
}

PRELOAD_API struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					   int access)
{
	struct ibv_mr *mr = !handing_on && iova == (uintptr_t)addr ? elide(pd, addr, length, (unsigned int)access)
								   : NULL;
	return mr ? mr : HAND_ON(NEXT(reg_mr_iova, "IBVERBS_1.7")(pd, addr, length, iova, access));
}

PRELOAD_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
					    unsigned int access)
{
	struct ibv_mr *mr = !handing_on && iova == (uintptr_t)addr ? elide(pd, addr, length, access) : NULL;
	return mr ? mr : HAND_ON(NEXT(reg_mr_iova2, "IBVERBS_1.8")(pd, addr, length, iova, access));
}

PRELOAD_API int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct elided *e = rdmalloc_tl_in_verbs ? NULL : record_of(mr);
	if (!e)
		return NEXT(dereg_mr, "IBVERBS_1.1")(mr);
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	unsigned state = e->state;
	struct rdmalloc_chunk *c = e->chunk;
	struct ibv_mr *backing = e->backing;
	struct ibv_pd *doomed = NULL;
	if (state == RECORD_ELIDED)
		doomed = entry_drop(e->entry);
	if (state == RECORD_ELIDED || state == RECORD_ORPHAN)
		record_put(e);
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	if (state == RECORD_FREE)
		return EINVAL; /* deregistered already */
	if (state == RECORD_BACKED) {
		int err = NEXT(dereg_mr, "IBVERBS_1.1")(backing);
		if (!err)
			record_release(e);
		return err;
	}
	if (state == RECORD_ELIDED)
		STAT_SUB(elided_regions, 1);
	rdmalloc_chunk_unpin(c); /* its chunk may be given back now */
	if (doomed)
		detach_doomed(doomed);
	return 0;
}

/* What the program sees of a record's registration of its own: its keys,
 * never its handle (verbs we do not wrap fail on every record alike). */
static void mirror(struct elided *e)
{
	struct ibv_mr *b = e->backing;
	e->mr = (struct ibv_mr){ .context = b->context, .pd = b->pd, .addr = b->addr, .length = b->length,
				 .handle = ELIDED_HANDLE, .lkey = b->lkey, .rkey = b->rkey };
}

/*
 * ibv_rereg_mr (IBVERBS_1.1, man ibv_rereg_mr).  A region of ours stays
 * elided, changed in place, when the new (pd, addr, length, access) is
 * still elidable; otherwise it gets a registration of its own (the same
 * struct ibv_mr for the program, real keys), whose later re-registrations
 * and deregistration go to libibverbs.  Returns as libibverbs does:
 * IBV_REREG_MR_ERR_INPUT (errno EINVAL) for what it refuses too, and
 * IBV_REREG_MR_ERR_CMD with the errno of the failed registration, or
 * EINVAL for no flags (the kernel's answer), the region then left as it
 * was.
 */
PRELOAD_API int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length,
			     int access)
{
	struct elided *e = rdmalloc_tl_in_verbs ? NULL : record_of(mr);
	if (!e)
		return NEXT(rereg_mr, "IBVERBS_1.1")(mr, flags, pd, addr, length, access);
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	unsigned state = e->state;
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	if (state == RECORD_FREE || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	if (state == RECORD_BACKED) {
		int ret = NEXT(rereg_mr, "IBVERBS_1.1")(e->backing, flags, pd, addr, length, access);
		mirror(e);
		return ret;
	}
	if (!flags) { /* libibverbs passes it on; the kernel refuses it, the region untouched */
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	struct ibv_pd *new_pd = flags & IBV_REREG_MR_CHANGE_PD ? pd : e->mr.pd;
	void *new_addr = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? addr : e->mr.addr;
	size_t new_len = flags & IBV_REREG_MR_CHANGE_TRANSLATION ? length : e->mr.length;
	int new_access = flags & IBV_REREG_MR_CHANGE_ACCESS ? access : e->access;
	struct rdmalloc_chunk *old = e->chunk;
	int orphan = state == RECORD_ORPHAN; /* counted in no entry, nor in elided_regions */
	const char *why;
	struct rdmalloc_chunk *c = eligible(new_pd, new_addr, new_len, (unsigned int)new_access, &why);
	int err = c ? settle(e, c, new_pd, new_addr, new_len, (unsigned int)new_access) : EACCES;
	if (err)
		rdmalloc_debug("ibv_rereg_mr of an elided region gets a registration of its own: %s",
			       c ? rdmalloc_strerror(err) : why ? why : "inside a verbs call");
	if (!err) {
		rdmalloc_chunk_unpin(old);
		STAT_INC(elided_rereg_in_place);
		if (orphan)
			STAT_INC(elided_regions);
		return 0;
	}
	if (c)
		rdmalloc_chunk_unpin(c);
	int was = handing_on;
	handing_on = 1;
	struct ibv_mr *own = NEXT(reg_mr, "IBVERBS_1.1")(new_pd, new_addr, new_len, new_access);
	handing_on = was;
	if (!own) {
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "ibv_rereg_mr of an elided region: its own "
				  "registration failed (%s); the region is left as it was", rdmalloc_strerror(errno));
		return IBV_REREG_MR_ERR_CMD;
	}
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	struct ibv_pd *doomed = orphan ? NULL : entry_drop(e->entry);
	e->chunk = NULL;
	e->backing = own;
	e->state = RECORD_BACKED;
	mirror(e);
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	if (!orphan)
		STAT_SUB(elided_regions, 1);
	STAT_INC(elided_rereg_backed);
	rdmalloc_chunk_unpin(old);
	if (doomed)
		detach_doomed(doomed);
	return 0;
}

/*
 * The program deallocates a PD.  If elision attached it, detach it first
 * (its chunk registrations would keep it busy): while elided regions of it
 * are alive, refuse with EBUSY, as libibverbs would with live regions, and
 * detach it when the last of them goes, unless keys of it were handed out
 * (detach_doomed; a later ibv_dealloc_pd then passes through, or detaches
 * it).  0 to go on to libibverbs, or EBUSY.
 */
static int release_pd(struct ibv_pd *pd)
{
	rdmalloc_pd_lock();
	rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
	int i = entry_of(pd);
	int ours = i >= 0 && entries[i].ours;
	int busy = ours && entries[i].live;
	struct pd_entry was = ours ? entries[i] : (struct pd_entry){ 0 };
	if (busy)
		entries[i].doomed = 1;
	else if (ours)
		entries[i] = (struct pd_entry){ 0 };
	rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	/* Refused: the program meant to let go of the keys it had; only keys
	 * it looks up from now on keep the PD attached (detach_doomed). */
	if (busy)
		rdmalloc_pd_forget_hand_outs_locked(pd);
	if (ours && !busy && detach_ours(pd, 0) == EBUSY) { /* a window on it */
		busy = 1;
		rdmalloc_lock(RDMALLOC_LOCK_ELIDED);
		entries[i] = was;
		rdmalloc_unlock(RDMALLOC_LOCK_ELIDED);
	}
	rdmalloc_pd_unlock();
	return busy ? EBUSY : 0;
}

PRELOAD_API int ibv_dealloc_pd(struct ibv_pd *pd)
{
	if (pd && !rdmalloc_tl_in_verbs) {
		int err = release_pd(pd);
		if (err)
			return err;
	}
	return NEXT(dealloc_pd, "IBVERBS_1.1")(pd);
}
