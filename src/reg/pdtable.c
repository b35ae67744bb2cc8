/* SPDX-License-Identifier: MIT */
/*
 * pdtable.c - the PD table (PD i is registration reg[i] of every chunk),
 * the creators using each PD, and the walks that attach, detach and
 * re-register every chunk.
 *
 * Registration never happens under the chunk lock: a new chunk registers
 * with a snapshot of the PD table and publishes only if the registration
 * generation (reg_gen: bumped when the PD table or a heap's access
 * changes) did not move meanwhile, else it registers again
 * (rdmalloc_register_steady).  Each PD counts the creators whose snapshot
 * holds it (pd_users): detach waits for them, so that no creator still
 * uses a PD once its detach returned.  Attach and detach are serialised by
 * the caller (the PD lock).  The walks (attach, detach, access changes)
 * see only LIVE and RESERVED chunks and mark the one they work on busy,
 * which keeps it from being given back meanwhile.
 */
#include "chunkset.h"

#include <errno.h>

#include "counters.h"
#include "implicit.h"
#include "lock.h"
#include "log.h"
#include "region.h"
#include "reserve.h"

static _Atomic(struct ibv_pd *) pds[RDMA_MALLOC_MAX_PDS]; /* the PD table: PD i registers chunks' reg[i] */
static unsigned pds_filling;              /* indexes an attach is filling */
static int attach_closing;                 /* an attach finishes: creators wait (rdmalloc_chunks_attach) */
static int attach_late;                    /* a creator stopped waiting for it: none waits until it moves */
static unsigned long reg_gen;             /* bumped when the PD table or a heap's access changes */
static unsigned pd_users[RDMA_MALLOC_MAX_PDS]; /* creators that may register with PD i */
_Atomic unsigned rdmalloc_pd_slot_use[RDMA_MALLOC_MAX_PDS]; /* chunk.h: HANDED, CLOSING */

struct ibv_pd *rdmalloc_pd_at(unsigned i)
{
	return atomic_load_explicit(&pds[i], memory_order_acquire);
}

/* Each index's PD from the start of its attach to the end of its detach
 * (pds[] has it only while it is live), and whether a deregistration of a
 * region of it failed meanwhile, in any thread: that region stays
 * registered, which its detach reports (EIO). */
static struct ibv_pd *_Atomic slot_pd[RDMA_MALLOC_MAX_PDS];
static atomic_int slot_dereg_failed[RDMA_MALLOC_MAX_PDS];

void rdmalloc_pd_dereg_failed(const struct ibv_pd *pd)
{
	for (unsigned s = 0; pd && s < RDMA_MALLOC_MAX_PDS; s++)
		if (atomic_load_explicit(&slot_pd[s], memory_order_acquire) == pd)
			atomic_store_explicit(&slot_dereg_failed[s], 1, memory_order_release);
}

/* A creator is done with the PDs in @used: wake a detach waiting for
 * them.  Chunk lock held. */
void rdmalloc_pd_users_release(unsigned used)
{
	int woke = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if ((used & (1u << s)) && --pd_users[s] == 0)
			woke = 1;
	if (woke)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

/* The PDs (indexes) @c is registered with.  Its owner's, or chunk lock. */
unsigned rdmalloc_registered_pds(const struct rdmalloc_chunk *c)
{
	unsigned pds_of = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if (atomic_load_explicit(&c->reg[s].pd, memory_order_relaxed))
			pds_of |= 1u << s;
	return pds_of;
}

/* Count the PDs @c is registered with in pd_users, for a caller that will
 * deregister or hand over @c (a detach waits for them): the mask to give
 * rdmalloc_pd_users_release().  Chunk lock held. */
unsigned rdmalloc_pd_users_claim(const struct rdmalloc_chunk *c)
{
	unsigned used = rdmalloc_registered_pds(c);
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		pd_users[s] += (used >> s) & 1;
	return used;
}

/*
 * Register @c with every attached PD under its heap's access now, again
 * until the PD table and the access held still meanwhile (reg_gen).  0
 * with the chunk lock held, so that the caller publishes before they can
 * change again; else an errno value, without the lock.  *@used collects
 * the PDs counted in pd_users for the caller (it releases them).
 */
int rdmalloc_register_steady(struct rdmalloc_chunk *c, unsigned *used)
{
	for (;;) {
		struct ibv_pd *want[RDMA_MALLOC_MAX_PDS];
		rdmalloc_chunk_lock();
		/* An attach finishes first (rdmalloc_chunks_attach), but for
		 * so long only (reserve.h): its registration may wait for a
		 * lock this thread holds.  Going on is safe, as for a creator
		 * already past this point: the attach registers this chunk
		 * too, or the PD table changes and reg_gen says so. */
		uint64_t deadline = 0;
		int late = 0;
		while (attach_closing && !attach_late && !(late = rdmalloc_fill_wait(&deadline)))
			;
		attach_late |= late;
		unsigned long gen = reg_gen;
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
			want[s] = rdmalloc_pd_at(s);
			if (want[s] && !(*used & (1u << s))) {
				*used |= 1u << s;
				pd_users[s]++;
			}
		}
		rdmalloc_chunk_unlock();
		if (late)
			rdmalloc_reserve_wait_timed_out("an attach of a PD to finish");
		int err = rdmalloc_region_sync(c, want);
		if (err)
			return err;
		rdmalloc_chunk_lock();
		if (gen == reg_gen)
			return 0;
		rdmalloc_chunk_unlock(); /* a PD came or went meanwhile: again */
	}
}

/* Whether an attach registers @c with its new PD now: the chunks of an
 * eager heap, and those of an EAGER_PLAIN heap that are registered; plain
 * chunks wait for their first use there (demand.c). */
static int attach_wants(const struct rdmalloc_chunk *c)
{
	return rdmalloc_spec_eager(c->spec) && c->held;
}

/* The next LIVE or RESERVED chunk whose registration @i is (or, with @is
 * 0, is not but should be) with @pd, or NULL.  Chunks being created, given
 * back or taken back are their own thread's: the PD table's generation and
 * pd_users keep them in step.  Chunk lock held. */
static struct rdmalloc_chunk *next_registered(unsigned i, struct ibv_pd *pd, int is)
{
	struct rdmalloc_chunk *c = rdmalloc_chunk_list;
	while (c && ((c->state != RDMALLOC_CHUNK_LIVE && c->state != RDMALLOC_CHUNK_RESERVED) ||
		     (atomic_load_explicit(&c->reg[i].pd, memory_order_relaxed) == pd) != is ||
		     (!is && !attach_wants(c))))
		c = c->next;
	return c;
}

/* A walk works on @c without the chunk lock: it is not given back
 * meanwhile (an idle chunk left busy goes at the next give-back, or the
 * background tick's: heap.c, heaps_tick).  Chunk
 * lock held. */
static void walk_enter(struct rdmalloc_chunk *c)
{
	c->busy++;
}

static void walk_leave(struct rdmalloc_chunk *c)
{
	if (!--c->busy)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* a drop or a release may wait for it */
}

/* A chunk of an on-demand heap that lost its last registration (and none
 * is made meanwhile: demands hold the PD lock, as detach does) is plain:
 * it holds nothing against the limit, and may discard pages again.  Chunk
 * lock held. */
static void unhold_if_plain(struct rdmalloc_chunk *c)
{
	if (rdmalloc_spec_on_demand(c->spec) && c->held && !atomic_load(&c->dereg_failed) &&
	    c->state == RDMALLOC_CHUNK_LIVE && !rdmalloc_registered_pds(c)) {
		c->held = 0;
		rdmalloc_held_bytes -= c->map_size;
	}
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
		unhold_if_plain(c);
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

/* The chunks an attach of slot @i must register: what it owes when it
 * starts.  Chunk lock held. */
static size_t owed(unsigned i, struct ibv_pd *pd)
{
	size_t n = 0;
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next)
		n += (c->state == RDMALLOC_CHUNK_LIVE || c->state == RDMALLOC_CHUNK_RESERVED) &&
		     atomic_load_explicit(&c->reg[i].pd, memory_order_relaxed) != pd && attach_wants(c);
	return n;
}

/* End an attach's barrier, if it raised it (chunk lock held). */
static void attach_open(int *closing)
{
	if (*closing) {
		attach_closing = attach_late = 0;
		*closing = 0;
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
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
	atomic_store_explicit(&slot_dereg_failed[s], 0, memory_order_relaxed);
	atomic_store_explicit(&slot_pd[s], pd, memory_order_release);
	/* Register every published chunk; chunks published meanwhile are found
	 * by the next pass, and the PD goes live with the last pass.  Threads
	 * that make chunks faster than this registers them (big blocks, a
	 * slow NIC) would keep it from ever ending: once it has registered
	 * as many as it owed at the start, creators wait before they look at
	 * the PD table (attach_closing), and only those already past that
	 * point are left to do. */
	size_t budget = owed((unsigned)s, pd);
	int closing = 0;
	for (;;) {
		struct rdmalloc_chunk *c = next_registered((unsigned)s, pd, 0);
		if (!c) {
			unsigned gen = (atomic_load_explicit(&rdmalloc_pd_slot_use[s], memory_order_relaxed) |
					RDMALLOC_SLOT_BITS) + 1;
			atomic_store_explicit(&rdmalloc_pd_slot_use[s], gen, memory_order_seq_cst);
			atomic_store_explicit(&pds[s], pd, memory_order_release);
			pds_filling &= ~(1u << s);
			reg_gen++;
			attach_open(&closing);
			rdmalloc_chunk_unlock();
			return 0;
		}
		if (budget)
			budget--;
		else if (!closing)
			attach_closing = closing = 1;
		walk_enter(c);
		rdmalloc_chunk_unlock();
		int err = rdmalloc_region_register(c, (unsigned)s, pd);
		rdmalloc_chunk_lock();
		walk_leave(c);
		attach_late = 0; /* it moves: creators wait for it again */
		if (err) {
			attach_open(&closing);
			let_go_of((unsigned)s, pd); /* undo: the caller may deallocate the PD next */
			pds_filling &= ~(1u << s);
			atomic_store_explicit(&slot_pd[s], NULL, memory_order_release);
			rdmalloc_chunk_unlock();
			rdmalloc_log(RDMALLOC_LOG_WARN, "attaching PD %p: a chunk's registration failed (%s); "
				     "nothing is attached", (void *)pd, rdmalloc_strerror(err));
			return err;
		}
	}
}

static int detach(struct ibv_pd *pd, int unused_only)
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
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next)
		if (c->reg[s].windows) {
			rdmalloc_chunk_unlock();
			return EBUSY;
		}
	/* From here lookups of it answer ENODEV (rdmalloc_pd_slot_hand_out),
	 * unless one handed out keys first: then it stays. */
	if (unused_only) {
		unsigned u = atomic_load_explicit(&rdmalloc_pd_slot_use[s], memory_order_relaxed);
		do {
			if (u & RDMALLOC_SLOT_HANDED) {
				rdmalloc_chunk_unlock();
				return EBUSY;
			}
		} while (!atomic_compare_exchange_weak_explicit(&rdmalloc_pd_slot_use[s], &u,
								u | RDMALLOC_SLOT_CLOSING, memory_order_seq_cst,
								memory_order_relaxed));
	}
	atomic_store_explicit(&pds[s], NULL, memory_order_release);
	reg_gen++;
	/* Creators that saw the PD register again without it (reg_gen), and
	 * undo what they registered with it; then they let go of it.  A region
	 * of it whose deregistration failed (logged with its errno, counted),
	 * here or in any thread since the attach (a give-back, a big chunk let
	 * go of, which this waited for), is EIO, whatever ibv_dereg_mr said:
	 * its EBUSY or ENODEV would read as nothing done. */
	int failed = let_go_of((unsigned)s, pd) != 0;
	failed |= atomic_exchange_explicit(&slot_dereg_failed[s], 0, memory_order_acq_rel);
	atomic_store_explicit(&slot_pd[s], NULL, memory_order_release);
	rdmalloc_chunk_unlock();
	return failed ? EIO : 0;
}

int rdmalloc_chunks_detach(struct ibv_pd *pd)
{
	return detach(pd, 0);
}

void rdmalloc_chunks_forget_hand_outs(struct ibv_pd *pd)
{
	rdmalloc_chunk_lock();
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++)
		if (rdmalloc_pd_at(i) == pd)
			atomic_fetch_and_explicit(&rdmalloc_pd_slot_use[i], ~RDMALLOC_SLOT_HANDED, memory_order_seq_cst);
	rdmalloc_chunk_unlock();
}

int rdmalloc_chunks_detach_unused(struct ibv_pd *pd)
{
	return detach(pd, 1);
}

int rdmalloc_chunks_have_windows(const struct rdmalloc_heap *heap)
{
	int busy = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c && !busy; c = c->next)
		for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS && c->heap == heap; s++)
			busy |= c->reg[s].windows != 0;
	rdmalloc_chunk_unlock();
	return busy;
}

int rdmalloc_chunks_pinned(const struct rdmalloc_heap *heap)
{
	int pinned = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c && !pinned; c = c->next)
		pinned = c->heap == heap && c->pins;
	rdmalloc_chunk_unlock();
	return pinned;
}

size_t rdmalloc_chunks_count_regs(const struct rdmalloc_heap *heap)
{
	size_t n = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next)
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
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next) {
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
	int broken = c->reg[i].access == RDMALLOC_REG_BROKEN;
	int err = rdmalloc_region_change_access(c, i, access, new_keys, stamp, &old, &now);
	if (err) {
		if (!broken && c->reg[i].access == RDMALLOC_REG_BROKEN)
			(*changed)++; /* its keys stopped working: the generation says so */
		return err;
	}
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
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		atomic_store_explicit(&pds[s], NULL, memory_order_relaxed);
		atomic_store_explicit(&slot_pd[s], NULL, memory_order_relaxed);
		atomic_store_explicit(&slot_dereg_failed[s], 0, memory_order_relaxed);
	}
	pds_filling = 0;
	reg_gen++;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		pd_users[s] = 0;
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next) {
		for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++)
			rdmalloc_region_forget(c, i);
		/* The windows go, and so do the pins of calls under way in
		 * threads the child does not have (an elision between its
		 * pin and its record); the drop-in pins again for each elided
		 * region the child inherits (rdmalloc_chunk_pin_fork_child). */
		c->pins = 0;
		c->busy = 0;
		/* A discard under way (an on-demand heap's plain chunk) is
		 * the parent's thread's: its pages may keep their bytes. */
		if (c->discarding)
			c->stale = 1;
		c->discarding = 0;
		int half_done = c->state == RDMALLOC_CHUNK_GIVING || c->state == RDMALLOC_CHUNK_TAKING;
		if (rdmalloc_spec_on_demand(c->spec)) {
			/* Plain in the child: registered there on first use. */
			if (half_done) {
				c->state = RDMALLOC_CHUNK_LIVE;
				c->stale = 1;
				c->giving_next = NULL;
				atomic_store_explicit(&c->live_size, c->size, memory_order_relaxed);
			}
			if (c->held && !atomic_load(&c->dereg_failed)) {
				c->held = 0;
				rdmalloc_held_bytes -= c->map_size;
			}
			continue;
		}
		/* A give-back or take-back the parent was in the middle of is
		 * not the child's to finish: the chunk is left given back, its
		 * bytes whatever they are (zeroed when committed). */
		if (c->state == RDMALLOC_CHUNK_GIVING)
			rdmalloc_count_held(c, -1);
		if (half_done) {
			c->state = RDMALLOC_CHUNK_GONE;
			c->stale = 1;
			c->giving_next = NULL;
			c->held = 0;
			rdmalloc_held_bytes -= c->map_size;
		}
	}
	/* Reserve chunks stay, without registrations: a hand-over registers
	 * them with the child's PDs.  Those the parent's thread was making
	 * are not the child's. */
	rdmalloc_held_bytes -= rdmalloc_reserves_forget();
	rdmalloc_implicit_forget();
	rdmalloc_give_back_fork_child();
}

size_t rdmalloc_chunks_unregistered(void)
{
	size_t n = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = rdmalloc_chunk_list; c; c = c->next)
		n += (c->state == RDMALLOC_CHUNK_LIVE || c->state == RDMALLOC_CHUNK_RESERVED) && !rdmalloc_registered_pds(c);
	rdmalloc_chunk_unlock();
	return n;
}
