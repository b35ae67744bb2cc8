/* SPDX-License-Identifier: MIT */
/*
 * chunkset.h - what the files of the chunk set share, inside src/reg/ only
 * (chunk.h is the chunk layer's face to the layers above):
 *  - chunkset.c  the chunk lock, descriptors, the list of chunks, the stats
 *                of chunks held;
 *  - pdtable.c   the PD table, the creators using each PD, and the walks
 *                that attach, detach and re-register every chunk;
 *  - hold.c      what may be held: RDMALLOC_MAX_REGISTERED, memory
 *                pressure and its relief;
 *  - chunk.c     making and releasing chunks (the alloc and destroy hooks,
 *                the reserve's chunks);
 *  - giveback.c  idle chunks given back and taken back (the commit and
 *                decommit hooks), pins.
 *  - idlemap.c   the pages of each chunk jemalloc has decommitted.
 * Locking: see chunk.c.  Everything here is under the chunk lock unless it
 * says otherwise.
 */
#ifndef RDMALLOC_CHUNKSET_H
#define RDMALLOC_CHUNKSET_H

#include <stddef.h>

#include "chunk.h"

/* ---- chunkset.c ---- */
/* Every chunk but those being made or released: published ones, given-back
 * ones, reserve chunks. */
extern struct rdmalloc_chunk *rdmalloc_chunk_list;
/* A zeroed descriptor, or NULL; descriptors are recycled, never unmapped. */
struct rdmalloc_chunk *rdmalloc_desc_alloc(void);
void rdmalloc_desc_free(struct rdmalloc_chunk *c);
void rdmalloc_chunk_link(struct rdmalloc_chunk *c);
void rdmalloc_chunk_unlink(struct rdmalloc_chunk *c);
/* @c enters (@delta 1) or leaves (-1) the stats of chunks held. */
void rdmalloc_count_held(const struct rdmalloc_chunk *c, int delta);

/* ---- idlemap.c ---- */
/* Mark [@addr, @addr+@len) of @c idle (decommitted) or not: the commit and
 * decommit hooks, before they return. */
void rdmalloc_chunk_idle_set(struct rdmalloc_chunk *c, const void *addr, size_t len, int idle);

/* ---- pdtable.c ---- */
/* A creator is done with the PDs in @used (a mask of indexes): wake a
 * detach waiting for them. */
void rdmalloc_pd_users_release(unsigned used);
/* A deregistration of a region of @pd failed (region.c), in any thread:
 * the detach of @pd that ends its attachment answers EIO. */
void rdmalloc_pd_dereg_failed(const struct ibv_pd *pd);
/* The PDs (indexes) @c is registered with.  Its owner's, or chunk lock. */
unsigned rdmalloc_registered_pds(const struct rdmalloc_chunk *c);
/* Count the PDs @c is registered with in the PD users, for a caller that
 * will deregister or hand over @c: the mask to release later. */
unsigned rdmalloc_pd_users_claim(const struct rdmalloc_chunk *c);
/*
 * Register @c with every attached PD under its heap's access now, again
 * until the PD table and the access held still meanwhile.  0 with the
 * chunk lock held, so that the caller publishes before they can change
 * again; else an errno value, without the lock.  *@used collects the PDs
 * counted as used for the caller (it releases them).  No lock on entry.
 */
int rdmalloc_register_steady(struct rdmalloc_chunk *c, unsigned *used);
/* The same, and under memory pressure (rdmalloc_pressure) memory given
 * back (rdmalloc_relieve) and once more (hold.c). */
int rdmalloc_register_steady_relieved(struct rdmalloc_chunk *c, unsigned *used);

/* ---- hold.c ---- */
/* Bytes of chunks held or being made, for RDMALLOC_MAX_REGISTERED. */
extern size_t rdmalloc_held_bytes;
/* May @want more bytes be held?  Counted in rdmalloc_held_bytes if so. */
int rdmalloc_hold(size_t want);
/* A chunk of @size bytes was refused by the limit: counted, logged once. */
void rdmalloc_log_limit(size_t size);
/* A registration of @size bytes failed with @err: logged once. */
void rdmalloc_log_reg_failure(size_t size, int err);
/* Whether @err is one that giving memory back may cure (the thread
 * remembers it, tls.h).  No lock needed. */
int rdmalloc_pressure(int err);
/*
 * Give memory back under pressure: the reserves first (they are nobody's
 * yet), then idle chunks.  Non-zero when something went.  No lock held.
 * Until the caller's rdmalloc_relief_end() (no lock held) or
 * rdmalloc_relief_end_locked() (chunk lock held), which it calls once
 * after its retry, whether it retried or not, the reserves' thread starts
 * no chunk: what went back is the retry's (issue 23, item 4).
 */
size_t rdmalloc_relieve(void);
/* The same hold on the reserves' thread for a relief made by other means
 * (an allocation's, heap.c): ended as rdmalloc_relieve()'s is. */
void rdmalloc_relief_begin(void);
void rdmalloc_relief_end(void);
void rdmalloc_relief_end_locked(void);
/* Why a registration was refused, for a log line: @err is EDQUOT for
 * RDMALLOC_MAX_REGISTERED, else the errno of ibv_reg_mr (the memlock
 * limit named for ENOMEM and EAGAIN).  The thread's own buffer. */
const char *rdmalloc_refusal_text(int err);

/* ---- chunk.c ---- */
/* Deregister @c from every PD, then unmap its @len bytes at @p (NULL: not
 * mapped), unless a region of it stays registered.  No lock held. */
void rdmalloc_deregister_unmap(struct rdmalloc_chunk *c, void *p, size_t len);

/* ---- giveback.c ---- */
/* Give back the idle chunks of @heap (NULL: all) but, with @keep, the
 * smallest of each heap.  The bytes given back.  No lock held. */
size_t rdmalloc_give_back_idle(const struct rdmalloc_heap *heap, int keep);
/* Whether a give-back skipped a chunk idle but for a walk on it since the
 * last call: then every heap's idle chunks are to be looked at again. */
int rdmalloc_give_back_skipped(void);

/* In a fork child (no lock): the give-backs and take-backs a commit
 * stopped waiting for were the parent's threads'. */
void rdmalloc_give_back_fork_child(void);

#endif
