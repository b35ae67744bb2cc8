/* SPDX-License-Identifier: MIT */
/*
 * chunk.c - making and releasing chunks: memory mapped for a heap,
 * registered with every attached PD and published in the address map.
 *
 * Chunks are created from the alloc extent hook, or ahead of it for a
 * heap's reserve (reserve.c: RESERVED until the hook takes it, see
 * take_reserved), and released only when their heap is destroyed (or, a
 * reserve, when dropped).  In between, a chunk jemalloc has decommitted
 * entirely is idle: it may be given back and taken back (giveback.c).  A
 * pinned page is never purged, decommitted or unmapped (see hooks.c):
 * only after its chunk's deregistration (an ODP chunk's pages, which
 * nothing pins, go back as jemalloc decommits them).
 *
 * Locking (doc/design.md, "Locks and fork"): the CHUNK lock is a leaf.  It
 * guards the chunk list, the address map's writers, the descriptor pool,
 * the PD table and the registration generation, and is never held across a
 * verbs call, an allocation or another lock.  A chunk registers outside
 * it, with a snapshot of the PD table (pdtable.c).  The files of the chunk
 * set are listed in chunkset.h.
 */
#include "chunkset.h"

#include <errno.h>
#include <string.h>

#include "addrmap.h"
#include "counters.h"
#include "crew.h"
#include "hugepage.h"
#include "lock.h"
#include "log.h"
#include "os.h"
#include "region.h"
#include "reserve.h"

/* Deregister @c from every PD, then unmap its @len bytes at @p (NULL: not
 * mapped) -- unless a region of it stays registered, now or from an
 * earlier failure (dereg_failed: a detach walk): the NIC may still write
 * those pages, so they must never go back to the kernel.  They stay
 * mapped (pinned), and the log says so.  No lock held. */
void rdmalloc_deregister_unmap(struct rdmalloc_chunk *c, void *p, size_t len)
{
	if (rdmalloc_region_deregister_all(c) == 0 && !atomic_load(&c->dereg_failed)) {
		if (p)
			rdmalloc_os_unmap(p, len + c->tail);
	} else {
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) kept mapped: deregistration failed", p,
			     len);
	}
}

/* The drop-in leaves @c plain (RDMALLOC_REG_EAGER_PLAIN): its registration
 * was refused with @err (ENOMEM for RDMALLOC_MAX_REGISTERED). */
static void left_plain(const struct rdmalloc_chunk *c, int err)
{
	STAT_INC(refused_chunks);
	rdmalloc_debug("chunk %p of %zu bytes left unregistered: %s", (void *)c->base, c->size,
		       rdmalloc_refusal_text(err));
	rdmalloc_log_once(RDMALLOC_LOG_WARN, "a %zu-byte chunk is left unregistered: %s; its memory is "
			  "allocated all the same and registered when RDMA first needs it, and new "
			  "chunks try again (further ones are only counted in refused_chunks)",
			  c->size, rdmalloc_refusal_text(err));
}

/* The mapping of a chunk of @size aligned to @align: huge pages (@huge,
 * 1 GiB ones unless @no_1g; *@map_size and *@kind say what it got), or
 * 4 KiB pages with @tail bytes of address space past @size. */
static void *map_chunk(size_t size, size_t tail, size_t align, int huge, int no_1g, size_t *map_size, int *kind)
{
	return huge ? rdmalloc_huge_map(size, align, no_1g, map_size, kind)
		    : rdmalloc_os_map_aligned(size + tail, align, RDMALLOC_OS_PAGES);
}

/*
 * Map @size bytes aligned to @align (a power of two, at least the granule)
 * for @heap and, if its heap registers chunks when they are made, register
 * them with every attached PD: the chunk, unpublished, with the chunk lock
 * held (*@used: the PDs counted in pd_users for the caller), or NULL with
 * errno set and no lock.  An allocation (@for_r NULL) under memory
 * pressure (the limit, a mapping or a registration refused for want of
 * memory) gives memory back and tries once more (rdmalloc_relieve()); a
 * reserve fill (@for_r) never does, and keeps for_r->fill_held equal to
 * the bytes it holds meanwhile.  A refused registration fails, but for an
 * allocation of an EAGER_PLAIN heap, which gets the chunk plain.
 */
static struct rdmalloc_chunk *make(struct rdmalloc_heap *heap, struct rdmalloc_chunk_spec *spec, size_t size,
				   size_t align, struct rdmalloc_reserve *for_r, unsigned *used)
{
	int huge = (spec->flags & RDMA_HEAP_HUGEPAGES) != 0;
	/* What the limit counts: the mapping, which for huge pages is rounded
	 * up to whole 2 MiB pages (a chunk on 1 GiB pages holds the rest
	 * below, or goes on smaller pages). */
	size_t want = huge ? rdmalloc_huge_round(size, RDMALLOC_PAGES_2M) : size;
	if (want < size) {
		errno = ENOMEM;
		return NULL;
	}
	int eager = rdmalloc_spec_eager(spec);
	int plain_ok = spec->policy == RDMALLOC_REG_EAGER_PLAIN && !for_r;
	int held = 0, refused = 0;
	if (eager) {
		rdmalloc_chunk_lock();
		held = rdmalloc_hold(want);
		if (held && for_r)
			for_r->fill_held = want; /* a fork child un-holds it (rdmalloc_reserves_forget) */
		rdmalloc_chunk_unlock();
		if (!held && !for_r) { /* memory pressure: reserves and idle chunks go first, then once more */
			rdmalloc_relieve();
			rdmalloc_chunk_lock();
			held = rdmalloc_hold(want);
			rdmalloc_relief_end_locked();
			rdmalloc_chunk_unlock();
			if (!held)
				rdmalloc_log_limit(size);
		}
		if (!held && !plain_ok) {
			errno = ENOMEM;
			return NULL;
		}
		refused = held ? 0 : EDQUOT;
	}
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = rdmalloc_desc_alloc();
	if (!c && held) {
		rdmalloc_held_bytes -= want;
		if (for_r)
			for_r->fill_held = 0;
	}
	rdmalloc_chunk_unlock();
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int err = ENOMEM;
	size_t map_size = size;
	int kind = RDMALLOC_PAGES_4K;
	/* The drop-in's chunks take the rest of their last granule too, so
	 * that the auto map marks all of it and free() of a block there takes
	 * the fast path (addrmap.h): address space only, never touched. */
	size_t tail = spec->auto_cache && !huge ? align_up(size, RDMALLOC_GRANULE) - size : 0;
	void *p = map_chunk(size, tail, align, huge, 0, &map_size, &kind);
	if (!p && !for_r && rdmalloc_pressure(errno)) {
		if (rdmalloc_relieve()) /* address space went back: once more */
			p = map_chunk(size, tail, align, huge, 0, &map_size, &kind);
		int e = errno;
		rdmalloc_relief_end();
		errno = e;
	}
	if (p && held && map_size > want) { /* 1 GiB pages: held whole, or not used */
		rdmalloc_chunk_lock();
		int more = rdmalloc_hold(map_size - want);
		if (more && for_r)
			for_r->fill_held = map_size;
		rdmalloc_chunk_unlock();
		if (more) {
			want = map_size;
		} else {
			rdmalloc_os_unmap(p, map_size);
			map_size = size;
			kind = RDMALLOC_PAGES_4K;
			p = map_chunk(size, tail, align, huge, 1, &map_size, &kind);
		}
	}
	if (p)
		c->tail = tail;
	if (!p) {
		err = errno ? errno : ENOMEM;
		map_size = size;
		goto fail;
	}
	if (held && map_size != want) {
		rdmalloc_chunk_lock();
		rdmalloc_held_bytes += map_size - want; /* wraps correctly when smaller */
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
	__atomic_store_n(&c->spec, spec, __ATOMIC_RELAXED); /* rdmalloc_chunk_spec_seen */
	int populated = 0;
	if (held) {
		/* A big chunk's pages faulted in by the crew together: its
		 * registrations then only pin them (crew.h). */
		if (rdmalloc_crew_serves(map_size, spec->flags))
			populated = rdmalloc_crew_populate(p, map_size) == 0;
		err = for_r ? rdmalloc_register_steady(c, used) : rdmalloc_register_steady_relieved(c, used);
		if (err && !plain_ok) {
			if (!for_r)
				rdmalloc_log_reg_failure(size, err);
			goto fail;
		}
		if (err) { /* plain it is: nothing of it may stay registered */
			int kept = rdmalloc_region_deregister_all(c);
			if (!kept && populated) /* fresh: its pages go, as a refused registration leaves none */
				rdmalloc_os_dontneed(p, map_size);
			rdmalloc_chunk_lock();
			rdmalloc_pd_users_release(*used);
			*used = 0;
			if (kept) /* a region nobody has the keys of keeps its pages: they stay held */
				goto done;
			rdmalloc_held_bytes -= want;
			held = 0;
			refused = err;
		}
	} else {
		rdmalloc_chunk_lock();
	}
done:
	c->held = held;
	if (refused)
		left_plain(c, refused);
	return c;
fail:
	rdmalloc_deregister_unmap(c, p, map_size);
	rdmalloc_chunk_lock();
	if (held)
		rdmalloc_held_bytes -= want;
	if (for_r)
		for_r->fill_held = 0;
	rdmalloc_desc_free(c);
	rdmalloc_pd_users_release(*used);
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
	rdmalloc_deregister_unmap(c, (void *)c->base, c->map_size);
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk **d = &c->spec->reserve.dropping; *d; d = &(*d)->next)
		if (*d == c) {
			*d = c->next;
			c->next = NULL;
			rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* a close may wait for it */
			break;
		}
	if (c->held)
		rdmalloc_held_bytes -= c->map_size;
	if (counted)
		rdmalloc_count_held(c, -1);
	rdmalloc_desc_free(c);
	rdmalloc_pd_users_release(used);
	rdmalloc_chunk_unlock();
}

/* The last ready chunk a relief or a trim stopped waiting for, while it
 * stays ready: not waited for again. */
static struct rdmalloc_chunk *busy_late;

/* @c, its spec's ready reserve chunk, is one no more (taken, dropped or
 * released): out of the reserve stats.  Chunk lock held. */
static void unpark(struct rdmalloc_chunk *c)
{
	if (c == busy_late) /* its descriptor may be another chunk's next */
		busy_late = NULL;
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
 * (reserve_waits), up to rdmalloc_fill_wait_ns (reserve.h).  The thread
 * needs no lock of jemalloc's, and a fork child has none to wait for
 * (reserves_forget).
 */
static struct rdmalloc_chunk *take_reserved(struct rdmalloc_chunk_spec *spec, size_t size, size_t align,
					    unsigned *used, int *resync)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_reserve *r = &spec->reserve;
	if (!r->ready && r->filling == size && !r->closed && !r->cancelled && !r->late) {
		/* That fill only: once it ends (another arena may have taken
		 * its chunk, and the thread started the next), or once it is
		 * cancelled, this growth registers its own. */
		unsigned seq = r->fill_seq;
		STAT_INC(reserve_waits);
		uint64_t deadline = 0;
		while (!r->ready && r->filling && r->fill_seq == seq && !r->cancelled) {
			if (rdmalloc_fill_wait(&deadline)) { /* reserve.h: it registers its own */
				rdmalloc_reserve_late_locked(r);
				rdmalloc_chunk_unlock();
				rdmalloc_reserve_wait_timed_out("the reserve chunk being made for it");
				return NULL;
			}
		}
	}
	struct rdmalloc_chunk *c = spec->reserve.ready;
	if (!c || c->size != size || (c->base & (align - 1)) || c->busy) {
		rdmalloc_chunk_unlock();
		return NULL;
	}
	unpark(c);
	rdmalloc_chunk_unlink(c);
	*used = rdmalloc_pd_users_claim(c);
	*resync = !in_step(c);
	rdmalloc_chunk_unlock();
	return c;
}

/*
 * Publish @c, just made (chunk lock held) or taken from the reserve
 * (@counted 0: already in the stats of chunks): in the address map and the
 * chunk list, LIVE, with all of it committed or (@committed 0) none.  0
 * with the lock held, or an errno value with @c undone and no lock.
 */
static int go_live(struct rdmalloc_chunk *c, unsigned used, int committed, int counted)
{
	if (!c->big) /* jemalloc decommits in every other chunk */
		rdmalloc_chunk_idle_init(c, committed);
	int err = rdmalloc_addrmap_insert(c);
	if (err) {
		rdmalloc_chunk_unlock();
		unmake(c, used, !counted);
		return err;
	}
	rdmalloc_chunk_link(c);
	c->state = RDMALLOC_CHUNK_LIVE;
	c->committed = committed ? c->size : 0;
	c->fresh = !committed;
	atomic_store_explicit(&c->live_size, c->size, memory_order_release);
	if (counted)
		rdmalloc_count_held(c, 1); /* a reserve chunk is counted from when it is made */
	return 0;
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
		int err = rdmalloc_register_steady(c, &used);
		if (err) {
			STAT_INC(reserve_discards);
			rdmalloc_log_once(RDMALLOC_LOG_WARN, "a reserve chunk could not be registered anew at "
					  "hand-over (%s): released, the chunk is made inline (further ones "
					  "are only counted in reserve_discards)", rdmalloc_strerror(err));
			unmake(c, used, 1);
			used = 0;
			c = NULL;
		}
	}
	int inline_made = !c;
	if (!c && !(c = make(heap, spec, size, align, NULL, &used)))
		return NULL;
	int err = go_live(c, used, committed, inline_made);
	if (err) {
		errno = err;
		return NULL;
	}
	if (!inline_made) {
		STAT_INC(reserve_hits);
		if (resync)
			STAT_INC(reserve_resyncs);
	} else if (c->held) {
		STAT_INC(inline_chunks);
	}
	rdmalloc_debug("chunk %p of %zu bytes: %s", (void *)c->base, c->size,
		       !inline_made ? (resync ? "reserve hit, registrations redone (a PD or the access changed)"
					      : "reserve hit, registered ahead")
		       : c->held    ? "reserve miss, made and registered on the allocating thread"
				    : "made, unregistered until RDMA needs it");
	if (rdmalloc_spec_eager(spec))
		rdmalloc_reserve_grown(spec, heap, size);
	rdmalloc_pd_users_release(used);
	rdmalloc_chunk_unlock();
	return c;
}

struct rdmalloc_chunk *rdmalloc_chunk_create_big(struct rdmalloc_heap *heap, struct rdmalloc_chunk_spec *spec,
						 size_t size, size_t alignment)
{
	size_t align = alignment > RDMALLOC_GRANULE ? alignment : RDMALLOC_GRANULE;
	if (!is_pow2(align) || size == 0 || size > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	unsigned used = 0;
	struct rdmalloc_chunk *c = make(heap, spec, size, align, NULL, &used);
	if (!c)
		return NULL;
	c->big = 1; /* before it is published: never marked in the auto map */
	int err = go_live(c, used, 1, 1);
	if (err) {
		errno = err;
		return NULL;
	}
	if (rdmalloc_spec_eager(spec))
		rdmalloc_reserve_want_tick(spec); /* once freed, it goes after the decay time (big.c) */
	rdmalloc_pd_users_release(used);
	rdmalloc_chunk_unlock();
	return c;
}

/* @c, out of the chunk list, is being unmade (unmake takes it off): on
 * @r's list of such chunks, for a close to wait for and a fork child to
 * forget.  The thread's drop of a fill it discards and a relief's drop of
 * the ready chunk may overlap.  Chunk lock held. */
static void dropping(struct rdmalloc_reserve *r, struct rdmalloc_chunk *c)
{
	c->next = r->dropping;
	r->dropping = c;
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
		dropping(r, c);
		rdmalloc_chunk_unlock();
		unmake(c, used, 0);
		STAT_INC(reserve_discards);
		return 0;
	}
	c->state = RDMALLOC_CHUNK_RESERVED;
	rdmalloc_chunk_link(c);
	r->ready = c;
	rdmalloc_count_held(c, 1); /* held, under the limit too: a chunk like any other */
	STAT_ADD(reserve_bytes, c->map_size);
	STAT_INC(reserve_chunks);
	rdmalloc_pd_users_release(used);
	rdmalloc_chunk_unlock();
	return 0;
}

size_t rdmalloc_chunk_drop_reserve(struct rdmalloc_reserve *r, int *skipped)
{
	rdmalloc_chunk_lock();
	uint64_t deadline = 0;
	while (r->ready && r->ready->busy) { /* an attach or a detach works on it */
		if (!skipped) {
			rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
		} else if (r->ready == busy_late || rdmalloc_fill_wait(&deadline)) { /* a relief: so long only */
			*skipped = r->ready == busy_late ? 1 : 2;
			busy_late = r->ready;
			rdmalloc_chunk_unlock();
			return 0;
		}
	}
	struct rdmalloc_chunk *c = r->ready;
	if (!c) {
		rdmalloc_chunk_unlock();
		return 0;
	}
	unpark(c);
	rdmalloc_chunk_unlink(c);
	dropping(r, c);
	STAT_INC(reserve_discards);
	unsigned used = rdmalloc_pd_users_claim(c); /* as a give-back does */
	size_t bytes = c->map_size;
	rdmalloc_chunk_unlock();
	unmake(c, used, 1);
	return bytes;
}

/* Unpublish, deregister, unmap: a chunk of a heap being destroyed (no hook
 * runs on it), or a big one its heap let go of.  Waits for a give-back,
 * take-back or walk under way on it.  Its PDs are counted in pd_users
 * until its regions are gone, as a give-back's are: a detach, which no
 * longer finds it on the list, waits for them.  No lock held. */
static void release(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	/* Memory pressure on another heap may be giving it back, a walk may
	 * work on it: let them finish; from now on nobody else chooses it. */
	while (c->state == RDMALLOC_CHUNK_GIVING || c->state == RDMALLOC_CHUNK_TAKING || c->busy)
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	int counted = c->state != RDMALLOC_CHUNK_GONE;
	int reserved = c->state == RDMALLOC_CHUNK_RESERVED; /* not published */
	if (reserved) {
		unpark(c);
		STAT_INC(reserve_discards);
	}
	c->state = RDMALLOC_CHUNK_RELEASING;
	atomic_store_explicit(&c->live_size, 0, memory_order_release);
	if (!reserved)
		rdmalloc_addrmap_remove(c);
	rdmalloc_chunk_unlink(c);
	unsigned used = rdmalloc_pd_users_claim(c);
	rdmalloc_chunk_unlock();
	rdmalloc_deregister_unmap(c, (void *)c->base, c->map_size);
	rdmalloc_chunk_lock();
	rdmalloc_pd_users_release(used);
	if (counted)
		rdmalloc_count_held(c, -1);
	if (c->held)
		rdmalloc_held_bytes -= c->map_size;
	rdmalloc_desc_free(c);
	rdmalloc_chunk_unlock();
}

static int resynced(const struct rdmalloc_chunk *c)
{
	return !rdmalloc_spec_eager(c->spec) || !c->held || in_step(c);
}

int rdmalloc_chunk_resync(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	int steady = resynced(c);
	rdmalloc_chunk_unlock();
	if (steady)
		return 0; /* the common case: no lock but the chunk's */
	/* Under the PD lock, as every walk (attach, detach, access change):
	 * @c is LIVE on the chunk list, so a walk under way may be replacing
	 * the very regions this would replace, and each would deregister them.
	 * fork() takes the lock before it waits for our verbs calls: none
	 * forks in the middle of this registration either. */
	rdmalloc_lock(RDMALLOC_LOCK_PD);
	rdmalloc_chunk_lock();
	steady = resynced(c);
	int err = 0;
	if (!steady) {
		c->busy++; /* no give-back, no release meanwhile */
		rdmalloc_chunk_unlock();
		unsigned used = 0;
		err = rdmalloc_register_steady(c, &used); /* with the lock on success */
		if (err)
			rdmalloc_chunk_lock();
		c->busy--;
		rdmalloc_pd_users_release(used);
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
	}
	rdmalloc_chunk_unlock();
	rdmalloc_unlock(RDMALLOC_LOCK_PD);
	return err;
}

int rdmalloc_chunk_release_big(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_lock();
	int pinned = c->pins != 0;
	if (!pinned) /* no pin comes now: pins need a LIVE chunk */
		c->state = RDMALLOC_CHUNK_RELEASING;
	rdmalloc_chunk_unlock();
	if (pinned)
		return EBUSY;
	/* Given back as an idle chunk is: counted so (what rdma_malloc_trim()
	 * returns), and its keys are gone (the heap's key generation). */
	STAT_INC(chunks_given_back);
	STAT_ADD(bytes_given_back, c->map_size);
	rdmalloc_debug("big chunk %p of %zu bytes given back: its block was freed", (void *)c->base, c->map_size);
	atomic_fetch_add_explicit(&c->spec->key_gen, 1, memory_order_release);
	release(c);
	return 0;
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
		struct rdmalloc_chunk *c = rdmalloc_chunk_list;
		while (c && c->heap != heap)
			c = c->next;
		rdmalloc_chunk_unlock();
		if (!c)
			return n;
		release(c);
		n++;
	}
}
