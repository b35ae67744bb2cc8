/* SPDX-License-Identifier: MIT */
/* chunk.h - chunks: memory mapped for a heap, registered with every attached
 * PD, and published in the address table. */
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
 * published last (release) on attach and cleared first on detach.
 */
struct rdmalloc_reg {
	_Atomic(struct ibv_pd *) pd;
	_Atomic(struct ibv_mr *) mr;
	_Atomic uint32_t lkey, rkey;
};

/*
 * A chunk is one allocation of an extent hook: jemalloc's extent
 * [base, base + size).  Chunks are aligned to RDMALLOC_GRANULE, so each
 * granule of the address space belongs to at most one chunk; the table maps
 * granules to chunks.  base, size and heap never change while the chunk is
 * published.
 */
struct rdmalloc_chunk {
	uintptr_t base;
	size_t size;
	struct rdmalloc_heap *heap;
	struct rdmalloc_reg reg[RDMA_MALLOC_MAX_PDS]; /* slot i = attached PD i */
	size_t destroyed;                             /* bytes handed back by the destroy hook */
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
struct rdmalloc_chunk *rdmalloc_chunk_create(struct rdmalloc_heap *heap, size_t size, size_t alignment);

/* The destroy hook handed back [addr, addr+size): once a whole chunk has
 * come back, unpublish, deregister and unmap it.  Takes the chunk lock. */
void rdmalloc_chunk_destroyed(void *addr, size_t size);

/* Release every chunk of @heap that is left (after arena destroy).  Returns
 * how many there were.  Takes the chunk lock. */
size_t rdmalloc_chunk_release_heap(struct rdmalloc_heap *heap);

/* Register every chunk, now and from now on, with @pd (in a free slot);
 * all or nothing.  0, EEXIST, ENOSPC or the errno of the failed
 * registration.  The caller serialises attach/detach (rdmalloc_pd_lock). */
int rdmalloc_chunks_attach(struct ibv_pd *pd);
/* Deregister every chunk from @pd and free its slot.  0, ENODEV, or the
 * first errno of a failed deregistration (the PD is detached all the same). */
int rdmalloc_chunks_detach(struct ibv_pd *pd);
/* In a fork child: forget every registration (they are the parent's). */
void rdmalloc_chunks_forget_registrations(void);

#endif
