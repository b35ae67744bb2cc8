/* SPDX-License-Identifier: MIT */
/* init.c - one-time initialisation: the allocator's core, then RDMA on first need (init.h). */
#include "init.h"
#include "jemalloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* environ (_GNU_SOURCE) */

#include "big.h"
#include "fork.h"
#include "heap.h"
#include "hooks.h"
#include "log.h"
#include "lock.h"
#include "options.h"
#include "pd.h"
#include "rdma_malloc.h"
#include "verbs.h"

atomic_int rdmalloc_ready;
atomic_int rdmalloc_core_ready;
/* The INIT lock (lock.h) is held across the whole initialisation and taken
 * first by fork(): no fork happens while a thread initialises.  With
 * pthread_once a child forked mid-initialisation ran it again from the
 * start (glibc restarts a once of an older fork generation) and blocked on
 * locks that the initialising thread held at fork, libibverbs' device-list
 * lock among them. */

static const char *env(const char *name)
{
	return getenv(name);
}

/* The program's MALLOC_CONF reaches our jemalloc, but for the options
 * rdmalloc sets after it (RDMALLOC_JE_CONF_HARDER, jemalloc.h): said once,
 * at info level, since they may have been meant for the program's own
 * jemalloc, which takes them. */
static void note_overridden_malloc_conf(void)
{
	static const char *const kept[] = { "retain:", "oversize_threshold:" };
	size_t len;
	for (const char *o = NULL; (o = rdmalloc_heap_malloc_conf_next(o, &len));)
		for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
			if (!strncmp(o, kept[i], strlen(kept[i])))
				rdmalloc_log(RDMALLOC_LOG_INFO, "MALLOC_CONF's %.*s is not taken by rdmalloc's jemalloc, "
					     "which keeps %s (doc/options.md, \"MALLOC_CONF\")",
					     (int)len, o, RDMALLOC_JE_CONF_HARDER);
}

static void init_core(void)
{
	rdmalloc_fork_register_inner(); /* before jemalloc initialises */
	rdmalloc_heap_jemalloc_boot(); /* the first call into jemalloc: jemalloc.h */
	rdmalloc_options_parse(&rdmalloc_opts, env);
	rdmalloc_options_warn_unknown(environ);
	rdmalloc_big_init();
	if (!rdmalloc_heap_jemalloc_retains()) /* RDMALLOC_JE_CONF_HARDER not taken: another jemalloc? */
		rdmalloc_log(RDMALLOC_LOG_WARN, "jemalloc runs with retain:false: every slab and large block "
			     "is a chunk of its own, registered alone");
	note_overridden_malloc_conf();
	rdmalloc_fork_register_outer(); /* jemalloc is initialised now */
	rdmalloc_heap_init();
	rdmalloc_stats_at_exit(); /* RDMALLOC_STATS (stats_exit.c) */
	atomic_store_explicit(&rdmalloc_core_ready, 1, memory_order_release);
}

static void init_rdma(void)
{
	rdmalloc_verbs_init();
	rdmalloc_pd_init();
	rdmalloc_heap_init_default(rdmalloc_opts.access);
	atomic_store_explicit(&rdmalloc_ready, 1, memory_order_release);
}

void rdmalloc_init_slow(int rdma)
{
	int saved = errno; /* the parsers use errno: callers must not see it */
	rdmalloc_lock(RDMALLOC_LOCK_INIT);
	if (!atomic_load_explicit(&rdmalloc_core_ready, memory_order_relaxed))
		init_core();
	if (rdma && !atomic_load_explicit(&rdmalloc_ready, memory_order_relaxed))
		init_rdma();
	rdmalloc_unlock(RDMALLOC_LOCK_INIT);
	errno = saved;
}
