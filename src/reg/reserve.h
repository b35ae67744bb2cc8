/* SPDX-License-Identifier: MIT */
/*
 * reserve.h - each heap's reserve: the chunk its next growth will ask for,
 * mapped and registered ahead by a background thread, so that an
 * allocation waits for ibv_reg_mr only when growth outruns it
 * (doc/design.md, "The reserve").  This file predicts the next size,
 * queues the work and runs the thread; chunk.c makes, parks, hands over
 * and drops the reserve's chunks.
 */
#ifndef RDMALLOC_RESERVE_H
#define RDMALLOC_RESERVE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "crew.h"

struct rdmalloc_chunk;
struct rdmalloc_chunk_spec;
struct rdmalloc_heap;

/*
 * One heap's reserve, inside its chunk spec (zeroed with the heap).  Under
 * the chunk lock, but for spec and heap, set at its first growth.
 */
struct rdmalloc_reserve {
	struct rdmalloc_chunk_spec *spec;
	struct rdmalloc_heap *heap;
	struct rdmalloc_chunk *ready; /* RDMALLOC_CHUNK_RESERVED, in the chunk list; or NULL */
	size_t next;    /* the size predicted for the next growth; 0: none (yet, or over the cap) */
	size_t filling;   /* the size of the chunk the thread is making for it, SIZE_MAX while it
			     drops the ready one; 0: neither */
	uint64_t grown_ns; /* its heap's last growth (rdmalloc_now_ns()); 0: it shrank since */
	unsigned fill_seq; /* fills started: a growth waits for one fill, not for the next */
	size_t fill_held; /* bytes held (held_bytes) for that chunk until it is parked */
	struct rdmalloc_chunk *dropping; /* chunks of its, out of the list, being unmade (linked
					    by next; a fill discarded and a relief's drop may
					    overlap): a close waits for them, a fork child
					    un-counts them (rdmalloc_reserves_forget) */
	int listed;     /* on the list of reserves (from its first growth until closed) */
	int queued;     /* on the thread's work queue */
	int closed;     /* its heap is being destroyed: never filled again (unless that fails) */
	int cancelled;  /* the chunk being made is dropped when made (a trim) */
	int late;       /* the work under way outlasted an allocation's wait: no allocation waits for
			   it again (rdmalloc_fill_wait_ns) */
	struct rdmalloc_reserve *list_next, *queue_next;
};

/*
 * The smallest of jemalloc's page size classes (4 per doubling: 2, 2.5, 3,
 * 3.5, 4, 5 ... MiB) above @last, capped at the largest class <= @limit
 * (arena.<i>.retain_grow_limit; 0: none): the size jemalloc's next
 * growth asks the alloc hook for after one of @last bytes.
 */
RDMALLOC_TESTABLE size_t rdmalloc_reserve_next_size(size_t last, size_t limit);

/*
 * A heap of @spec grew by @size bytes (chunk lock held): predict its next
 * growth and queue the thread to have that chunk ready, unless it is more
 * than RDMALLOC_RESERVE_SHARE of what the heap holds and more than
 * RDMALLOC_RESERVE_FLOOR (a one-off big request makes jemalloc's series
 * jump; the growth after it is then registered inline).  Without
 * RDMALLOC_RESERVE, or once the heap is closed, no reserve; the decay's
 * tick is wanted all the same (rdmalloc_reserve_want_tick).
 */
#define RDMALLOC_RESERVE_SHARE 4 /* a quarter */
#define RDMALLOC_RESERVE_FLOOR ((size_t)8 << 20)
void rdmalloc_reserve_grown(struct rdmalloc_chunk_spec *spec, struct rdmalloc_heap *heap, size_t size);
/* A heap of @spec now holds pinned memory (a growth, a big block, a
 * registration on first use): unless its decay time is -1, the thread is
 * wanted, to tick its decay while the program makes no call (chunk lock
 * held; started as below).  rdmalloc_reserve_grown() calls it. */
void rdmalloc_reserve_want_tick(const struct rdmalloc_chunk_spec *spec);
/* A chunk of @r's heap was given back (chunk lock held): the heap shrinks,
 * its ready chunk is dropped. */
void rdmalloc_reserve_shrunk(struct rdmalloc_reserve *r);

/* Whether the thread was asked for (a reserve or a tick) and is not
 * started: the caller, outside every lock of ours and of jemalloc, calls
 * rdmalloc_reserve_start().  Never from a hook: pthread_create takes
 * glibc's TLS lock, whose holder may be allocating into the very arena
 * whose growth lock the hook holds. */
extern RDMALLOC_TESTABLE atomic_int rdmalloc_reserve_thread_state;
static inline int rdmalloc_reserve_start_wanted(void)
{
	return atomic_load_explicit(&rdmalloc_reserve_thread_state, memory_order_relaxed) == 1;
}
/* Start the registration thread (once; a failure is logged once, counted
 * in fallbacks, and growth keeps registering inline).  No lock held. */
RDMALLOC_TESTABLE void rdmalloc_reserve_start(void);

/* Whether a call wanted a thread of ours started: the reserve's (above) or
 * the crew's workers (crew.h).  Then, outside every lock, start them. */
static inline int rdmalloc_threads_wanted(void)
{
	return rdmalloc_reserve_start_wanted() || rdmalloc_crew_start_wanted();
}
static inline void rdmalloc_threads_start_wanted(void)
{
	if (__builtin_expect(rdmalloc_reserve_start_wanted(), 0))
		rdmalloc_reserve_start();
	if (__builtin_expect(rdmalloc_crew_start_wanted(), 0))
		rdmalloc_crew_start();
}

/*
 * The thread also runs @tick (the heap layer's decay of idle memory, set
 * once at initialisation) whenever it is idle and the delay @tick last
 * returned has passed (0: never again): jemalloc decays only when
 * allocations tick it, so an idle program would otherwise keep what it
 * freed registered for ever.  No lock of ours held when it runs.
 */
void rdmalloc_reserve_set_tick(uint64_t (*tick)(void));

/* Its heap is being destroyed: wait for a chunk being made for it, then
 * release its ready chunk (counted in reserve_discards).  No lock of the
 * table held (lock.h): the wait is as long as the thread's ibv_reg_mr. */
void rdmalloc_reserve_close(struct rdmalloc_reserve *r);

/* 1 if @r is closed, unlisted, with nothing being made, dropped or ready:
 * no growth, relief or thread touches it any more until
 * rdmalloc_reserve_reopen().  Chunk lock not held (it takes it). */
int rdmalloc_reserve_closed(struct rdmalloc_reserve *r);

/* The destroy of its heap failed: growths fill it again.  Under the heap
 * layer's locks, which a destroy takes to mark its heap as its own. */
void rdmalloc_reserve_reopen(struct rdmalloc_reserve *r);

/* In a fork child (no lock): @r's heap is alive here, whatever destroy of
 * it a thread of the parent was in: growths fill it again. */
void rdmalloc_reserve_fork_child_reopen(struct rdmalloc_reserve *r);

/* Closes waiting for the thread's work on their reserve (tests). */
RDMALLOC_TESTABLE unsigned rdmalloc_reserve_closes_waiting(void);
/* Memory pressure or a trim: release every ready chunk (reserve_discards;
 * one an attach or a detach works on is waited for up to
 * rdmalloc_fill_wait_ns, then kept) and forget the queue; chunks being
 * made are dropped when made, or, with @wait (memory pressure: what they
 * hold is wanted now), waited for (up to rdmalloc_fill_wait_ns) and
 * dropped.  Returns the bytes released.  No lock held. */
size_t rdmalloc_reserves_drop(int wait);
/*
 * How long an allocation waits for the thread (a growth for the chunk being
 * made for it, a relief for the fills under way): the thread calls
 * ibv_reg_mr and its provider, which may take a lock that the allocating
 * thread holds (the program called malloc holding it), so no allocation
 * waits for it without end.  Past the deadline the growth registers its
 * own chunk, the relief goes on without what the fills hold, and the
 * thread's chunk is dropped when made; counted in reserve_wait_timeouts
 * and fallbacks, said once.  That work is then late: until it ends, no
 * allocation waits for it again, so that one stuck call costs one wait,
 * not one per relief or growth.  A commit waits as long for another
 * thread's give-back or take-back of its chunk (giveback.c).  Tests
 * shorten it.
 */
#define RDMALLOC_FILL_WAIT_NS (5ull * 1000000000u)
extern RDMALLOC_TESTABLE uint64_t rdmalloc_fill_wait_ns;
/* One wait on the chunk lock (held, released meanwhile) for work another
 * thread does, bounded as above: the first call (*@deadline 0) starts the
 * bound; 1, without waiting, once it has passed (the caller stops). */
int rdmalloc_fill_wait(uint64_t *deadline);
/* @r's work under way outlasted a wait: late, and its chunk dropped when
 * made (chunk lock held). */
void rdmalloc_reserve_late_locked(struct rdmalloc_reserve *r);
/* An allocation stopped waiting for the thread (@what: what it waited
 * for): counted and said, as above.  No lock held. */
void rdmalloc_reserve_wait_timed_out(const char *what);
/* Between a relief of memory pressure and its retry (hold.c): the thread
 * starts no chunk, so that another heap's reserve does not take what went
 * back for the retry.  Counted: every hold_off is followed by one resume.
 * Chunk lock held. */
void rdmalloc_reserves_hold_off_locked(void);
void rdmalloc_reserves_resume_locked(void);
/* Wait until the thread has made every chunk queued (or is not running):
 * for tests that compare counters.  No lock held. */
RDMALLOC_TESTABLE void rdmalloc_reserves_settle(void);
/*
 * fork() around the thread (api/fork.c).  coming, in the outer prepare,
 * stops the thread from starting work: none starts while jemalloc's
 * prepare runs.  Then, before the inner locks, prepare (which stops it too,
 * should the outer handler not be registered yet) waits until it is doing
 * none, so that the child inherits no chunk half made or half dropped, no
 * count half taken and no lock of libibverbs that the thread held inside
 * ibv_reg_mr; parent lets it go on (the child forgets it).  The thread
 * needs none of the inner group but the chunk lock, which prepare releases
 * while it waits.  It waits until @deadline_ns (rdmalloc_now_ns()'s clock)
 * at most, since a verbs call of the thread's may not end (one that frees
 * into jemalloc, whose prepare has run), and returns the chunks still
 * being made or dropped then: the caller says so (rdmalloc_reserves_forget
 * copes with them in the child).  No lock held.
 */
void rdmalloc_reserves_fork_coming(void);
unsigned rdmalloc_reserves_fork_prepare(uint64_t deadline_ns);
void rdmalloc_reserves_fork_parent(void);
/* In a fork child (single-threaded, chunk lock free): there is no thread;
 * chunks the parent's thread was making are not the child's.  Returns the
 * bytes held for them (the caller un-holds them). */
size_t rdmalloc_reserves_forget(void);

#endif
