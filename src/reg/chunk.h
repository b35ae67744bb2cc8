/* SPDX-License-Identifier: MIT */
/* chunk.h - chunks: memory mapped for a heap, registered with every attached
 * PD, and published in the address map. */
#ifndef RDMALLOC_CHUNK_H
#define RDMALLOC_CHUNK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "rdma_malloc.h"

struct rdmalloc_heap;

/*
 * One registration of a chunk.  The lookup reads it without a lock: pd is
 * published last (release) on attach and cleared first on detach; the keys
 * are one word, so a lookup never pairs the lkey of one region with the
 * rkey of another.  The struct ibv_mr itself is used only under the PD
 * lock, which every deregistration of a published region holds (detach,
 * access changes, heap destruction): a lookup may return keys that are
 * about to go, never a region that is gone.
 */
struct rdmalloc_reg {
	_Atomic(struct ibv_pd *) pd;
	_Atomic(struct ibv_mr *) mr;
	_Atomic uint64_t keys; /* lkey << 32 | rkey */
	unsigned access;  /* the flags it was registered with (PD-lock holders and its creator) */
	unsigned stamp;   /* rdmalloc_rereg_stamp when registered (rereg.c) */
	unsigned windows; /* memory windows allocated on it (PD lock): it may not be replaced */
	_Atomic unsigned seq; /* odd while its PD changes: lock-free readers check it (keys.c) */
};

static inline uint32_t rdmalloc_keys_lkey(uint64_t keys)
{
	return (uint32_t)(keys >> 32);
}

static inline uint32_t rdmalloc_keys_rkey(uint64_t keys)
{
	return (uint32_t)keys;
}

/*
 * A heap as the chunk layer sees it: values that the heap layer, which owns
 * it, keeps up to date; the chunk layer never calls up into heaps.
 */
struct rdmalloc_chunk_spec {
	_Atomic unsigned int access; /* registration flags, implied bits included (written under the PD lock) */
	unsigned int flags;          /* RDMA_HEAP_*, fixed */
};

static inline unsigned int rdmalloc_spec_access(const struct rdmalloc_chunk_spec *s)
{
	return atomic_load_explicit(&s->access, memory_order_acquire);
}

/*
 * A chunk is one allocation of an extent hook: jemalloc's extent
 * [base, base + size).  Chunks are aligned to RDMALLOC_GRANULE, so each
 * granule of the address space belongs to at most one chunk; the address
 * map maps granules to chunks.  base, size and heap never change while the
 * chunk is published.
 */
struct rdmalloc_chunk {
	uintptr_t base;
	size_t size;     /* what jemalloc asked for and uses */
	size_t map_size; /* mapped and registered: size rounded up to whole pages of page_kind */
	int page_kind;   /* enum rdmalloc_page_kind (hugepage.h) */
	struct rdmalloc_heap *heap;              /* its owner: only compared here */
	const struct rdmalloc_chunk_spec *spec; /* its owner's flags */
	struct rdmalloc_reg reg[RDMA_MALLOC_MAX_PDS]; /* reg[i]: with PD i of the PD table */
	size_t destroyed;                             /* bytes handed back by the destroy hook */
	atomic_int dereg_failed; /* a region of it could not be deregistered: never unmap it */
	struct rdmalloc_chunk *next, *prev;           /* all chunks, under the chunk lock */
};

#define RDMALLOC_GRANULE_SHIFT 21
#define RDMALLOC_GRANULE ((size_t)1 << RDMALLOC_GRANULE_SHIFT)

/* The leaf lock of chunk.c: never held across verbs calls or allocation. */
void rdmalloc_chunk_lock(void);
void rdmalloc_chunk_unlock(void);

/*
 * Map @size bytes aligned to max(@alignment, granule) for @heap, register
 * them with every attached PD and publish them.  NULL with errno ENOMEM when
 * the mapping, a registration or RDMALLOC_MAX_REGISTERED refuses: nothing is
 * left behind.  Takes the chunk lock.
 */
struct rdmalloc_chunk *rdmalloc_chunk_create(struct rdmalloc_heap *heap, const struct rdmalloc_chunk_spec *spec,
					     size_t size, size_t alignment);

/* The destroy hook handed back [addr, addr+size): once a whole chunk has
 * come back, unpublish, deregister and unmap it.  Takes the chunk lock. */
void rdmalloc_chunk_destroyed(void *addr, size_t size);

/* Release every chunk of @heap that is left (after arena destroy).  Returns
 * how many there were.  Takes the chunk lock. */
size_t rdmalloc_chunk_release_heap(struct rdmalloc_heap *heap);

/* PD @i of the PD table (registration reg[i] of every chunk), or NULL (a
 * lock-free read). */
struct ibv_pd *rdmalloc_pd_at(unsigned i);

/* Register every chunk, now and from now on, with @pd (at a free index);
 * all or nothing.  0, EEXIST, ENOSPC or the errno of the failed
 * registration.  The caller serialises attach/detach (rdmalloc_pd_lock). */
int rdmalloc_chunks_attach(struct ibv_pd *pd);
/* Deregister every chunk from @pd and free its index, once no chunk being
 * created still registers with it.  0, ENODEV, EBUSY (a memory window is
 * allocated on a region of @pd: nothing done), or the first errno of a
 * failed deregistration (the PD is detached all the same).  The caller
 * holds the PD lock. */
int rdmalloc_chunks_detach(struct ibv_pd *pd);
/* Whether a memory window is allocated on a region of @heap (PD lock). */
int rdmalloc_chunks_have_windows(const struct rdmalloc_heap *heap);
/*
 * Re-register every registration of every chunk of @heap under @access
 * (the heap's access field must already say @access): in place, or (with
 * @new_keys, or when the device refuses) by registering anew and then
 * deregistering the old region.  @stamp marks registrations already done.
 * Reports changed keys through @cb (called with the PD lock held: the
 * caller records them, and tells the program after unlocking); *@changed
 * counts them.  0 or the errno of the first failure (what was done is left
 * done: the caller reverts).  The caller holds the PD lock.
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

/* In a fork child: forget every registration (they are the parent's). */
void rdmalloc_chunks_forget_registrations(void);

#endif
