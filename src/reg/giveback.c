/* SPDX-License-Identifier: MIT */
/*
 * giveback.c - idle chunks given back and taken back (doc/design.md,
 * "Giving memory back"): jemalloc commits and decommits the parts of a
 * chunk it uses (the commit and decommit hooks); a chunk with none of it
 * committed is idle, and is deregistered from every PD and its pages
 * returned, while jemalloc keeps the address range; a commit into it
 * registers it anew (new keys).  Memory windows and the drop-in's elided
 * regions pin a chunk: never given back under them.
 *
 * Concurrency: a chunk's state, committed bytes, pins and busy count are
 * under the chunk lock; deregistration and registration run outside it.  A
 * commit that meets a chunk being given back or taken back waits on the
 * chunk lock's condition variable.  A give-back counts the PDs it
 * deregisters from as used (pdtable.c), so that a detach waits for it.
 */
#include "chunkset.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "addrmap.h"
#include "counters.h"
#include "lock.h"
#include "log.h"
#include "os.h"
#include "region.h"
#include "reserve.h"

/* Idle: held (registered, or an eager heap's: pinned memory to give
 * back), not a byte committed, nothing on it.  A plain chunk of an
 * on-demand heap, or an ODP one, gave its pages back as they were
 * decommitted. */
static int idle_but_for_busy(const struct rdmalloc_chunk *c)
{
	return c->state == RDMALLOC_CHUNK_LIVE && !rdmalloc_spec_odp(c->spec) && c->held && c->committed == 0 &&
	       !c->pins && !c->fresh && !c->big;
}

static int idle(const struct rdmalloc_chunk *c)
{
	return idle_but_for_busy(c) && !c->busy;
}

/* A give-back skipped a chunk idle but for a walk or a first use on it
 * (busy), and no decommit comes for it again: the background tick looks
 * again (rdmalloc_give_back_skipped). */
static atomic_int skipped_busy;

int rdmalloc_give_back_skipped(void)
{
	return atomic_exchange_explicit(&skipped_busy, 0, memory_order_acq_rel);
}

/* Mark @c to be given back and chain it on *@batch; count the PDs it is
 * registered with in pd_users (a detach waits for them).  Chunk lock held. */
static void mark_giving(struct rdmalloc_chunk *c, struct rdmalloc_chunk **batch)
{
	c->state = RDMALLOC_CHUNK_GIVING;
	atomic_store_explicit(&c->live_size, 0, memory_order_release); /* lookups: ENOENT from now */
	rdmalloc_pd_users_claim(c);
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
		for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next)
			if (c->heap == heap && idle(c) && (!kept || c->map_size < kept->map_size))
				kept = c;
	}
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next) {
		if ((!heap || c->heap == heap) && c != kept && idle(c))
			mark_giving(c, &batch);
		else if (c->busy && idle_but_for_busy(c))
			atomic_store_explicit(&skipped_busy, 1, memory_order_release);
	}
	return batch;
}

/* Give-backs and take-backs ended, and their count when a commit last
 * stopped waiting for one (chunk lock). */
static unsigned long settles, settles_when_late = ULONG_MAX;

/* A give-back or take-back ended: commits waiting for it go on, and wait
 * again for the next (chunk lock held). */
static void settle_ended(void)
{
	settles++;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

/* Deregister @c from every PD and let its pages go (@doing: what for, for
 * the log).  Even when a deregistration failed: the region keeps its
 * pages pinned, but they leave the process, which gets fresh ones, so the
 * old key reaches nothing of ours any more.  1 when they could not leave
 * either (the chunk must be quarantined); *@err: the madvise's errno (its
 * old bytes are then zeroed when committed).  No lock held. */
static int deregister_cut_off(struct rdmalloc_chunk *c, const char *doing, int *err)
{
	int failed = rdmalloc_region_deregister_all(c) != 0; /* dereg_failed stays: never unmapped */
	*err = rdmalloc_os_dontneed((void *)c->base, c->map_size);
	if (failed && *err)
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) quarantined: a deregistration failed "
			     "and its pages could not be cut off (%s); never used again",
			     (void *)c->base, c->map_size, rdmalloc_strerror(*err));
	else if (failed)
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes): a deregistration failed while %s; its "
			     "old pages stay pinned, cut off from the process", (void *)c->base, c->map_size, doing);
	return failed && *err;
}

/* Give back @c, marked GIVING: its keys were unpublished by mark_giving;
 * deregister, return its pages.  No lock held.  Its bytes, or 0 when it
 * had to be quarantined. */
static size_t give_back(struct rdmalloc_chunk *c)
{
	unsigned used = rdmalloc_registered_pds(c); /* what mark_giving counted */
	int err, quarantine = deregister_cut_off(c, "giving it back", &err);
	if (err && !quarantine) /* still ours: its old bytes are zeroed when committed */
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "madvise(MADV_DONTNEED) of a given-back chunk: %s",
				  rdmalloc_strerror(err));
	rdmalloc_chunk_lock();
	if (quarantine) {
		/* A region may still be valid and map these very pages: a
		 * peer's old rkey would reach whatever jemalloc put there.
		 * Counted as held, never committed again. */
		c->state = RDMALLOC_CHUNK_QUARANTINED;
	} else {
		c->stale = err != 0;
		rdmalloc_held_bytes -= c->map_size;
		c->held = 0;
		if (rdmalloc_spec_on_demand(c->spec)) {
			/* Plain again, published: registered again when RDMA
			 * needs it, not when jemalloc commits into it. */
			c->state = RDMALLOC_CHUNK_LIVE;
			atomic_store_explicit(&c->live_size, c->size, memory_order_release);
		} else {
			c->state = RDMALLOC_CHUNK_GONE;
			rdmalloc_count_held(c, -1);
		}
		STAT_INC(chunks_given_back);
		STAT_ADD(bytes_given_back, c->map_size);
		rdmalloc_debug("idle chunk %p of %zu bytes given back: deregistered, pages returned%s",
			       (void *)c->base, c->map_size,
			       rdmalloc_spec_on_demand(c->spec) ? "; registered again when RDMA needs it" : "");
		rdmalloc_reserve_shrunk(&c->spec->reserve); /* its heap shrinks: no growth ahead */
		/* Its keys are gone: a program that cached them can tell. */
		atomic_fetch_add_explicit(&c->spec->key_gen, 1, memory_order_release);
	}
	rdmalloc_pd_users_release(used);
	settle_ended(); /* a commit may wait for it */
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
size_t rdmalloc_give_back_idle(const struct rdmalloc_heap *heap, int keep)
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
	return rdmalloc_give_back_idle(heap, 0);
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

/* Register given-back @c again (TAKING, rdmalloc_held_bytes counted) and publish
 * it: 0 with the chunk lock held, or an errno value without it: nothing
 * left registered, or, when a deregistration of the undo failed and the
 * pages could not be cut off either, @c QUARANTINED (still held). */
static int take_back(struct rdmalloc_chunk *c)
{
	unsigned used = 0;
	int err = rdmalloc_register_steady_relieved(c, &used);
	if (err) {
		rdmalloc_log_reg_failure(c->size, err);
		/* Undone as a give-back is: the pages the registration
		 * faulted in leave the process, so that a region left behind
		 * keeps old pages pinned, not the ones jemalloc uses next. */
		int cut, quarantine = deregister_cut_off(c, "undoing its take-back", &cut);
		rdmalloc_chunk_lock();
		c->stale |= cut != 0;
		if (quarantine) { /* held, counted, never committed again (as give_back's) */
			c->state = RDMALLOC_CHUNK_QUARANTINED;
			c->held = 1;
			rdmalloc_count_held(c, 1);
		}
		rdmalloc_pd_users_release(used);
		rdmalloc_chunk_unlock();
		return err;
	}
	c->state = RDMALLOC_CHUNK_LIVE;
	c->held = 1;
	atomic_store_explicit(&c->live_size, c->size, memory_order_release);
	rdmalloc_count_held(c, 1);
	STAT_INC(chunks_taken_back);
	rdmalloc_debug("chunk %p of %zu bytes taken back: registered again (new keys)", (void *)c->base, c->size);
	rdmalloc_pd_users_release(used);
	return 0;
}

void rdmalloc_give_back_fork_child(void)
{
	settles_when_late = ULONG_MAX;
}

/* Wait until no other thread gives @c back or takes it back, at most
 * rdmalloc_fill_wait_ns: that thread is in ibv_dereg_mr or ibv_reg_mr,
 * whose provider may wait for a lock the allocating thread holds (the
 * program called malloc holding it).  Past it, and until one of them
 * ends, no commit waits again: a stuck call costs one wait, not one per
 * allocation or per chunk of its batch.  0, or ETIMEDOUT counted in
 * fallbacks (the caller says it, unlocked).  Chunk lock held (released
 * meanwhile). */
static int settled(struct rdmalloc_chunk *c)
{
	uint64_t deadline = 0;
	while (c->state == RDMALLOC_CHUNK_GIVING || c->state == RDMALLOC_CHUNK_TAKING) {
		if ((!deadline && settles == settles_when_late) || rdmalloc_fill_wait(&deadline)) {
			settles_when_late = settles;
			STAT_INC(fallbacks);
			return ETIMEDOUT;
		}
	}
	return 0;
}

static void said_unsettled(void)
{
	rdmalloc_log_once(RDMALLOC_LOG_WARN, "an allocation stopped waiting for another thread's "
			  "deregistration or registration of the chunk it would use after %llu ms (that "
			  "verbs call may wait for a lock the allocating thread holds) and uses other "
			  "memory (further ones are only counted in fallbacks)",
			  (unsigned long long)(rdmalloc_fill_wait_ns / 1000000u));
}

int rdmalloc_chunk_commit(void *addr, size_t len)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = hooked(addr, len, "commit");
	/* Settled (not being given or taken back by another thread), and a
	 * given-back one held under the limit: idle chunks go first, once.
	 * A commit that fails makes jemalloc use other memory. */
	int relieved = 0;
	for (;; relieved = 1) {
		if (settled(c)) {
			rdmalloc_chunk_unlock();
			said_unsettled();
			if (relieved)
				rdmalloc_relief_end();
			return ENOMEM;
		}
		if (c->state != RDMALLOC_CHUNK_GONE || rdmalloc_hold(c->map_size))
			break;
		rdmalloc_chunk_unlock();
		if (relieved) {
			rdmalloc_relief_end();
			rdmalloc_log_limit(c->size);
			return ENOMEM;
		}
		rdmalloc_relieve();
		rdmalloc_chunk_lock();
	}
	if (relieved)
		rdmalloc_relief_end_locked();
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
			if (c->state != RDMALLOC_CHUNK_QUARANTINED) {
				c->state = RDMALLOC_CHUNK_GONE;
				rdmalloc_held_bytes -= c->map_size;
			}
		}
		settle_ended();
		if (err) {
			rdmalloc_chunk_unlock();
			return err;
		}
	}
	c->committed += len;
	rdmalloc_chunk_idle_set(c, addr, len, 0);
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
	rdmalloc_chunk_idle_set(c, addr, len, 1); /* no block lies there any more */
	int odp = rdmalloc_spec_odp(c->spec);
	if (c->state == RDMALLOC_CHUNK_LIVE && (odp || (!c->held && rdmalloc_spec_on_demand(c->spec)))) {
		/* Memory nothing pins (an ODP chunk, or plain memory of an
		 * on-demand heap): its pages go back now, at page grain, as
		 * jemalloc's own do.  No registration starts meanwhile
		 * (rdmalloc_chunk_demand waits): it would pin pages the CPU is
		 * about to lose. */
		c->discarding++;
		rdmalloc_chunk_unlock();
		int err = rdmalloc_os_dontneed(addr, len);
		if (err) {
			STAT_INC(fallbacks);
			rdmalloc_log_once(RDMALLOC_LOG_WARN, "freed pages could not be given back to the kernel "
					  "(madvise: %s; mlock'ed?): they stay resident, zeroed when used again "
					  "(counted in fallbacks)", rdmalloc_strerror(err));
		} else {
			STAT_ADD(discarded_bytes, len);
			if (odp)
				STAT_INC(odp_purges);
		}
		rdmalloc_chunk_lock();
		c->discarding--;
		c->stale |= err != 0; /* the old bytes stayed: zeroed when committed */
		if (!c->discarding)
			rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
		rdmalloc_chunk_unlock();
		return;
	}
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

int rdmalloc_chunk_pin_at(const void *addr, size_t len, unsigned access, struct rdmalloc_chunk **out)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(addr);
	int err = !c || c->state != RDMALLOC_CHUNK_LIVE	       ? ENOENT
		  : len > c->size - ((uintptr_t)addr - c->base) ? ERANGE
		  : access & ~rdmalloc_spec_access(c->spec)     ? EACCES
								: 0;
	if (!err)
		c->pins++;
	rdmalloc_chunk_unlock();
	*out = err ? NULL : c;
	return err;
}

void rdmalloc_chunk_pin_fork_child(struct rdmalloc_chunk *c)
{
	c->pins++;
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
