/* SPDX-License-Identifier: MIT */
/* chunk.h - chunks: memory mapped for a heap, registered with every attached
 * PD, and published in the address map. */
#ifndef RDMALLOC_CHUNK_H
#define RDMALLOC_CHUNK_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "rdma_malloc.h"
#include "reserve.h"

struct rdmalloc_heap;

/*
 * One registration of a chunk.  The lookup reads it without a lock: pd is
 * published last (release) on attach and cleared first on detach; the keys
 * are one word, so a lookup never pairs the lkey of one region with the
 * rkey of another.  The struct ibv_mr itself is used only under the PD
 * lock, which every deregistration of a published region holds (detach,
 * access changes, heap destruction), or on a pinned chunk (a window or an
 * elided region: chunk.c never gives it back, the one deregistration that
 * runs without the PD lock): a lookup may return keys that are about to
 * go, never a region that is gone.
 */
struct rdmalloc_reg {
	_Atomic(struct ibv_pd *) pd;
	_Atomic(struct ibv_mr *) mr;
	_Atomic uint64_t keys; /* lkey << 32 | rkey */
	unsigned access;  /* the flags it was registered with (PD-lock holders and its creator), or
			   * RDMALLOC_REG_BROKEN */
	unsigned stamp;   /* rdmalloc_rereg_stamp when registered (rereg.c) */
	unsigned windows; /* memory windows allocated on it (PD lock): it may not be replaced */
	_Atomic unsigned seq; /* odd while its PD changes: lock-free readers check it (keys.c) */
};

/* The access of a region a failed ibv_rereg_mr left unusable: no heap's,
 * so that every change of access or resync replaces it; no IBV_ACCESS_*
 * bit (no window may be bound on it). */
#define RDMALLOC_REG_BROKEN (1u << 31)

static inline uint32_t rdmalloc_keys_lkey(uint64_t keys)
{
	return (uint32_t)(keys >> 32);
}

static inline uint32_t rdmalloc_keys_rkey(uint64_t keys)
{
	return (uint32_t)keys;
}

/*
 * When a heap's chunks are registered (doc/design.md, "When memory is
 * registered").  A heap's policy is fixed before its first chunk.
 */
enum rdmalloc_reg_policy {
	/* Registered when made (by the reserve's thread ahead of need, or
	 * inline); a refused registration fails the allocation (ENOMEM).
	 * The rdma_* heaps: their callers asked for registered memory. */
	RDMALLOC_REG_EAGER = 0,
	/* Made plain; each chunk is registered with a PD when RDMA first
	 * needs it there: a key lookup, or the drop-in's elision of the
	 * program's ibv_reg_mr (rdmalloc_chunk_demand).  A refusal then
	 * fails that lookup or elision, never an allocation.  The drop-in's
	 * heap by default: most of a program's memory never meets a NIC. */
	RDMALLOC_REG_FIRST_USE,
	/* Registered when made, as EAGER, but a refused registration leaves
	 * the chunk plain (as FIRST_USE) instead of failing the allocation:
	 * logged once, counted in refused_chunks.  RDMALLOC_PRELOAD_REGISTER=eager. */
	RDMALLOC_REG_EAGER_PLAIN,
};

/*
 * A heap as the chunk layer sees it: values that the heap layer, which owns
 * it, keeps up to date; the chunk layer never calls up into heaps.
 */
struct rdmalloc_chunk_spec {
	_Atomic unsigned int access; /* registration flags, implied bits included (written under the PD lock) */
	unsigned int flags;          /* RDMA_HEAP_*, fixed */
	int auto_cache;              /* its memory goes through the automatic thread cache and its
					chunks are never released (the drop-in's heap; fixed before
					its first chunk): marked in the address map's auto map with
					this value, RDMALLOC_AUTO_PLAIN or _CHECKED (addrmap.h) */
	_Atomic uint64_t key_gen;    /* rdma_heap_key_generation(): bumped by access changes
					(heap layer) and by chunks given back (chunk layer) */
	size_t grow_limit;           /* its arenas' retain_grow_limit (0: jemalloc's), fixed */
	int policy;                  /* enum rdmalloc_reg_policy, fixed before its first chunk */
	long decay_ms;               /* how long its idle memory stays (-1: for ever), fixed */
	_Atomic size_t bytes;        /* of its chunks held (map_size; reserve and big ones included) */
	struct rdmalloc_reserve reserve; /* the chunk layer's (reserve.h) */
};

static inline unsigned int rdmalloc_spec_access(const struct rdmalloc_chunk_spec *s)
{
	return atomic_load_explicit(&s->access, memory_order_acquire);
}

/* Whether @s's registrations are ODP ones, which pin nothing: the kernel
 * takes the NIC's translations away with the pages, so freed pages may go
 * at once; its chunks are never given back whole. */
static inline int rdmalloc_spec_odp(const struct rdmalloc_chunk_spec *s)
{
	return (s->flags & RDMA_HEAP_ODP) != 0;
}

/* Whether @s's chunks are registered when made. */
static inline int rdmalloc_spec_eager(const struct rdmalloc_chunk_spec *s)
{
	return s->policy != RDMALLOC_REG_FIRST_USE;
}

/* Whether @s's chunks may lack registrations, made when RDMA needs them. */
static inline int rdmalloc_spec_on_demand(const struct rdmalloc_chunk_spec *s)
{
	return s->policy != RDMALLOC_REG_EAGER;
}

/*
 * What a chunk is (chunk lock).  A chunk is given back when jemalloc has
 * decommitted all of it (doc/design.md, "Giving memory back"): deregistered
 * and its pages returned, while jemalloc keeps the address range; when
 * jemalloc commits part of it again, it is registered anew (new keys).
 */
enum rdmalloc_chunk_state {
	RDMALLOC_CHUNK_LIVE = 0, /* registered and published */
	RDMALLOC_CHUNK_GIVING,   /* being given back: unpublished, deregistering */
	RDMALLOC_CHUNK_GONE,     /* given back: no registration, no pages */
	RDMALLOC_CHUNK_TAKING,   /* being registered again for a commit */
	RDMALLOC_CHUNK_RELEASING, /* its heap is being destroyed */
	RDMALLOC_CHUNK_QUARANTINED, /* a deregistration failed and its pages stayed: never used again */
	RDMALLOC_CHUNK_RESERVED, /* a reserve's (reserve.h): registered, in the list, not published;
				    attach and detach walk it, access changes leave it to the hand-over */
};

#define RDMALLOC_GRANULE_SHIFT 21
#define RDMALLOC_GRANULE ((size_t)1 << RDMALLOC_GRANULE_SHIFT)
/* The grain of jemalloc's commits and decommits (its PAGE, 4 KiB on
 * x86-64; a multiple of it elsewhere). */
#define RDMALLOC_IDLE_PAGE_SHIFT 12
#define RDMALLOC_IDLE_PAGE ((size_t)1 << RDMALLOC_IDLE_PAGE_SHIFT)

/*
 * A chunk is one allocation of an extent hook: jemalloc's extent
 * [base, base + size).  Chunks are aligned to RDMALLOC_GRANULE, so each
 * granule of the address space belongs to at most one chunk; the address
 * map maps granules to chunks, given-back ones included (for the hooks;
 * lookups see live_size).  base, size and heap never change until the
 * chunk is released.
 */
struct rdmalloc_chunk {
	uintptr_t base;
	size_t size;     /* what jemalloc asked for and uses */
	_Atomic size_t live_size; /* size while LIVE, 0 otherwise: what lookups see */
	size_t map_size; /* mapped and registered: size rounded up to whole pages of page_kind */
	size_t tail;     /* mapped past map_size to the end of its last granule (auto_cache chunks:
			    the auto map marks every granule of theirs), never used, unmapped with it */
	int page_kind;   /* enum rdmalloc_page_kind (hugepage.h) */
	struct rdmalloc_heap *heap;              /* its owner: only compared here */
	struct rdmalloc_chunk_spec *spec; /* its owner's flags (the chunk layer writes key_gen only) */
	int big;         /* one block of its own (heap/big.c), never jemalloc's: no hook sees it */
	struct rdmalloc_reg reg[RDMA_MALLOC_MAX_PDS]; /* reg[i]: with PD i of the PD table */
	size_t destroyed;                             /* bytes handed back by the destroy hook */
	atomic_int dereg_failed; /* a region of it could not be deregistered: never unmap it */
	/* Under the chunk lock: */
	unsigned state;    /* enum rdmalloc_chunk_state */
	size_t committed;  /* bytes jemalloc has committed */
	unsigned busy;     /* walks (attach, detach, access changes) working on it unlocked */
	unsigned pins;     /* memory windows and drop-in elided regions on it */
	int stale;         /* holds bytes of ranges jemalloc decommitted: commits zero them */
	int fresh;         /* created uncommitted, not committed yet: not idle */
	int held;          /* counted in the bytes held against RDMALLOC_MAX_REGISTERED (hold.c):
			      from creation for an eager heap's chunk, while it has a
			      registration for an on-demand one */
	unsigned discarding; /* decommitted ranges of a plain chunk being discarded (MADV_DONTNEED):
				no registration starts meanwhile (demand.c) */
	/* A bit per page (RDMALLOC_IDLE_PAGE) jemalloc has decommitted, for
	 * chunks jemalloc uses of a heap that gives memory back: no block
	 * lies there (rdmalloc_chunk_idle_at).  Written under the chunk lock,
	 * read without it.  idle_inline for chunks of up to a granule. */
	_Atomic(_Atomic(uint64_t) *) idle_pages;
	_Atomic(uint64_t) idle_inline[RDMALLOC_GRANULE / RDMALLOC_IDLE_PAGE / 64];
	/* The heap layer's, for a big chunk (heap/big.c, under its lock): */
	struct rdmalloc_chunk *owner_next, *owner_prev;
	uint64_t owner_word;
	struct rdmalloc_chunk *giving_next; /* a batch being given back */
	struct rdmalloc_chunk *next, *prev; /* all chunks, given-back ones included */
};

/* The leaf lock of the chunk set (chunkset.h): never held across verbs calls or allocation. */
void rdmalloc_chunk_lock(void);
void rdmalloc_chunk_unlock(void);

/*
 * Map @size bytes aligned to max(@alignment, granule) for @heap, register
 * them with every attached PD and publish them: the heap's reserve chunk
 * when it is ready and exactly @size bytes (its registrations first brought
 * in step with the PD table and the heap's access: reserve_hits,
 * reserve_resyncs), else made here (inline_chunks); then the reserve is
 * asked for the next growth.  @committed: whether
 * jemalloc takes it as committed; if not, it commits the parts it uses
 * (rdmalloc_chunk_commit).  NULL with errno ENOMEM when the mapping, a
 * registration or RDMALLOC_MAX_REGISTERED refuses (after giving idle
 * chunks back and trying once more): nothing is left behind.  Takes the
 * chunk lock.
 */
struct rdmalloc_chunk *rdmalloc_chunk_create(struct rdmalloc_heap *heap, struct rdmalloc_chunk_spec *spec,
					     size_t size, size_t alignment, int committed);

/*
 * A chunk of @size bytes holding one block of its own (heap/big.c), aligned
 * to max(@alignment, granule), registered per its heap's policy and
 * published, all of it committed; never jemalloc's, never idle: its heap
 * releases it (rdmalloc_chunk_release_big).  NULL with errno as
 * rdmalloc_chunk_create.  Takes the chunk lock.
 */
struct rdmalloc_chunk *rdmalloc_chunk_create_big(struct rdmalloc_heap *heap, struct rdmalloc_chunk_spec *spec,
						 size_t size, size_t alignment);
/* Bring LIVE chunk @c of an eager heap, which the caller owns (a big
 * block kept for reuse), in step with the PD table and its heap's access,
 * as a chunk made now would be (after a fork: the child's PDs): 0, or the
 * errno of a failed registration.  Takes the chunk lock, and the PD lock
 * (as the walks do) only when it registers: call it holding neither. */
int rdmalloc_chunk_resync(struct rdmalloc_chunk *c);
/* Unpublish, deregister and unmap big chunk @c (its block was freed): given
 * back (chunks_given_back, bytes_given_back, the key generation), 0;
 * or EBUSY while it is pinned (a memory window, an elided region: nothing
 * done).  Waits for a walk under way on it.  Takes the chunk lock. */
int rdmalloc_chunk_release_big(struct rdmalloc_chunk *c);

/*
 * Register chunk @c of an on-demand heap with attached @pd now, if it is
 * not yet (its first use by RDMA there): 0; ENOENT (@c is not LIVE: given
 * back or released, its memory is free); ENODEV (@pd is not attached, or
 * @c's heap registers its chunks when they are made); ENOMEM
 * (RDMALLOC_MAX_REGISTERED, or ibv_reg_mr failed whatever its errno, which
 * the one warning logged names; after idle memory was given back).  The
 * caller holds the PD lock.  Takes the chunk lock.
 */
int rdmalloc_chunk_demand(struct rdmalloc_chunk *c, struct ibv_pd *pd);
/* The same for the chunk holding @ptr, found under the PD lock the caller
 * holds (ENODEV: none, or not an on-demand heap's): for a caller whose own
 * look was lock-free, as a program may free the block meanwhile. */
int rdmalloc_chunk_demand_at(const void *ptr, struct ibv_pd *pd);
/* @c's spec as a lock-free lookup sees it: NULL when its chunk was
 * released meanwhile (a program that frees the block it looks up) and the
 * descriptor is free or not yet another chunk's; descriptors and specs
 * are never unmapped, so anything else is a spec to read. */
static inline const struct rdmalloc_chunk_spec *rdmalloc_chunk_spec_seen(const struct rdmalloc_chunk *c)
{
	return __atomic_load_n(&c->spec, __ATOMIC_RELAXED);
}

/* Before rdmalloc_chunk_demand(@c), holding no lock: the crew's workers
 * started (crew.h) if @c is an on-demand heap's whose first registration
 * is to come and the crew serves it, so that it is shared out too.  @c may
 * be what a lock-free look found (rdmalloc_chunk_spec_seen).  errno is
 * kept. */
void rdmalloc_chunk_demand_prepare(struct rdmalloc_chunk *c);

/* The destroy hook handed back [addr, addr+size): once a whole chunk has
 * come back, unpublish, deregister and unmap it.  Takes the chunk lock. */
void rdmalloc_chunk_destroyed(void *addr, size_t size);

/*
 * The commit hook: jemalloc is about to use [addr, addr+len) of a chunk of
 * a giving-back heap.  A given-back chunk is registered again first (with
 * new keys; under memory pressure idle chunks are given back and it is
 * tried once more); a range whose old bytes stayed (decommitted while the
 * chunk stayed registered) is zeroed, since jemalloc takes decommitted
 * memory for zeroed.  0 or an errno value (the commit fails).  Takes the
 * chunk lock; may wait for a give-back of the same chunk to finish.
 */
int rdmalloc_chunk_commit(void *addr, size_t len);
/* The decommit hook: jemalloc no longer uses [addr, addr+len).  When no
 * byte of the chunk is committed any more, idle chunks of its heap beyond
 * the one kept are given back.  Takes the chunk lock. */
void rdmalloc_chunk_decommit(void *addr, size_t len);
/*
 * Whether @p lies in a page of a chunk that jemalloc has decommitted (or a
 * given-back chunk, all of whose pages it had decommitted): no block lies
 * there, so a free of @p is of memory free already (heap/freed.h).  Its
 * bytes may read as zeros: a chunk that is not registered gives such pages
 * back to the kernel at once.  Wait-free, no lock.
 */
int rdmalloc_chunk_idle_at(const void *p);
/* The same for @p in chunk @c, found already. */
static inline int rdmalloc_chunk_idle_in(const struct rdmalloc_chunk *c, const void *p)
{
	_Atomic(uint64_t) *bits = atomic_load_explicit(&((struct rdmalloc_chunk *)c)->idle_pages,
						       memory_order_acquire);
	uintptr_t off = (uintptr_t)p - c->base;
	if (!bits || off >= c->size)
		return 0;
	size_t i = off >> RDMALLOC_IDLE_PAGE_SHIFT;
	return (int)(atomic_load_explicit(&bits[i / 64], memory_order_relaxed) >> (i % 64) & 1);
}
/* Start @c's idle map (chunk lock held): every page idle unless
 * @committed.  Without memory for it, none (logged once, counted in
 * fallbacks): its pages read as in use. */
void rdmalloc_chunk_idle_init(struct rdmalloc_chunk *c, int committed);
/* Its end (chunk lock held, @c unpublished). */
void rdmalloc_chunk_idle_fini(struct rdmalloc_chunk *c);
/* Give back every idle chunk (of @heap, or of every heap: NULL), the kept
 * ones included.  Returns the bytes given back.  Takes the chunk lock. */
size_t rdmalloc_chunks_give_back(const struct rdmalloc_heap *heap);
/* Keep @c registered while a memory window or an elided region is on it:
 * 0, or ENOENT when it is not LIVE (given back, or going).  Chunk lock. */
RDMALLOC_TESTABLE int rdmalloc_chunk_pin(struct rdmalloc_chunk *c);
/* Find the chunk holding [@addr, @addr+@len), registered with every flag
 * of @access, and pin it, as one under the chunk lock: a descriptor found
 * without it may meanwhile be released and made another chunk's (a big
 * block freed; a heap destroyed, which also wants the caller to hold the
 * PD lock, under which it checks for pins and releases, and changes
 * access).  0 with *@out pinned, or, with nothing pinned: ENOENT (no LIVE
 * chunk holds @addr: not ours, given back or going), ERANGE (the range
 * runs past its chunk), EACCES (the chunk lacks some of @access). */
RDMALLOC_TESTABLE int rdmalloc_chunk_pin_at(const void *addr, size_t len, unsigned access,
					    struct rdmalloc_chunk **out);
/* Undo one rdmalloc_chunk_pin() or _pin_at(); an idle chunk may then be
 * given back. */
RDMALLOC_TESTABLE void rdmalloc_chunk_unpin(struct rdmalloc_chunk *c);
/* In a fork child (one thread, no lock): @c pinned again for an elided
 * region the child inherits (preload/elide.c).  The child starts with no
 * pin (rdmalloc_chunks_forget_registrations): those of calls under way in
 * the parent's other threads are not its. */
void rdmalloc_chunk_pin_fork_child(struct rdmalloc_chunk *c);

/* Make the chunk @r's heap will ask for next, @size bytes, and park it as
 * @r's ready chunk (the reserve's thread: no lock held).  0 or an errno
 * value (nothing made; RDMALLOC_MAX_REGISTERED is never relieved for it). */
int rdmalloc_chunk_fill_reserve(struct rdmalloc_reserve *r, size_t size);
/* Release @r's ready chunk, if any (reserve_discards): its bytes.  No lock
 * held.  While an attach or a detach works on it, wait; a relief or a
 * trim (@skipped not NULL: rdmalloc_reserves_drop) waits
 * rdmalloc_fill_wait_ns at most, and never again for the same chunk while
 * it stays ready, as the walk's registration may wait for a lock the
 * calling thread holds: then 0, and *@skipped 2 (1 when not waited for
 * again). */
size_t rdmalloc_chunk_drop_reserve(struct rdmalloc_reserve *r, int *skipped);

/* Release every chunk of @heap that is left (after arena destroy).  Returns
 * how many there were.  Takes the chunk lock. */
size_t rdmalloc_chunk_release_heap(struct rdmalloc_heap *heap);

/* The chunk whose range holds @p, in any state, or NULL (for the hooks:
 * jemalloc owns the range).  Lock-free. */
struct rdmalloc_chunk *rdmalloc_chunk_owning(const void *p);

/* PD @i of the PD table (registration reg[i] of every chunk), or NULL (a
 * lock-free read). */
struct ibv_pd *rdmalloc_pd_at(unsigned i);

/* Register every chunk, now and from now on, with @pd (at a free index);
 * all or nothing.  0, EEXIST, ENOSPC or the errno of the failed
 * registration.  The caller serialises attach/detach (rdmalloc_pd_lock). */
int rdmalloc_chunks_attach(struct ibv_pd *pd);
/* Deregister every chunk from @pd and free its index, once no chunk being
 * created still registers with it.  0, ENODEV, EBUSY (a memory window is
 * allocated on a region of @pd: nothing done), or EIO: a deregistration
 * failed (logged and counted: rdmalloc_dereg_mr), the PD is detached all
 * the same.  The caller holds the PD lock. */
int rdmalloc_chunks_detach(struct ibv_pd *pd);
/*
 * The same for a PD whose attachment nobody asked for (the drop-in's
 * elision attached it, and evicts it for a free index): EBUSY, nothing
 * done, when a lookup has handed out keys or a region of it since it was
 * attached (rdmalloc_pd_slot_hand_out), which the program may still hold.
 */
int rdmalloc_chunks_detach_unused(struct ibv_pd *pd);
/* The program let go of the keys of @pd that lookups handed out so far
 * (its ibv_dealloc_pd was refused): from now on only new hand-outs keep
 * rdmalloc_chunks_detach_unused from detaching it.  PD lock held. */
void rdmalloc_chunks_forget_hand_outs(struct ibv_pd *pd);

/*
 * Each PD index's use (rdmalloc_pd_slot_use): a generation, bumped when a
 * PD is attached at the index, above two bits: RDMALLOC_SLOT_HANDED once a
 * lookup handed out keys of it, RDMALLOC_SLOT_CLOSING once
 * rdmalloc_chunks_detach_unused detaches it.  Each bit is set only by a
 * compare-and-swap from neither, so at most one is ever set: either the
 * evictor finds HANDED and leaves the PD, or the lookup finds CLOSING (or
 * another generation: the PD it read went meanwhile) and answers ENODEV.
 */
#define RDMALLOC_SLOT_HANDED 1u
#define RDMALLOC_SLOT_CLOSING 2u
#define RDMALLOC_SLOT_BITS 3u
extern _Atomic unsigned rdmalloc_pd_slot_use[RDMA_MALLOC_MAX_PDS];

/* The use of PD index @s, read by a lookup before it reads the keys. */
static inline unsigned rdmalloc_pd_slot_peek(unsigned s)
{
	return atomic_load_explicit(&rdmalloc_pd_slot_use[s], memory_order_acquire);
}

/*
 * A lookup hands out keys it read of PD index @s, whose use was @u before
 * it read them: 0, or ENODEV when that PD is being evicted or went (its
 * keys would die under the program).  One compare once HANDED is set.
 */
static inline int rdmalloc_pd_slot_hand_out(unsigned s, unsigned u)
{
	if (__builtin_expect((u & RDMALLOC_SLOT_BITS) == RDMALLOC_SLOT_HANDED, 1))
		return 0;
	if (u & RDMALLOC_SLOT_CLOSING)
		return ENODEV;
	unsigned want = u | RDMALLOC_SLOT_HANDED;
	if (atomic_compare_exchange_strong_explicit(&rdmalloc_pd_slot_use[s], &u, want, memory_order_seq_cst,
						    memory_order_seq_cst))
		return 0;
	return u == want ? 0 : ENODEV; /* another lookup of the same PD set it */
}

/* Whether a memory window is allocated on a region of @heap (PD lock). */
int rdmalloc_chunks_have_windows(const struct rdmalloc_heap *heap);
/* Whether a chunk of @heap is pinned (a window, or an elided region of the
 * drop-in).  Takes the chunk lock. */
int rdmalloc_chunks_pinned(const struct rdmalloc_heap *heap);
/*
 * Re-register every registration of every chunk of @heap under @access
 * (the heap's access field must already say @access): in place, or (with
 * @new_keys, or when the device refuses) by registering anew and then
 * deregistering the old region.  @stamp marks registrations already done.
 * Reports changed keys through @cb (called with the PD lock held: the
 * caller records them, and tells the program after unlocking); *@changed
 * counts them, and regions a failed ibv_rereg_mr left unusable
 * (RDMALLOC_REG_BROKEN, replaced by a later call).  0 or the errno of the
 * first failure (what was done is left done: the caller reverts).  The
 * caller holds the PD lock.
 */
int rdmalloc_chunks_rereg(struct rdmalloc_heap *heap, unsigned access, int new_keys, unsigned stamp,
			  rdma_heap_key_change_fn cb, void *ctx, unsigned long *changed);
/* The registration stamp new registrations get (rereg.c bumps it). */
extern _Atomic unsigned rdmalloc_rereg_stamp;
/* Bump the registration generation, so that chunks being created register
 * again (after a heap's access flags changed). */
void rdmalloc_chunks_bump_gen(void);
/* How many registrations (chunk x PD) @heap has now: a bound for the
 * reports of one access change.  Takes the chunk lock. */
size_t rdmalloc_chunks_count_regs(const struct rdmalloc_heap *heap);

/* Bytes of chunks held against RDMALLOC_MAX_REGISTERED: those registered
 * (pinned), or being made, or an eager heap's.  Takes the chunk lock. */
size_t rdmalloc_chunks_held_bytes(void);
/* Chunks with no registration at all: plain ones of on-demand heaps, or
 * every chunk when no PD is attached.  Takes the chunk lock. */
size_t rdmalloc_chunks_unregistered(void);

/* In a fork child: forget every registration (they are the parent's). */
void rdmalloc_chunks_forget_registrations(void);

#endif
