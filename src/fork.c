/* SPDX-License-Identifier: MIT */
/*
 * fork.c - fork(): our locks across it, and the child's registrations.
 *
 * Lock order (doc/design.md): init_mutex -> heap_mutex -> pd_mutex -> tc_mutex
 * -> jemalloc's locks -> chunk_mutex, odp_mutex (leaves, never held
 * together).  pthread_atfork runs prepare handlers in reverse
 * order of registration, so:
 *  - the inner handler (chunk and ODP mutexes) is registered before jemalloc
 *    initialises (a priority constructor, and the first allocation of the
 *    LD_PRELOAD drop-in), and its prepare runs after jemalloc's;
 *  - the outer handler (init, heap, PD and cache mutexes) is registered right
 *    after jemalloc initialised, still at load, and its prepare runs before
 *    jemalloc's.  It first takes the init mutex: fork() waits for a lazy
 *    initialisation under way in another thread (init.c), which the child
 *    could neither finish nor safely run again.
 * The child keeps working memory but none of the parent's registrations:
 * they name the parent's pages, and deregistering them through the
 * inherited verbs context would take them from the parent.
 */
#include "fork.h"

#include <pthread.h>

#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "je.h"
#include "log.h"
#include "odp.h"
#include "pd.h"

static void inner_prepare(void)
{
	rdmalloc_chunk_lock();
	rdmalloc_odp_lock();
}

static void inner_release(void)
{
	rdmalloc_odp_unlock();
	rdmalloc_chunk_unlock();
}

static void outer_prepare(void)
{
	rdmalloc_init_lock();
	rdmalloc_heap_lock_all();
}

static void outer_parent(void)
{
	rdmalloc_heap_unlock_all();
	rdmalloc_init_unlock();
}

static void outer_child(void)
{
	rdmalloc_heap_unlock_all();
	rdmalloc_pd_forget();
	rdmalloc_init_unlock();
}

static void register_inner(void)
{
	if (pthread_atfork(inner_prepare, inner_release, inner_release))
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
	size_t sz = sizeof(unsigned);
	unsigned narenas;
	je_mallctl("arenas.narenas", &narenas, &sz, NULL, 0); /* initialises jemalloc */
	rdmalloc_fork_register_outer();
}
