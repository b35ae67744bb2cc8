/* SPDX-License-Identifier: MIT */
/*
 * chunk.c - the chunk set: the descriptor pool, the list of published
 * chunks, the PD table (PD i is registration reg[i] of every chunk);
 * creating and releasing a chunk (map, register with every attached PD,
 * publish in the address map; and the reverse); and the walks that attach,
 * detach and re-register every chunk.  One registration is region.c's job.
 *
 * Chunks are created from the alloc extent hook, or ahead of it for a
 * heap's reserve (reserve.c: RESERVED until the hook takes it, see
 * take_reserved), and released only when their heap is destroyed (or, a
 * reserve, when dropped).  In between, a chunk jemalloc has decommitted
 * entirely is idle: it may be given back (deregistered from every PD, its
 * pages returned, the range kept for jemalloc) and taken back by a later
 * commit (registered anew).  A registered page is never purged, decommitted
 * or unmapped (see hooks.c): only after its chunk's deregistration.
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
 * PD lock).  A chunk taken back registers the same way; one given back
 * counts the PDs it deregisters from in pd_users too.  The walks (attach,
 * detach, access changes) see only LIVE chunks and mark the one they work
 * on busy, which keeps it from being given back meanwhile.
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
#include "reserve.h"
#include "tls.h"

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

/* The PDs (indexes) @c is registered with.  Its owner's, or chunk lock. */
static unsigned registered_pds(const struct rdmalloc_chunk *c)
{
	unsigned pds_of = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if (atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed))
			pds_of |= 1u << s;
	return pds_of;
}

/* Count the PDs @c is registered with in pd_users, for a caller that will
 * deregister or hand over @c (a detach waits for them): the mask to give
 * pd_users_release().  Chunk lock held. */
static unsigned pd_users_claim(const struct rdmalloc_chunk *c)
{
	unsigned used = registered_pds(c);
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		pd_users[s] += (used >> s) & 1;
	return used;
}

/* @c enters (@delta 1) or leaves (-1) the stats of chunks held; held_bytes
 * is hold()'s.  Chunk lock held. */
static void count_held(const struct rdmalloc_chunk *c, int delta)
{
	if (delta > 0) {
		STAT_INC(chunks);
		STAT_ADD(chunk_bytes, c->map_size);
	} else {
		STAT_SUB(chunks, 1);
		STAT_SUB(chunk_bytes, c->map_size);
	}
	rdmalloc_huge_count(c->page_kind, delta);
}

struct rdmalloc_chunk *rdmalloc_chunk_owning(const void *p)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_entry(p);
	return c && (uintptr_t)p - c->base < c->size ? c : NULL;
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

/* May @want more bytes be held under RDMALLOC_MAX_REGISTERED?  Counted in
 * held_bytes if so.  Chunk lock held. */
static int hold(size_t want)
{
	size_t limit = rdmalloc_opts.max_registered;
	if (limit && (want > limit || held_bytes > limit - want))
		return 0;
	held_bytes += want;
	return 1;
}

static void log_limit(size_t size)
{
	rdmalloc_tl_pressure = 1;
	STAT_INC(limit_refusals);
	rdmalloc_log_once(RDMALLOC_LOG_WARN,
			  "RDMALLOC_MAX_REGISTERED (%zu bytes) refuses a %zu-byte chunk, after idle chunks "
			  "were given back; jemalloc may retry with a smaller chunk, else the allocation fails "
			  "with ENOMEM (further refusals are only counted)",
			  rdmalloc_opts.max_registered, size);
}

static size_t give_back_idle(const struct rdmalloc_heap *heap, int keep);

/*
 * Register @c with every attached PD under its heap's access now, again
 * until the PD table and the access held still meanwhile (reg_gen).  0
 * with the chunk lock held, so that the caller publishes before they can
 * change again; else an errno value, without the lock.  *@used collects
 * the PDs counted in pd_users for the caller (it releases them).
 */
static int register_steady(struct rdmalloc_chunk *c, unsigned *used)
{
	for (;;) {
		struct ibv_pd *want[RDMA_MALLOC_MAX_PDS];
		rdmalloc_chunk_lock();
		unsigned long gen = reg_gen;
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			want[s] = rdmalloc_pd_at(s);
			if (want[s] && !(*used & (1u << s))) {
				*used |= 1u << s;
				pd_users[s]++;
			}
		}
		rdmalloc_chunk_unlock();
		int err = rdmalloc_region_sync(c, want);
		if (err)
			return err;
		rdmalloc_chunk_lock();
		if (gen == reg_gen)
			return 0;
		rdmalloc_chunk_unlock(); /* a PD came or went meanwhile: again */
	}
}

/* Registration failures that giving idle chunks back may cure; the
 * thread remembers (tls.h). */
static int pressure(int err)
{
	int p = err == ENOMEM || err == EAGAIN;
	if (p)
		rdmalloc_tl_pressure = 1;
	return p;
}

/* Deregister @c from every PD, then unmap its @len bytes at @p (NULL: not
 * mapped) -- unless a region of it stays registered, now or from an
 * earlier failure (dereg_failed: a detach walk): the NIC may still write
 * those pages, so they must never go back to the kernel.  They stay
 * mapped (pinned), and the log says so.  No lock held. */
static void deregister_unmap(struct rdmalloc_chunk *c, void *p, size_t len)
{
	if (rdmalloc_region_deregister_all(c) == 0 && !atomic_load(&c->dereg_failed)) {
		if (p)
			rdmalloc_os_unmap(p, len);
	} else {
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) kept mapped: deregistration failed", p,
			     len);
	}
}

/* Give memory back under pressure: the reserves first (they are nobody's
 * yet), then idle chunks.  Non-zero when something went.  No lock held. */
static size_t relieve(void)
{
	size_t bytes = rdmalloc_reserves_drop(1);
	return bytes + give_back_idle(NULL, 0);
}

/* Take @c out of the chunk list.  Chunk lock held. */
static void unlink_chunk(struct rdmalloc_chunk *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		all_chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

/* Put @c at the head of the chunk list.  Chunk lock held. */
static void link_chunk(struct rdmalloc_chunk *c)
{
	c->prev = NULL;
	c->next = all_chunks;
	if (all_chunks)
		all_chunks->prev = c;
	all_chunks = c;
}

/*
 * Map @size bytes aligned to @align (a power of two, at least the granule)
 * for @heap and register them with every attached PD: the chunk,
 * unpublished, with the chunk lock held (*@used: the PDs counted in
 * pd_users for the caller), or NULL with errno set and no lock.  An
 * allocation (@for_r NULL) under memory pressure gives memory back and
 * tries once more (relieve()); a reserve fill (@for_r) never does, and
 * keeps for_r->fill_held equal to the bytes it holds meanwhile.
 */
static struct rdmalloc_chunk *make(struct rdmalloc_heap *heap, struct rdmalloc_chunk_spec *spec, size_t size,
				   size_t align, struct rdmalloc_reserve *for_r, unsigned *used)
{
	int huge = (spec->flags & RDMA_HEAP_HUGEPAGES) != 0;
	/* What the limit counts: the mapping, which for huge pages is rounded
	 * up to whole 2 MiB pages (a 1 GiB-page chunk is recounted below). */
	size_t want = huge ? rdmalloc_huge_round(size, RDMALLOC_PAGES_2M) : size;
	if (want < size) {
		errno = ENOMEM;
		return NULL;
	}
	rdmalloc_chunk_lock();
	int held = hold(want);
	rdmalloc_chunk_unlock();
	if (!held && !for_r) { /* memory pressure: reserves and idle chunks go first, then once more */
		relieve();
		rdmalloc_chunk_lock();
		held = hold(want);
		rdmalloc_chunk_unlock();
		if (!held)
			log_limit(size);
	}
	if (!held) {
		errno = ENOMEM;
		return NULL;
	}
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = desc_alloc();
	if (!c)
		held_bytes -= want;
	else if (for_r)
		for_r->fill_held = want;
	rdmalloc_chunk_unlock();
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int err = ENOMEM;
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
		if (for_r)
			for_r->fill_held = map_size;
		rdmalloc_chunk_unlock();
	}
	want = map_size;
	c->base = (uintptr_t)p;
	c->size = size;
	c->map_size = map_size;
	c->page_kind = kind;
	c->heap = heap;
	c->spec = spec;
	err = register_steady(c, used);
	if (err && !for_r && pressure(err) && relieve())
		err = register_steady(c, used); /* memory went back: once more */
	if (err) {
		if (!for_r)
			log_reg_failure(size, err);
		goto fail;
	}
	return c;
fail:
	deregister_unmap(c, p, map_size);
	rdmalloc_chunk_lock();
	held_bytes -= want;
	if (for_r)
		for_r->fill_held = 0;
	desc_free(c);
	pd_users_release(*used);
	*used = 0;
	rdmalloc_chunk_unlock();
	errno = err;
	return NULL;
}

/* Undo make() of @c, which is in no list (no lock held): deregister,
 * unmap, un-hold (and out of the stats of chunks held when @counted), and
 * let go of the PDs in @used. */
static void unmake(struct rdmalloc_chunk *c, unsigned used, int counted)
{
	deregister_unmap(c, (void *)c->base, c->map_size);
	rdmalloc_chunk_lock();
	held_bytes -= c->map_size;
	if (counted)
		count_held(c, -1);
	desc_free(c);
	pd_users_release(used);
	rdmalloc_chunk_unlock();
}

/* @c, its spec's ready reserve chunk, is one no more (taken, dropped or
 * released): out of the reserve stats.  Chunk lock held. */
static void unpark(struct rdmalloc_chunk *c)
{
	c->spec->reserve.ready = NULL;
	STAT_SUB(reserve_bytes, c->map_size);
	STAT_SUB(reserve_chunks, 1);
}

/* Whether @c's registrations are those a chunk made now would get: the PD
 * table's, under its heap's access.  Chunk lock held. */
static int in_step(const struct rdmalloc_chunk *c)
{
	unsigned access = rdmalloc_spec_access(c->spec);
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		struct ibv_pd *pd = rdmalloc_pd_at(s);
		if (atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed) != pd ||
		    (pd && c->reg[s].access != access))
			return 0;
	}
	return 1;
}

/*
 * Claim @spec's ready reserve chunk if it is exactly @size bytes, aligned
 * to @align, and no walk works on it: out of the list, the PDs it is
 * registered with counted in pd_users for the caller (*@used), which then
 * owns it as a creator owns a chunk it made (a detach waits for it).
 * *@resync: its registrations must change first.  NULL when there is none
 * that fits: the thread replaces a mispredicted one (reserve.c).  When the
 * thread is making exactly this chunk, growth outran it: waiting for the
 * rest of that registration beats starting one of our own
 * (reserve_waits).  The thread needs no lock of jemalloc's, and a fork
 * child has none to wait for (reserves_forget).
 */
static struct rdmalloc_chunk *take_reserved(struct rdmalloc_chunk_spec *spec, size_t size, size_t align,
					    unsigned *used, int *resync)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_reserve *r = &spec->reserve;
	if (!r->ready && r->filling == size && !r->closed && !r->cancelled) {
		/* That fill only: once it ends (another arena may have taken
		 * its chunk, and the thread started the next), or once it is
		 * cancelled, this growth registers its own. */
		unsigned seq = r->fill_seq;
		STAT_INC(reserve_waits);
		while (!r->ready && r->filling && r->fill_seq == seq && !r->cancelled)
			rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	}
	struct rdmalloc_chunk *c = spec->reserve.ready;
	if (!c || c->size != size || (c->base & (align - 1)) || c->busy) {
		rdmalloc_chunk_unlock();
		return NULL;
	}
	unpark(c);
	unlink_chunk(c);
	*used = pd_users_claim(c);
	*resync = !in_step(c);
	rdmalloc_chunk_unlock();
	return c;
}

struct rdmalloc_chunk *rdmalloc_chunk_create(struct rdmalloc_heap *heap, struct rdmalloc_chunk_spec *spec,
					     size_t size, size_t alignment, int committed)
{
	size_t align = alignment > RDMALLOC_GRANULE ? alignment : RDMALLOC_GRANULE;
	if (!is_pow2(align) || size == 0 || size > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	unsigned used = 0; /* PDs counted in pd_users for us */
	int resync = 0;
	struct rdmalloc_chunk *c = take_reserved(spec, size, align, &used, &resync);
	if (c) {
		/* A PD or the access may have changed since it was made: in
		 * step (no verbs call when nothing did), as a new chunk is. */
		int err = register_steady(c, &used);
		if (err) {
			STAT_INC(reserve_discards);
			rdmalloc_log_once(RDMALLOC_LOG_WARN, "a reserve chunk could not be registered anew at "
					  "hand-over (%s): released, the chunk is made inline (further ones "
					  "are only counted in reserve_discards)", strerror(err));
			unmake(c, used, 1);
			used = 0;
			c = NULL;
		}
	}
	int inline_made = !c;
	if (!c && !(c = make(heap, spec, size, align, NULL, &used)))
		return NULL;
	int err = rdmalloc_addrmap_insert(c);
	if (err) {
		rdmalloc_chunk_unlock();
		unmake(c, used, !inline_made);
		errno = err;
		return NULL;
	}
	link_chunk(c);
	c->state = RDMALLOC_CHUNK_LIVE;
	c->committed = committed ? size : 0;
	c->fresh = !committed;
	atomic_store_explicit(&c->live_size, size, memory_order_release);
	if (inline_made) {
		count_held(c, 1); /* a reserve chunk is counted from when it is made */
		STAT_INC(inline_chunks);
	} else {
		STAT_INC(reserve_hits);
		if (resync)
			STAT_INC(reserve_resyncs);
	}
	rdmalloc_reserve_grown(spec, heap, size);
	pd_users_release(used);
	rdmalloc_chunk_unlock();
	return c;
}

int rdmalloc_chunk_fill_reserve(struct rdmalloc_reserve *r, size_t size)
{
	unsigned used = 0;
	struct rdmalloc_chunk *c = make(r->heap, r->spec, size, RDMALLOC_GRANULE, r, &used);
	if (!c)
		return errno ? errno : ENOMEM;
	r->fill_held = 0; /* the chunk's own from here */
	if (r->closed || r->cancelled || r->ready || r->next != size) {
		/* Closed, dropped, or a growth meanwhile predicted another size. */
		rdmalloc_chunk_unlock();
		unmake(c, used, 0);
		STAT_INC(reserve_discards);
		return 0;
	}
	c->state = RDMALLOC_CHUNK_RESERVED;
	link_chunk(c);
	r->ready = c;
	count_held(c, 1); /* held, under the limit too: a chunk like any other */
	STAT_ADD(reserve_bytes, c->map_size);
	STAT_INC(reserve_chunks);
	pd_users_release(used);
	rdmalloc_chunk_unlock();
	return 0;
}

size_t rdmalloc_chunk_drop_reserve(struct rdmalloc_reserve *r)
{
	rdmalloc_chunk_lock();
	while (r->ready && r->ready->busy) /* an attach or a detach works on it */
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	struct rdmalloc_chunk *c = r->ready;
	if (!c) {
		rdmalloc_chunk_unlock();
		return 0;
	}
	unpark(c);
	unlink_chunk(c);
	STAT_INC(reserve_discards);
	unsigned used = pd_users_claim(c); /* as a give-back does */
	size_t bytes = c->map_size;
	rdmalloc_chunk_unlock();
	unmake(c, used, 1);
	return bytes;
}

/* Unpublish, deregister, unmap.  No lock held; the caller owns @c (its
 * heap is being destroyed: no hook or walk runs on it). */
static void release(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	/* Memory pressure on another heap may be giving it back: let it
	 * finish; from now on nobody else chooses it. */
	while (c->state == RDMALLOC_CHUNK_GIVING || c->state == RDMALLOC_CHUNK_TAKING)
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	int held = c->state != RDMALLOC_CHUNK_GONE;
	int reserved = c->state == RDMALLOC_CHUNK_RESERVED; /* not published, not in the chunk stats */
	if (reserved) {
		unpark(c);
		STAT_INC(reserve_discards);
	}
	c->state = RDMALLOC_CHUNK_RELEASING;
	atomic_store_explicit(&c->live_size, 0, memory_order_release);
	if (!reserved)
		rdmalloc_addrmap_remove(c);
	unlink_chunk(c);
	rdmalloc_chunk_unlock();
	deregister_unmap(c, (void *)c->base, c->map_size);
	rdmalloc_chunk_lock();
	if (held) {
		count_held(c, -1);
		held_bytes -= c->map_size;
	}
	desc_free(c);
	rdmalloc_chunk_unlock();
}

/* Idle: registered, not a byte committed, nothing on it. */
static int idle(const struct rdmalloc_chunk *c)
{
	return c->state == RDMALLOC_CHUNK_LIVE && c->spec->gives_back && c->committed == 0 && !c->busy &&
	       !c->pins && !c->fresh;
}

/* Mark @c to be given back and chain it on *@batch; count the PDs it is
 * registered with in pd_users (a detach waits for them).  Chunk lock held. */
static void mark_giving(struct rdmalloc_chunk *c, struct rdmalloc_chunk **batch)
{
	c->state = RDMALLOC_CHUNK_GIVING;
	atomic_store_explicit(&c->live_size, 0, memory_order_release); /* lookups: ENOENT from now */
	pd_users_claim(c);
	c->giving_next = *batch;
	*batch = c;
}

/*
 * Choose the idle chunks to give back, of @heap (NULL: every heap): all of
 * them but, with @keep, the smallest of each heap, which stays registered so
 * that a heap that grows and shrinks around one chunk does not register and
 * deregister it each time.  Chunk lock held; returns the batch.
 */
static struct rdmalloc_chunk *choose_idle(const struct rdmalloc_heap *heap, int keep)
{
	struct rdmalloc_chunk *batch = NULL, *kept = NULL;
	if (keep && heap) {
		for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next)
			if (c->heap == heap && idle(c) && (!kept || c->map_size < kept->map_size))
				kept = c;
	}
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next)
		if ((!heap || c->heap == heap) && c != kept && idle(c))
			mark_giving(c, &batch);
	return batch;
}

/* Give back @c, marked GIVING: its keys were unpublished by mark_giving;
 * deregister, return its pages.  No lock held.  Its bytes, or 0 when it
 * had to be quarantined. */
static size_t give_back(struct rdmalloc_chunk *c)
{
	unsigned used = registered_pds(c); /* what mark_giving counted */
	int failed = rdmalloc_region_deregister_all(c) != 0; /* dereg_failed stays: never unmapped */
	/* Even when a deregistration failed: the region keeps its pages
	 * pinned, but they leave the process, which gets fresh ones here, so
	 * the old key reaches nothing of ours any more. */
	int err = rdmalloc_os_dontneed((void *)c->base, c->map_size);
	int quarantine = failed && err;
	if (quarantine)
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) quarantined: a deregistration failed "
			     "and its pages could not be cut off (%s); never used again",
			     (void *)c->base, c->map_size, strerror(err));
	else if (failed)
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes): a deregistration failed while giving it "
			     "back; its old pages stay pinned, cut off from the process", (void *)c->base, c->map_size);
	else if (err) /* still ours: its old bytes are zeroed when committed */
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "madvise(MADV_DONTNEED) of a given-back chunk: %s",
				  strerror(err));
	rdmalloc_chunk_lock();
	if (quarantine) {
		/* A region may still be valid and map these very pages: a
		 * peer's old rkey would reach whatever jemalloc put there.
		 * Counted as held, never committed again. */
		c->state = RDMALLOC_CHUNK_QUARANTINED;
	} else {
		c->state = RDMALLOC_CHUNK_GONE;
		c->stale = err != 0;
		held_bytes -= c->map_size;
		count_held(c, -1);
		STAT_INC(chunks_given_back);
		STAT_ADD(bytes_given_back, c->map_size);
		/* Its keys are gone: a program that cached them can tell. */
		atomic_fetch_add_explicit(&c->spec->key_gen, 1, memory_order_release);
	}
	pd_users_release(used);
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* a commit may wait for it */
	rdmalloc_chunk_unlock();
	return quarantine ? 0 : c->map_size;
}

static size_t give_back_batch(struct rdmalloc_chunk *batch)
{
	size_t bytes = 0;
	while (batch) {
		struct rdmalloc_chunk *c = batch;
		batch = c->giving_next;
		c->giving_next = NULL;
		bytes += give_back(c);
	}
	return bytes;
}

/* Give back the idle chunks of @heap (NULL: all) but the kept ones
 * (@keep).  No lock held. */
static size_t give_back_idle(const struct rdmalloc_heap *heap, int keep)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *batch = choose_idle(heap, keep);
	rdmalloc_chunk_unlock();
	return give_back_batch(batch);
}

size_t rdmalloc_chunks_give_back(const struct rdmalloc_heap *heap)
{
	if (!heap) /* a trim: registered memory nobody uses, reserves included */
		rdmalloc_reserves_drop(0);
	return give_back_idle(heap, 0);
}

/* The chunk a hook was called on, [addr, addr+len) inside it.  Chunk lock
 * held. */
static struct rdmalloc_chunk *hooked(void *addr, size_t len, const char *hook)
{
	struct rdmalloc_chunk *c = rdmalloc_chunk_owning(addr);
	if (!c || len > c->base + c->size - (uintptr_t)addr)
		rdmalloc_fatal("%s hook for [%p, +%zu) that is not inside a chunk of ours", hook, addr, len);
	return c;
}

/* Register given-back @c again (TAKING, held_bytes counted) and publish
 * it: 0 with the chunk lock held, or an errno value without it (nothing
 * left registered). */
static int take_back(struct rdmalloc_chunk *c)
{
	unsigned used = 0;
	int err = register_steady(c, &used);
	if (err && pressure(err) && relieve())
		err = register_steady(c, &used);
	if (err) {
		log_reg_failure(c->size, err);
		int kept = rdmalloc_region_deregister_all(c) != 0;
		if (!kept) /* the registration faulted pages in: back they go */
			kept = rdmalloc_os_dontneed((void *)c->base, c->map_size) != 0;
		rdmalloc_chunk_lock();
		c->stale |= kept;
		pd_users_release(used);
		rdmalloc_chunk_unlock();
		return err;
	}
	c->state = RDMALLOC_CHUNK_LIVE;
	atomic_store_explicit(&c->live_size, c->size, memory_order_release);
	count_held(c, 1);
	STAT_INC(chunks_taken_back);
	pd_users_release(used);
	return 0;
}

int rdmalloc_chunk_commit(void *addr, size_t len)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = hooked(addr, len, "commit");
	/* Settled (not being given or taken back by another thread), and a
	 * given-back one held under the limit: idle chunks go first, once. */
	for (int relieved = 0;; relieved = 1) {
		while (c->state == RDMALLOC_CHUNK_GIVING || c->state == RDMALLOC_CHUNK_TAKING)
			rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
		if (c->state != RDMALLOC_CHUNK_GONE || hold(c->map_size))
			break;
		rdmalloc_chunk_unlock();
		if (relieved) {
			log_limit(c->size);
			return ENOMEM;
		}
		relieve();
		rdmalloc_chunk_lock();
	}
	if (c->state == RDMALLOC_CHUNK_QUARANTINED) {
		rdmalloc_chunk_unlock();
		return ENOMEM; /* jemalloc uses other memory */
	}
	if (c->state == RDMALLOC_CHUNK_GONE) {
		c->state = RDMALLOC_CHUNK_TAKING;
		rdmalloc_chunk_unlock();
		int err = take_back(c); /* returns with the lock on success */
		if (err) {
			rdmalloc_chunk_lock();
			c->state = RDMALLOC_CHUNK_GONE;
			held_bytes -= c->map_size;
		}
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
		if (err) {
			rdmalloc_chunk_unlock();
			return err;
		}
	}
	c->committed += len;
	c->fresh = 0;
	int zero = c->stale;
	rdmalloc_chunk_unlock();
	/* jemalloc owns [addr, addr+len) now, and takes it for zeroed. */
	if (zero)
		memset(addr, 0, len);
	return 0;
}

void rdmalloc_chunk_decommit(void *addr, size_t len)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = hooked(addr, len, "decommit");
	if (len > c->committed)
		rdmalloc_fatal("decommit of %zu bytes of chunk %p, which has %zu committed", len,
			       (void *)c->base, c->committed);
	c->committed -= len;
	c->stale = 1;
	struct rdmalloc_chunk *batch = c->committed ? NULL : choose_idle(c->heap, 1);
	rdmalloc_chunk_unlock();
	give_back_batch(batch);
}

int rdmalloc_chunk_pin(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	int ok = c->state == RDMALLOC_CHUNK_LIVE;
	c->pins += ok;
	rdmalloc_chunk_unlock();
	return ok ? 0 : ENOENT;
}

void rdmalloc_chunk_unpin(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	if (!c->pins)
		rdmalloc_fatal("chunk %p unpinned more often than pinned", (void *)c->base);
	c->pins--;
	struct rdmalloc_chunk *batch = idle(c) ? choose_idle(c->heap, 1) : NULL;
	rdmalloc_chunk_unlock();
	give_back_batch(batch);
}

void rdmalloc_chunk_destroyed(void *addr, size_t size)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = rdmalloc_chunk_owning(addr);
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

/* The next LIVE or RESERVED chunk whose registration @i is (or, with @is
 * 0, is not) with @pd, or NULL.  Chunks being created, given back or taken
 * back are their own thread's: the PD table's generation and pd_users keep
 * them in step.  Chunk lock held. */
static struct rdmalloc_chunk *next_registered(unsigned i, struct ibv_pd *pd, int is)
{
	struct rdmalloc_chunk *c = all_chunks;
	while (c && ((c->state != RDMALLOC_CHUNK_LIVE && c->state != RDMALLOC_CHUNK_RESERVED) ||
		     (atomic_load_explicit(&c->reg[i].pd, memory_order_relaxed) == pd) != is))
		c = c->next;
	return c;
}

/* A walk works on @c without the chunk lock: it is not given back
 * meanwhile (an idle chunk left busy goes at the next give-back).  Chunk
 * lock held. */
static void walk_enter(struct rdmalloc_chunk *c)
{
	c->busy++;
}

static void walk_leave(struct rdmalloc_chunk *c)
{
	c->busy--;
	if (c->state == RDMALLOC_CHUNK_RESERVED)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* a drop may wait for it */
}

/* Deregister every published chunk's registration @i with @pd: each is
 * unpublished under the chunk lock (held on entry and return) and
 * deregistered outside it.  The first errno of a failure. */
static int deregister_all_with(unsigned i, struct ibv_pd *pd)
{
	int first = 0;
	for (struct rdmalloc_chunk *c; (c = next_registered(i, pd, 1));) {
		struct ibv_mr *mr = rdmalloc_region_unpublish(c, i);
		walk_enter(c);
		rdmalloc_chunk_unlock();
		int err = rdmalloc_region_deregister(c, mr);
		if (err && !first)
			first = err;
		rdmalloc_chunk_lock();
		walk_leave(c);
	}
	return first;
}

/* Deregister every chunk from @pd (index @i) until no LIVE chunk and no
 * other thread (a creator, a give-back) holds it any more: the caller may
 * deallocate it next.  Chunk lock held (waited on).  The first errno of a
 * failed deregistration. */
static int let_go_of(unsigned i, struct ibv_pd *pd)
{
	int first = 0;
	for (;;) {
		while (pd_users[i])
			rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
		if (!next_registered(i, pd, 1))
			return first;
		int err = deregister_all_with(i, pd);
		if (err && !first)
			first = err;
	}
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
		walk_enter(c);
		rdmalloc_chunk_unlock();
		int err = rdmalloc_region_register(c, (unsigned)s, pd);
		rdmalloc_chunk_lock();
		walk_leave(c);
		if (err) {
			let_go_of((unsigned)s, pd); /* undo: the caller may deallocate the PD next */
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
	int first = let_go_of((unsigned)s, pd);
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

int rdmalloc_chunks_pinned(const struct rdmalloc_heap *heap)
{
	int pinned = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = all_chunks; c && !pinned; c = c->next)
		pinned = c->heap == heap && c->pins;
	rdmalloc_chunk_unlock();
	return pinned;
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
		if (c->heap != heap || c->state != RDMALLOC_CHUNK_LIVE)
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
 * held; the PD lock keeps its registrations ours, busy keeps it LIVE. */
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
		if (c)
			walk_enter(c);
		rdmalloc_chunk_unlock();
		if (!c)
			return 0;
		int err = rereg_one(c, s, access, new_keys, stamp, cb, ctx, changed);
		rdmalloc_chunk_lock();
		walk_leave(c);
		rdmalloc_chunk_unlock();
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
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next) {
		for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++) {
			c->pins -= c->reg[i].windows; /* the windows go; elided regions stay pinned */
			rdmalloc_region_forget(c, i);
		}
		c->busy = 0;
		/* A give-back or take-back the parent was in the middle of is
		 * not the child's to finish: the chunk is left given back, its
		 * bytes whatever they are (zeroed when committed). */
		if (c->state == RDMALLOC_CHUNK_GIVING)
			count_held(c, -1);
		if (c->state == RDMALLOC_CHUNK_GIVING || c->state == RDMALLOC_CHUNK_TAKING) {
			c->state = RDMALLOC_CHUNK_GONE;
			c->stale = 1;
			c->giving_next = NULL;
			held_bytes -= c->map_size;
		}
	}
	/* Reserve chunks stay, without registrations: a hand-over registers
	 * them with the child's PDs.  Those the parent's thread was making
	 * are not the child's. */
	held_bytes -= rdmalloc_reserves_forget();
	rdmalloc_implicit_forget();
}
