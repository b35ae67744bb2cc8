/* SPDX-License-Identifier: MIT */
/*
 * fork.c - fork(): our locks across it, and the child's registrations.
 *
 * Every lock is in lock.h's table, in the one order they nest; fork takes
 * them all in that order, in groups around stdio's list lock and
 * jemalloc's own locks.
 * pthread_atfork runs prepare handlers in reverse order of registration, so:
 *  - the inner handler (the leaves) is registered before jemalloc
 *    initialises (a priority constructor, and the first allocation of the
 *    LD_PRELOAD drop-in), and its prepare runs after jemalloc's;
 *  - the outer handler is registered right after jemalloc initialised,
 *    still at load, and its prepare runs before jemalloc's.  It first
 *    takes the init lock: fork() waits for a lazy initialisation
 *    under way in another thread (init.c), which the child could neither
 *    finish nor safely run again.  Then stdio's list lock (stdio_fork.h);
 *    it waits for the decay's and the trims' work on the arenas (heap.h),
 *    takes the outer locks, and waits for threads of ours being started
 *    and for our verbs calls (os.h, verbs.h).
 * No thread holds a jemalloc lock while it waits for an outer lock, and no
 * thread holding an inner lock allocates: so each group can wait for its
 * holders.  The one jemalloc lock held across our code is an arena's growth
 * lock, around the alloc hook; what the hook's verbs calls allocate does not
 * reach jemalloc (preload/nest.c, doc/design.md).
 * The child keeps working memory but none of the parent's registrations:
 * they name the parent's pages, and deregistering them through the
 * inherited verbs context would take them from the parent.
 */
#include "fork.h"

#include <pthread.h>

#include "chunk.h"
#include "counters.h"
#include "crew.h"
#include "heap.h"
#include "lock.h"
#include "log.h"
#include "mw.h"
#include "nocancel.h"
#include "os.h"
#include "pd.h"
#include "reserve.h"
#include "stdio_fork.h"
#include "verbs.h"

RDMALLOC_TESTABLE uint64_t rdmalloc_fork_wait_ns = RDMALLOC_FORK_WAIT_NS;

/* The fork under way (the outer locks held from the outer prepare to the
 * outer parent or child, which run after the inner ones): when its waits
 * end, and whether it already went ahead (one fallback per fork). */
static uint64_t deadline;
static int went_ahead;
/* The forking thread's cancellation state, off during its fork. */
static RDMALLOC_TLS int fork_cancel;

static void fork_ends(void)
{
	deadline = 0;
	went_ahead = 0;
}

/* A wait gave up with @left under way: counted, once per fork; whether it
 * is the fork's first (the caller then says what was left). */
static int goes_ahead(unsigned left)
{
	if (!left || went_ahead)
		return 0;
	went_ahead = 1;
	STAT_INC(fallbacks); /* no allocation, no lock of ours: a fork handler */
	return 1;
}

static void inner_prepare(void)
{
	if (!deadline) /* the outer handler is not registered yet (fork.h) */
		deadline = rdmalloc_now_ns() + rdmalloc_fork_wait_ns;
	unsigned fills = rdmalloc_reserves_fork_prepare(deadline); /* the reserve's thread idle first */
	unsigned parts = rdmalloc_crew_fork_prepare(deadline);     /* then the crew's workers */
	if (goes_ahead(fills + parts))
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "fork() went ahead after %llu ms with rdmalloc's threads at "
				  "work (%u reserve chunks, %u crew parts under way): the child does not get "
				  "that work, and if it uses RDMA it may hang on the provider's locks (counted in "
				  "fallbacks)", (unsigned long long)(rdmalloc_fork_wait_ns / 1000000u), fills, parts);
	rdmalloc_locks_prepare(RDMALLOC_LOCKS_INNER);
}

static void inner_parent(void)
{
	fork_ends();
	rdmalloc_locks_parent(RDMALLOC_LOCKS_INNER);
	rdmalloc_crew_fork_parent();
	rdmalloc_reserves_fork_parent();
}

static void inner_child(void)
{
	fork_ends();
	rdmalloc_locks_child(RDMALLOC_LOCKS_INNER);
	rdmalloc_crew_fork_child();
}

/* The outer locks, then every verbs call of ours under way (verbs.h):
 * before jemalloc's prepare, whose locks such a call may want. */
static void outer_prepare(void)
{
	/* fork() is no cancellation point, and a thread cancelled in one of
	 * our waits would unwind holding our locks: off until the end of the
	 * fork (outer_parent, outer_child). */
	fork_cancel = rdmalloc_cancel_off();
	/* INIT first: fork() waits for a lazy initialisation under way, and
	 * its holder opens FILEs (libibverbs reads its configuration). */
	rdmalloc_locks_prepare(RDMALLOC_LOCKS_FIRST);
	/* Then stdio's list lock, before anything an allocation under a
	 * FILE's lock may wait for: the outer locks, the stop of the purges,
	 * the marks a section or a start waits on (stdio_fork.h).  But last
	 * when our registrations open FILEs themselves: the work under way
	 * that the waits below wait for would wait for it. */
	int stdio_last = rdmalloc_verbs_open_files();
	if (!stdio_last)
		rdmalloc_stdio_fork_prepare();
	/* This fork's own bound, from here (fork.h). */
	uint64_t until = rdmalloc_now_ns() + rdmalloc_fork_wait_ns;
	/* The decay's and the trims' work on the arenas, which holds none of
	 * our locks but calls verbs and jemalloc: a child would inherit an
	 * arena half purged, which jemalloc never purges again. */
	unsigned purges = rdmalloc_heap_fork_prepare(until);
	rdmalloc_locks_prepare(RDMALLOC_LOCKS_OUTER);
	deadline = until;
	if (goes_ahead(purges))
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "fork() went ahead with rdmalloc giving memory back from %u "
				  "heaps after %llu ms: in the child, the memory being given back stays with "
				  "that heap and its arena may not give memory back again (counted in "
				  "fallbacks)", purges, (unsigned long long)(rdmalloc_fork_wait_ns / 1000000u));
	unsigned threads = rdmalloc_os_threads_fork_prepare(deadline);
	if (goes_ahead(threads))
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "fork() went ahead with %u threads of rdmalloc's still starting "
				  "after %llu ms: a child may hang on a lock their start held (counted in "
				  "fallbacks)", threads, (unsigned long long)(rdmalloc_fork_wait_ns / 1000000u));
	unsigned calls = rdmalloc_verbs_fork_prepare(deadline);
	if (goes_ahead(calls))
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "fork() went ahead with %u verbs calls of rdmalloc's under way "
				  "after %llu ms: a child that uses RDMA may hang on the provider's locks (counted in "
				  "fallbacks)", calls, (unsigned long long)(rdmalloc_fork_wait_ns / 1000000u));
	/* No new work for the reserve's thread or the crew's workers while
	 * jemalloc's prepare runs: the inner prepare waits for what is under
	 * way, and a call started now might free into jemalloc then. */
	rdmalloc_reserves_fork_coming();
	rdmalloc_crew_fork_coming();
	if (stdio_last)
		rdmalloc_stdio_fork_prepare();
}

static void outer_parent(void)
{
	rdmalloc_verbs_fork_parent();
	rdmalloc_os_threads_fork_parent();
	rdmalloc_heap_fork_parent();
	rdmalloc_locks_parent(RDMALLOC_LOCKS_OUTER);
	rdmalloc_stdio_fork_parent();
	rdmalloc_locks_parent(RDMALLOC_LOCKS_FIRST);
	rdmalloc_cancel_on(fork_cancel);
}

/* The child has one thread, and none of the parent's registrations: each
 * layer forgets its part, taking no lock. */
static void outer_child(void)
{
	rdmalloc_pd_forget();
	rdmalloc_chunks_forget_registrations();
	rdmalloc_pd_fork_child_hook(); /* the drop-in's elided regions: pinned again */
	rdmalloc_mw_forget();
	rdmalloc_heap_fork_child();
	atomic_store_explicit(&rdmalloc_counters.mrs, 0, memory_order_relaxed);
	atomic_store_explicit(&rdmalloc_counters.registered_bytes, 0, memory_order_relaxed);
	rdmalloc_counters_fork_child();
	rdmalloc_verbs_fork_child();
	rdmalloc_os_threads_fork_child();
	rdmalloc_locks_child(RDMALLOC_LOCKS_OUTER);
	rdmalloc_stdio_fork_child();
	rdmalloc_locks_child(RDMALLOC_LOCKS_FIRST);
	rdmalloc_cancel_on(fork_cancel);
}

static void register_inner(void)
{
	if (pthread_atfork(inner_prepare, inner_parent, inner_child))
		rdmalloc_log(RDMALLOC_LOG_ERROR, "pthread_atfork failed: fork() may deadlock the child");
}

static void register_outer(void)
{
	if (pthread_atfork(outer_prepare, outer_parent, outer_child))
		rdmalloc_log(RDMALLOC_LOG_ERROR, "pthread_atfork failed: fork() may deadlock the child");
}

static pthread_once_t inner_once = PTHREAD_ONCE_INIT, outer_once = PTHREAD_ONCE_INIT;

void rdmalloc_fork_register_inner(void)
{
	pthread_once(&inner_once, register_inner);
}

void rdmalloc_fork_register_outer(void)
{
	pthread_once(&outer_once, register_outer);
}

/*
 * At load, before jemalloc's own constructor (default priority) in this
 * object: the inner handler, then jemalloc's initialisation (which registers
 * its handlers), then the outer one.  Both are then in place before any
 * thread can be inside rdmalloc, even while it initialises.  (The drop-in's
 * first allocation may have come earlier: it registered the inner handler
 * and initialised jemalloc then, and these calls find both done.)
 */
__attribute__((constructor(101))) static void fork_early(void)
{
	rdmalloc_fork_register_inner();
	rdmalloc_heap_jemalloc_boot();
	rdmalloc_fork_register_outer();
}
