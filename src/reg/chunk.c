/* SPDX-License-Identifier: MIT */
/*
 * chunk.c - the chunk set: the descriptor pool, the list of published
 * chunks, the PD table (PD i is registration reg[i] of every chunk);
 * creating and releasing a chunk (map, register with every attached PD,
 * publish in the address map; and the reverse); and the walks that attach,
 * detach and re-register every chunk.  One registration is region.c's job.
 *
 * Chunks are created only from the alloc extent hook and released only when
 * their heap is destroyed: while a chunk is registered it is never purged,
 * decommitted or unmapped (see hooks.c).
 *
 * Locking (doc/design.md, "Locks and fork"): the CHUNK lock is a leaf.  It
 * guards the chunk list, the address map's writers, the descriptor pool,
 * the PD table and the registration generation, and is never held across a
 * verbs call, an allocation or another lock.  Registration happens outside
 * it: a new chunk registers with a snapshot of the PD table and publishes
 * only if the registration generation (reg_gen: bumped when the PD table
 * or a heap's access changes) did not move meanwhile, else it registers
 * again.  Each PD counts the creators whose snapshot holds it (pd_users):
 * detach waits for them, so that no creator still uses a PD once its
 * detach returned.  Attach and detach are serialised by the caller (the
 * PD lock).
 */
#include "chunk.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "addrmap.h"
#include "counters.h"
#include "hugepage.h"
#include "implicit.h"
#include "lock.h"
#include "log.h"
#include "options.h"
#include "os.h"
#include "region.h"

static struct rdmalloc_chunk *all_chunks; /* published chunks */
static struct rdmalloc_chunk *free_descs; /* recycled descriptors */
static size_t held_bytes;                 /* chunks held or being made, for RDMALLOC_MAX_REGISTERED */
static _Atomic(struct ibv_pd *) pds[RDMA_MALLOC_MAX_PDS]; /* the PD table: PD i registers chunks' reg[i] */
static unsigned pds_filling;              /* indexes an attach is filling */
static unsigned long reg_gen;             /* bumped when the PD table or a heap's access changes */
static unsigned pd_users[RDMA_MALLOC_MAX_PDS]; /* creators that may register with PD i */

void rdmalloc_chunk_lock(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_CHUNK);
}

void rdmalloc_chunk_unlock(void)
{
	rdmalloc_unlock(RDMALLOC_LOCK_CHUNK);
}

struct ibv_pd *rdmalloc_pd_at(unsigned i)
{
	return atomic_load_explicit(&pds[i], memory_order_acquire);
}

/* Descriptors come from pages of their own, never from jemalloc (we run
 * inside its hooks) and are recycled, never unmapped, so a racing reader of
 * a stale pointer reads memory that is still mapped.  Chunk lock held. */
static struct rdmalloc_chunk *desc_alloc(void)
{
	if (!free_descs) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		void *m = rdmalloc_os_map(page);
		if (!m)
			return NULL;
		struct rdmalloc_chunk *d = m;
		for (size_t i = 0; i < page / sizeof(*d); i++) {
			d[i].next = free_descs;
			free_descs = &d[i];
		}
	}
	struct rdmalloc_chunk *c = free_descs;
	free_descs = c->next;
	memset(c, 0, sizeof(*c));
	return c;
}

/* Chunk lock held. */
static void desc_free(struct rdmalloc_chunk *c)
{
	c->base = 0;
	c->size = 0;
	c->map_size = 0;
	c->heap = NULL;
	c->spec = NULL;
	c->next = free_descs;
	free_descs = c;
}

/* A creator is done with the PDs in @used: wake a detach waiting for
 * them.  Chunk lock held. */
static void pd_users_release(unsigned used)
{
	int woke = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if ((used & (1u << s)) && --pd_users[s] == 0)
			woke = 1;
	if (woke)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

static void log_reg_failure(size_t size, int err)
{
	struct rlimit rl = { 0, 0 };
	getrlimit(RLIMIT_MEMLOCK, &rl);
	rdmalloc_log_once(RDMALLOC_LOG_WARN,
			  "ibv_reg_mr of a %zu-byte chunk failed: %s (RLIMIT_MEMLOCK %llu bytes); "
			  "jemalloc may retry with a smaller chunk, else the allocation fails "
			  "with ENOMEM (further failures are only counted)",
			  size, strerror(err), (unsigned long long)rl.rlim_cur);
}

struct rdmalloc_chunk *rdmalloc_chunk_create(struct rdmalloc_heap *heap, const struct rdmalloc_chunk_spec *spec,
					     size_t size, size_t alignment)
{
	size_t align = alignment > RDMALLOC_GRANULE ? alignment : RDMALLOC_GRANULE;
	if (!is_pow2(align) || size == 0 || size > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	int huge = (spec->flags & RDMA_HEAP_HUGEPAGES) != 0;
	/* What the limit counts: the mapping, which for huge pages is rounded
	 * up to whole 2 MiB pages (a 1 GiB-page chunk is recounted below). */
	size_t want = huge ? rdmalloc_huge_round(size, RDMALLOC_PAGES_2M) : size;
	if (want < size) {
		errno = ENOMEM;
		return NULL;
	}
	size_t limit = rdmalloc_opts.max_registered;
	rdmalloc_chunk_lock();
	if (limit && (want > limit || held_bytes > limit - want)) {
		rdmalloc_chunk_unlock();
		STAT_INC(limit_refusals);
		rdmalloc_log_once(RDMALLOC_LOG_WARN,
				  "RDMALLOC_MAX_REGISTERED (%zu bytes) refuses a %zu-byte chunk; jemalloc "
				  "may retry with a smaller chunk, else the allocation fails with ENOMEM "
				  "(further refusals are only counted)",
				  limit, size);
		errno = ENOMEM;
		return NULL;
	}
	struct rdmalloc_chunk *c = desc_alloc();
	if (c)
		held_bytes += want;
	rdmalloc_chunk_unlock();
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int err = ENOMEM;
	unsigned used = 0; /* PDs counted in pd_users for us */
	size_t map_size = size;
	int kind = RDMALLOC_PAGES_4K;
	void *p = huge ? rdmalloc_huge_map(size, align, &map_size, &kind) : rdmalloc_os_map_aligned(size, align, RDMALLOC_OS_PAGES);
	if (!p) {
		err = errno ? errno : ENOMEM;
		map_size = size;
		goto fail;
	}
	if (map_size != want) {
		rdmalloc_chunk_lock();
		held_bytes += map_size - want; /* wraps correctly when smaller */
		rdmalloc_chunk_unlock();
	}
	want = map_size;
	c->base = (uintptr_t)p;
	c->size = size;
	c->map_size = map_size;
	c->page_kind = kind;
	c->heap = heap;
	c->spec = spec;
	for (;;) {
		struct ibv_pd *want[RDMA_MALLOC_MAX_PDS];
		rdmalloc_chunk_lock();
		unsigned long gen = reg_gen;
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			want[s] = rdmalloc_pd_at(s);
			if (want[s] && !(used & (1u << s))) {
				used |= 1u << s;
				pd_users[s]++;
			}
		}
		rdmalloc_chunk_unlock();
		if ((err = rdmalloc_region_sync(c, want)) != 0) {
			log_reg_failure(size, err);
			goto fail;
		}
		rdmalloc_chunk_lock();
		if (gen != reg_gen) { /* a PD came or went meanwhile: again */
			rdmalloc_chunk_unlock();
			continue;
		}
		if ((err = rdmalloc_addrmap_insert(c)) != 0) {
			rdmalloc_chunk_unlock();
			goto fail;
		}
		c->next = all_chunks;
		if (all_chunks)
			all_chunks->prev = c;
		all_chunks = c;
		STAT_INC(chunks);
		STAT_ADD(chunk_bytes, map_size);
		rdmalloc_huge_count(kind, 1);
		pd_users_release(used);
		rdmalloc_chunk_unlock();
		return c;
	}
fail:
	if (rdmalloc_region_deregister_all(c) == 0) {
		if (p)
			rdmalloc_os_unmap(p, map_size);
	} else {
		/* A region of it is still registered: the NIC may write these
		 * pages, so they must never go back to the kernel. */
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) kept mapped: deregistration failed",
			     p, map_size);
	}
	rdmalloc_chunk_lock();
	held_bytes -= want;
	desc_free(c);
	pd_users_release(used);
	rdmalloc_chunk_unlock();
	errno = err;
	return NULL;
}

/* Unpublish, deregister, unmap.  No lock held; the caller owns @c. */
static void release(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	rdmalloc_addrmap_remove(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		all_chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	rdmalloc_chunk_unlock();
	int kept = rdmalloc_region_deregister_all(c) != 0 || atomic_load(&c->dereg_failed);
	if (kept) {
		/* The NIC may still map these pages: unmapping them would let
		 * the kernel hand them to someone else while a peer can write
		 * them.  Keep them (pinned) and say so. */
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) kept mapped: deregistration failed",
			     (void *)c->base, c->size);
	} else {
		rdmalloc_os_unmap((void *)c->base, c->map_size);
	}
	STAT_SUB(chunks, 1);
	STAT_SUB(chunk_bytes, c->map_size);
	rdmalloc_huge_count(c->page_kind, -1);
	rdmalloc_chunk_lock();
	held_bytes -= c->map_size;
	desc_free(c);
	rdmalloc_chunk_unlock();
}

void rdmalloc_chunk_destroyed(void *addr, size_t size)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(addr);
	if (!c || (uintptr_t)addr + size > c->base + c->size) {
		rdmalloc_chunk_unlock();
		rdmalloc_fatal("destroy hook for [%p, +%zu) that is not a chunk of ours", addr, size);
	}
	c->destroyed += size;
	int whole = c->destroyed == c->size;
	rdmalloc_chunk_unlock();
	if (whole)
		release(c);
}

size_t rdmalloc_chunk_release_heap(struct rdmalloc_heap *heap)
{
	size_t n = 0;
	for (;;) {
		rdmalloc_chunk_lock();
		struct rdmalloc_chunk *c = all_chunks;
		while (c && c->heap != heap)
			c = c->next;
		rdmalloc_chunk_unlock();
		if (!c)
			return n;
		release(c);
		n++;
	}
}

/* The next published chunk whose registration @i is (or, with @is 0, is
 * not) with @pd, or NULL.  Chunk lock held. */
static struct rdmalloc_chunk *next_registered(unsigned i, struct ibv_pd *pd, int is)
{
	struct rdmalloc_chunk *c = all_chunks;
	while (c && (atomic_load_explicit(&c->reg[i].pd, memory_order_relaxed) == pd) != is)
		c = c->next;
	return c;
}

/* Deregister every published chunk's registration @i with @pd: each is
 * unpublished under the chunk lock (held on entry and return) and
 * deregistered outside it.  The first errno of a failure. */
static int deregister_all_with(unsigned i, struct ibv_pd *pd)
{
	int first = 0;
	for (struct rdmalloc_chunk *c; (c = next_registered(i, pd, 1));) {
		struct ibv_mr *mr = rdmalloc_region_unpublish(c, i);
		rdmalloc_chunk_unlock();
		int err = rdmalloc_region_deregister(c, mr);
		if (err && !first)
			first = err;
		rdmalloc_chunk_lock();
	}
	return first;
}

int rdmalloc_chunks_attach(struct ibv_pd *pd)
{
	rdmalloc_chunk_lock();
	int s = -1;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++) {
		if (rdmalloc_pd_at(i) == pd) {
			rdmalloc_chunk_unlock();
			return EEXIST;
		}
		if (s < 0 && !rdmalloc_pd_at(i) && !(pds_filling & (1u << i)))
			s = (int)i;
	}
	if (s < 0) {
		rdmalloc_chunk_unlock();
		return ENOSPC;
	}
	pds_filling |= 1u << s;
	/* Register every published chunk; chunks published meanwhile are found
	 * by the next pass, and the PD goes live with the last pass. */
	for (;;) {
		struct rdmalloc_chunk *c = next_registered((unsigned)s, pd, 0);
		if (!c) {
			atomic_store_explicit(&pds[s], pd, memory_order_release);
			pds_filling &= ~(1u << s);
			reg_gen++;
			rdmalloc_chunk_unlock();
			return 0;
		}
		rdmalloc_chunk_unlock();
		int err = rdmalloc_region_register(c, (unsigned)s, pd);
		rdmalloc_chunk_lock();
		if (err) {
			deregister_all_with((unsigned)s, pd);
			pds_filling &= ~(1u << s);
			rdmalloc_chunk_unlock();
			return err;
		}
	}
}

int rdmalloc_chunks_detach(struct ibv_pd *pd)
{
	rdmalloc_chunk_lock();
	int s = -1;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS && s < 0; i++)
		if (rdmalloc_pd_at(i) == pd)
			s = (int)i;
	if (s < 0) {
		rdmalloc_chunk_unlock();
		return ENODEV;
	}
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next)
		if (c->reg[s].windows) {
			rdmalloc_chunk_unlock();
			return EBUSY;
		}
	atomic_store_explicit(&pds[s], NULL, memory_order_release);
	reg_gen++;
	/* Creators that saw the PD register again without it (reg_gen), and
	 * undo what they registered with it; then they let go of it. */
	while (pd_users[s])
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	int first = deregister_all_with((unsigned)s, pd);
	rdmalloc_chunk_unlock();
	return first;
}

int rdmalloc_chunks_have_windows(const struct rdmalloc_heap *heap)
{
	int busy = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = all_chunks; c && !busy; c = c->next)
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS && c->heap == heap; s++)
			busy |= c->reg[s].windows != 0;
	rdmalloc_chunk_unlock();
	return busy;
}

size_t rdmalloc_chunks_count_regs(const struct rdmalloc_heap *heap)
{
	size_t n = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next)
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS && c->heap == heap; s++)
			n += atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed) != NULL;
	rdmalloc_chunk_unlock();
	return n;
}

void rdmalloc_chunks_bump_gen(void)
{
	rdmalloc_chunk_lock();
	reg_gen++;
	rdmalloc_chunk_unlock();
}

/* A published registration of @heap still to be changed, or NULL.  Chunk
 * lock held. */
static struct rdmalloc_chunk *next_to_rereg(struct rdmalloc_heap *heap, unsigned access, int new_keys,
					    unsigned stamp, unsigned *index)
{
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next) {
		if (c->heap != heap)
			continue;
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			struct rdmalloc_reg *r = &c->reg[s];
			if (!atomic_load_explicit(&r->pd, memory_order_relaxed))
				continue;
			if (r->access != access || (new_keys && r->stamp != stamp)) {
				*index = s;
				return c;
			}
		}
	}
	return NULL;
}

/* Change registration @i of @c and report a change of keys.  No lock
 * held; the PD lock keeps the chunk and its registrations alive and ours. */
static int rereg_one(struct rdmalloc_chunk *c, unsigned i, unsigned access, int new_keys, unsigned stamp,
		     rdma_heap_key_change_fn cb, void *ctx, unsigned long *changed)
{
	uint64_t old, now;
	int err = rdmalloc_region_change_access(c, i, access, new_keys, stamp, &old, &now);
	if (err)
		return err;
	if (now != old) {
		STAT_INC(key_changes);
		(*changed)++;
		if (cb)
			cb(ctx, atomic_load_explicit(&c->reg[i].pd, memory_order_relaxed), (void *)c->base,
			   c->map_size, rdmalloc_keys_lkey(old), rdmalloc_keys_rkey(old), rdmalloc_keys_lkey(now),
			   rdmalloc_keys_rkey(now));
	}
	return 0;
}

int rdmalloc_chunks_rereg(struct rdmalloc_heap *heap, unsigned access, int new_keys, unsigned stamp,
			  rdma_heap_key_change_fn cb, void *ctx, unsigned long *changed)
{
	for (;;) {
		unsigned s = 0;
		rdmalloc_chunk_lock();
		struct rdmalloc_chunk *c = next_to_rereg(heap, access, new_keys, stamp, &s);
		rdmalloc_chunk_unlock();
		if (!c)
			return 0;
		int err = rereg_one(c, s, access, new_keys, stamp, cb, ctx, changed);
		if (err)
			return err;
	}
}

void rdmalloc_chunks_forget_registrations(void)
{
	/* In a fork child (single-threaded): the regions belong to the parent.
	 * Deregistering them through the inherited verbs context would take
	 * them from the parent, so they are only forgotten. */
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		atomic_store_explicit(&pds[s], NULL, memory_order_relaxed);
	pds_filling = 0;
	reg_gen++;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		pd_users[s] = 0;
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next)
		for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++)
			rdmalloc_region_forget(c, i);
	rdmalloc_implicit_forget();
}
