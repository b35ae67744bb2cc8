/* SPDX-License-Identifier: MIT */
/*
 * chunk.c - chunks: map memory for a heap, register it with every attached
 * PD, publish it in the address table; and the reverse.  Also the set of
 * attached PDs, which is what registration follows.
 *
 * Chunks are created only from the alloc extent hook and released only when
 * their heap is destroyed: while a chunk is registered it is never purged,
 * decommitted or unmapped (see hooks.c).
 *
 * Locking (doc/design.md, "Locks and fork"): the CHUNK lock is a leaf.  It
 * guards the chunk list, the table writers, the descriptor pool, the PD
 * slots and their generation, and is never held across a verbs call, an
 * allocation or another lock.  Registration happens outside it: a new chunk
 * registers with a snapshot of the PD slots and publishes only if the slots
 * did not change meanwhile (pd_gen), else it registers again.  Each slot
 * counts the creators whose snapshot holds it (slot_users): detach waits
 * for them, so that no creator still uses a PD once its detach returned.
 * Attach and detach are serialised by the caller (the PD lock).
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
#include "verbs.h"

static struct rdmalloc_chunk *all_chunks; /* published chunks */
static struct rdmalloc_chunk *free_descs; /* recycled descriptors */
static size_t held_bytes;                 /* chunks held or being made, for RDMALLOC_MAX_REGISTERED */
static _Atomic(struct ibv_pd *) slots[RDMA_MALLOC_MAX_PDS];
static unsigned reserved;                 /* slots an attach is filling */
static unsigned long pd_gen;              /* bumped whenever slots (or a heap's access) change */
static unsigned slot_users[RDMA_MALLOC_MAX_PDS]; /* creators that may register with slot s's PD */
_Atomic unsigned rdmalloc_rereg_stamp;

void rdmalloc_chunk_lock(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_CHUNK);
}

void rdmalloc_chunk_unlock(void)
{
	rdmalloc_unlock(RDMALLOC_LOCK_CHUNK);
}

struct ibv_pd *rdmalloc_pd_slot(unsigned s)
{
	return atomic_load_explicit(&slots[s], memory_order_acquire);
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

/* A change of the PD a registration belongs to (its writers are
 * serialised) is bracketed by its sequence, odd meanwhile: a lock-free
 * reader never pairs a PD with cleared keys or another PD's (keys.c).  The
 * stores in between are releases, so a reader that acquires one of them
 * sees the odd sequence after it (no fence: TSan has none). */
static void reg_change_begin(struct rdmalloc_reg *r)
{
	unsigned q = atomic_load_explicit(&r->seq, memory_order_relaxed);
	atomic_store_explicit(&r->seq, q + 1, memory_order_relaxed);
}

static void reg_change_end(struct rdmalloc_reg *r)
{
	unsigned q = atomic_load_explicit(&r->seq, memory_order_relaxed);
	atomic_store_explicit(&r->seq, q + 1, memory_order_release);
}

static void reg_clear(struct rdmalloc_reg *r)
{
	reg_change_begin(r);
	atomic_store_explicit(&r->pd, NULL, memory_order_release);
	atomic_store_explicit(&r->mr, NULL, memory_order_release);
	atomic_store_explicit(&r->keys, 0, memory_order_release);
	reg_change_end(r);
}

/* Chunks of implicit ODP heaps have no region of their own: they use their
 * PD's shared one (odp.c). */
static int implicit_odp(const struct rdmalloc_chunk *c)
{
	return (c->spec->flags & RDMA_HEAP_ODP_IMPLICIT) != 0;
}

/* A region for @c on @pd with @access: its own, or the shared implicit
 * one.  NULL with errno. */
static struct ibv_mr *chunk_reg(struct rdmalloc_chunk *c, struct ibv_pd *pd, unsigned access)
{
	if (implicit_odp(c))
		return rdmalloc_implicit_get(pd, access);
	return rdmalloc_reg_mr(pd, (void *)c->base, c->map_size, access);
}

/* Deregister @mr, a region of @c (or give back the shared one).  A failure
 * leaves the region registered: the chunk is marked so that it is never
 * unmapped (release()). */
static int chunk_dereg(struct rdmalloc_chunk *c, struct ibv_mr *mr)
{
	int err = !mr ? 0 : implicit_odp(c) ? rdmalloc_implicit_put(mr) : rdmalloc_dereg_mr(mr);
	if (err)
		atomic_store(&c->dereg_failed, 1);
	return err;
}

/* Publish @mr (registered with @access under re-registration @stamp) in
 * @r: its keys, released last for lock-free readers. */
static void slot_publish(struct rdmalloc_reg *r, struct ibv_mr *mr, unsigned access, unsigned stamp)
{
	unsigned lkey, rkey;
	rdmalloc_mr_keys(mr, &lkey, &rkey);
	r->access = access;
	r->stamp = stamp;
	atomic_store_explicit(&r->mr, mr, memory_order_release);
	atomic_store_explicit(&r->keys, (uint64_t)lkey << 32 | rkey, memory_order_release);
}

/* Register chunk @c in slot @slot.  No lock held: nobody else writes this
 * slot of this chunk meanwhile (creation owns an unpublished chunk; attach
 * and detach are serialised). */
static int reg_slot(struct rdmalloc_chunk *c, unsigned slot, struct ibv_pd *pd)
{
	unsigned stamp = atomic_load_explicit(&rdmalloc_rereg_stamp, memory_order_acquire);
	unsigned access = rdmalloc_spec_access(c->spec);
	struct ibv_mr *mr = chunk_reg(c, pd, access);
	if (!mr)
		return errno ? errno : ENOMEM;
	struct rdmalloc_reg *r = &c->reg[slot];
	reg_change_begin(r);
	slot_publish(r, mr, access, stamp);
	atomic_store_explicit(&r->pd, pd, memory_order_release);
	reg_change_end(r);
	return 0;
}

/* Deregister slot @slot of @c (same rules as reg_slot). */
static int dereg_slot(struct rdmalloc_chunk *c, unsigned slot)
{
	struct rdmalloc_reg *r = &c->reg[slot];
	struct ibv_mr *mr = atomic_load_explicit(&r->mr, memory_order_relaxed);
	reg_clear(r);
	return chunk_dereg(c, mr);
}

static int dereg_all(struct rdmalloc_chunk *c)
{
	int first = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		int err = dereg_slot(c, s);
		if (err && !first)
			first = err;
	}
	return first;
}

/* Make @c's registrations match @want, the PD of each slot. */
static int sync_regs(struct rdmalloc_chunk *c, struct ibv_pd *const want[RDMA_MALLOC_MAX_PDS])
{
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		struct ibv_pd *have = atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed);
		if (have == want[s] && (!have || c->reg[s].access == rdmalloc_spec_access(c->spec)))
			continue;
		if (have)
			dereg_slot(c, s);
		if (want[s]) {
			int err = reg_slot(c, s, want[s]);
			if (err)
				return err;
		}
	}
	return 0;
}

/* A creator is done with the slots in @used: wake a detach waiting for
 * them.  Chunk lock held. */
static void slots_release(unsigned used)
{
	int woke = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if ((used & (1u << s)) && --slot_users[s] == 0)
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
	unsigned used = 0; /* slots counted in slot_users for us */
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
		unsigned long gen = pd_gen;
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			want[s] = rdmalloc_pd_slot(s);
			if (want[s] && !(used & (1u << s))) {
				used |= 1u << s;
				slot_users[s]++;
			}
		}
		rdmalloc_chunk_unlock();
		if ((err = sync_regs(c, want)) != 0) {
			log_reg_failure(size, err);
			goto fail;
		}
		rdmalloc_chunk_lock();
		if (gen != pd_gen) { /* a PD came or went meanwhile: again */
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
		slots_release(used);
		rdmalloc_chunk_unlock();
		return c;
	}
fail:
	if (dereg_all(c) == 0) {
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
	slots_release(used);
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
	int kept = dereg_all(c) != 0 || atomic_load(&c->dereg_failed);
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

/* The next published chunk whose slot @s is not @pd, or NULL. */
static struct rdmalloc_chunk *next_without(unsigned s, struct ibv_pd *pd)
{
	struct rdmalloc_chunk *c = all_chunks;
	while (c && atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed) != pd)
		c = c->next;
	return c;
}

static struct rdmalloc_chunk *next_lacking(unsigned s, struct ibv_pd *pd)
{
	struct rdmalloc_chunk *c = all_chunks;
	while (c && atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed) == pd)
		c = c->next;
	return c;
}

int rdmalloc_chunks_attach(struct ibv_pd *pd)
{
	rdmalloc_chunk_lock();
	int s = -1;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++) {
		if (rdmalloc_pd_slot(i) == pd) {
			rdmalloc_chunk_unlock();
			return EEXIST;
		}
		if (s < 0 && !rdmalloc_pd_slot(i) && !(reserved & (1u << i)))
			s = (int)i;
	}
	if (s < 0) {
		rdmalloc_chunk_unlock();
		return ENOSPC;
	}
	reserved |= 1u << s;
	/* Register every published chunk; chunks published meanwhile are found
	 * by the next pass, and the slot goes live with the last pass. */
	for (;;) {
		struct rdmalloc_chunk *c = next_lacking((unsigned)s, pd);
		if (!c) {
			atomic_store_explicit(&slots[s], pd, memory_order_release);
			reserved &= ~(1u << s);
			pd_gen++;
			rdmalloc_chunk_unlock();
			return 0;
		}
		rdmalloc_chunk_unlock();
		int err = reg_slot(c, (unsigned)s, pd);
		rdmalloc_chunk_lock();
		if (err) {
			for (struct rdmalloc_chunk *d; (d = next_without((unsigned)s, pd));) {
				struct ibv_mr *mr = atomic_load_explicit(&d->reg[s].mr, memory_order_relaxed);
				reg_clear(&d->reg[s]);
				rdmalloc_chunk_unlock();
				chunk_dereg(d, mr);
				rdmalloc_chunk_lock();
			}
			reserved &= ~(1u << s);
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
		if (rdmalloc_pd_slot(i) == pd)
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
	atomic_store_explicit(&slots[s], NULL, memory_order_release);
	pd_gen++;
	/* Creators that saw the slot register again without it (pd_gen), and
	 * undo what they registered with it; then they let go of it. */
	while (slot_users[s])
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	int first = 0;
	for (struct rdmalloc_chunk *c; (c = next_without((unsigned)s, pd));) {
		struct ibv_mr *mr = atomic_load_explicit(&c->reg[s].mr, memory_order_relaxed);
		reg_clear(&c->reg[s]);
		rdmalloc_chunk_unlock();
		int err = chunk_dereg(c, mr);
		if (err && !first)
			first = err;
		rdmalloc_chunk_lock();
	}
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
	pd_gen++;
	rdmalloc_chunk_unlock();
}

/* A published registration of @heap still to be changed, or NULL.  Chunk
 * lock held. */
static struct rdmalloc_chunk *next_to_rereg(struct rdmalloc_heap *heap, unsigned access, int new_keys,
					    unsigned stamp, unsigned *slot)
{
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next) {
		if (c->heap != heap)
			continue;
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			struct rdmalloc_reg *r = &c->reg[s];
			if (!atomic_load_explicit(&r->pd, memory_order_relaxed))
				continue;
			if (r->access != access || (new_keys && r->stamp != stamp)) {
				*slot = s;
				return c;
			}
		}
	}
	return NULL;
}

/* Change one registration.  No lock held; the PD lock keeps the chunk and
 * its slots alive and ours. */
static int rereg_one(struct rdmalloc_chunk *c, unsigned s, unsigned access, int new_keys, unsigned stamp,
		     rdma_heap_key_change_fn cb, void *ctx, unsigned long *changed)
{
	struct rdmalloc_reg *r = &c->reg[s];
	struct ibv_pd *pd = atomic_load_explicit(&r->pd, memory_order_relaxed);
	struct ibv_mr *old = atomic_load_explicit(&r->mr, memory_order_relaxed);
	uint64_t okeys = atomic_load_explicit(&r->keys, memory_order_relaxed);
	unsigned ol = rdmalloc_keys_lkey(okeys), ok = rdmalloc_keys_rkey(okeys);
	unsigned nl, nk;
	int broken = 0;
	if (!new_keys && !implicit_odp(c)) { /* never change a shared region in place */
		int err = rdmalloc_rereg_access(old, access, &broken);
		if (!err) {
			slot_publish(r, old, access, stamp);
			goto report;
		}
		rdmalloc_log_once(RDMALLOC_LOG_INFO, "ibv_rereg_mr with IBV_REREG_MR_CHANGE_ACCESS refused (%s): "
				  "regions are replaced instead (new keys)", strerror(err));
	}
	/* Register anew, publish the new keys, only then deregister the old
	 * region: the table never holds a key that is already gone. */
	struct ibv_mr *mr = chunk_reg(c, pd, access);
	if (!mr) {
		int err = errno ? errno : ENOMEM;
		if (broken)
			rdmalloc_log(RDMALLOC_LOG_ERROR, "a region of chunk %p is unusable after a failed "
				     "ibv_rereg_mr and could not be replaced: %s", (void *)c->base, strerror(err));
		return err;
	}
	slot_publish(r, mr, access, stamp);
	STAT_INC(rereg_replaced);
	chunk_dereg(c, old); /* a failure keeps the chunk mapped */
report:
	rdmalloc_mr_keys(atomic_load_explicit(&r->mr, memory_order_relaxed), &nl, &nk);
	if (nl != ol || nk != ok) {
		STAT_INC(key_changes);
		(*changed)++;
		if (cb)
			cb(ctx, pd, (void *)c->base, c->map_size, ol, ok, nl, nk);
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
		atomic_store_explicit(&slots[s], NULL, memory_order_relaxed);
	reserved = 0;
	pd_gen++;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		slot_users[s] = 0;
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next)
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			reg_clear(&c->reg[s]);
			c->reg[s].windows = 0;
		}
	rdmalloc_implicit_forget();
	atomic_store_explicit(&rdmalloc_counters.mrs, 0, memory_order_relaxed);
	atomic_store_explicit(&rdmalloc_counters.registered_bytes, 0, memory_order_relaxed);
}
