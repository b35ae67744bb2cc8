/* SPDX-License-Identifier: MIT */
/* jemalloc.c - the private jemalloc as a whole: starting it, its
 * process-wide settings, binding a thread to an arena, and the probes the
 * tests read.  Heaps and their arenas are heap.c's. */
#include "jemalloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "counters.h"
#include "je.h"
#include "log.h"
#include "tls.h"

int rdmalloc_arena_ctl(unsigned arena, const char *what, void *oldp, size_t *oldlen, void *newp, size_t newlen)
{
	char name[64];
	snprintf(name, sizeof(name), "arena.%u.%s", arena, what);
	return je_mallctl(name, oldp, oldlen, newp, newlen);
}

const void *rdmalloc_arena_hooks(unsigned arena)
{
	extent_hooks_t *h = NULL;
	size_t sz = sizeof(h);
	if (rdmalloc_arena_ctl(arena, "extent_hooks", &h, &sz, NULL, 0))
		return NULL;
	return h;
}

const void *rdmalloc_default_extent_hooks(void)
{
	return rdmalloc_arena_hooks(0);
}

unsigned rdmalloc_automatic_arenas(void)
{
	unsigned n = 0;
	size_t sz = sizeof(n);
	if (je_mallctl("opt.narenas", &n, &sz, NULL, 0))
		return 0;
	return n;
}

void *rdmalloc_probe_malloc(size_t size)
{
	return je_malloc(size);
}

void rdmalloc_probe_free(void *p)
{
	je_free(p);
}

#ifdef RDMALLOC_FAULT_INJECTION
/* jemalloc 5.3's table of explicit caches (its tcache.c): MALLOCX_TCACHE_MAX
 * + 1 slots, each a cache, 0x1 (flushed), or once destroyed a link of the
 * list of free ids (NULL at its end). */
extern void **je_tcaches;
#define JE_TCACHE_SLOTS 4094

int rdmalloc_heap_je_cache_slot(unsigned id, void **value)
{
	void **t = __atomic_load_n(&je_tcaches, __ATOMIC_ACQUIRE);
	*value = NULL;
	if (!t || id >= JE_TCACHE_SLOTS)
		return RDMALLOC_JE_SLOT_UNKNOWN;
	void *v = __atomic_load_n(&t[id], __ATOMIC_RELAXED);
	*value = v;
	if (v == (void *)1)
		return RDMALLOC_JE_SLOT_FLUSHED;
	if (!v || ((uintptr_t)v >= (uintptr_t)t && (uintptr_t)v < (uintptr_t)(t + JE_TCACHE_SLOTS)))
		return RDMALLOC_JE_SLOT_FREE;
	return RDMALLOC_JE_SLOT_CACHE;
}
#else
int rdmalloc_heap_je_cache_slot(unsigned id, void **value)
{
	(void)id;
	*value = NULL;
	return RDMALLOC_JE_SLOT_UNKNOWN;
}
#endif

/* "thread.arena" by its MIB: every new thread of the drop-in is bound on its
 * first allocation, and a lookup by name walks the ctl tree. */
static size_t bind_mib[2];
static size_t bind_miblen;
static size_t cache_mib[3]; /* "thread.tcache.enabled" */
static size_t cache_miblen;

/*
 * jemalloc cleans a thread's state up in a pthread key destructor, and an
 * allocation from a destructor that runs later finds it "reincarnated":
 * served from arena 0 whatever arena the thread was bound to (jemalloc's
 * tsd.c).  That is memory of no chunk, which free() and rdma_free()
 * would reject.  So a key of ours, created just before jemalloc's
 * (destructors run in the order of their keys, in each round), marks a
 * thread ended before jemalloc's destructor runs: one the drop-in bound,
 * or one that allocated from an rdma_* heap (rdmalloc_heap_watch_thread);
 * and a thread whose first such allocation comes after it (in a late
 * destructor) is told by jemalloc's own choice of arena for it: the
 * drop-in reads thread.arena back as it binds, and the API looks up the
 * chunk of its first block (heap.c, rdmalloc_heap_mallocx_first).
 */
static pthread_key_t ending_key;
static int ending_key_ok;

static void thread_ends(void *unused)
{
	(void)unused;
	rdmalloc_tl.bound = RDMALLOC_TL_ENDED;
	rdmalloc_tl_watch = RDMALLOC_TL_ENDED;
}

static void make_ending_key(void)
{
	ending_key_ok = pthread_key_create(&ending_key, thread_ends) == 0;
}

extern pthread_key_t je_tsd_tsd; /* jemalloc's own key (its tsd_tls.h) */

int rdmalloc_heap_ending_key_first(void)
{
	return ending_key_ok && ending_key < je_tsd_tsd;
}

void rdmalloc_heap_jemalloc_boot(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, make_ending_key); /* before jemalloc's key */
	size_t sz = sizeof(unsigned);
	unsigned narenas;
	je_mallctl("arenas.narenas", &narenas, &sz, NULL, 0); /* initialises jemalloc */
	size_t len = 2;
	if (!bind_miblen && je_mallctlnametomib("thread.arena", bind_mib, &len) == 0)
		__atomic_store_n(&bind_miblen, len, __ATOMIC_RELEASE);
	len = 3;
	if (!cache_miblen && je_mallctlnametomib("thread.tcache.enabled", cache_mib, &len) == 0)
		__atomic_store_n(&cache_miblen, len, __ATOMIC_RELEASE);
}

const char *rdmalloc_heap_malloc_conf_next(const char *o, size_t *len)
{
	if (!o)
		o = getenv("MALLOC_CONF");
	else
		o = o[*len] == ',' ? o + *len + 1 : NULL;
	if (!o || !*o)
		return NULL;
	*len = strcspn(o, ",");
	return o;
}

int rdmalloc_heap_jemalloc_retains(void)
{
	bool retain = true;
	size_t sz = sizeof(retain);
	return je_mallctl("opt.retain", &retain, &sz, NULL, 0) != 0 || retain;
}

/* mallctl of @name, by its MIB when @miblen says it was looked up. */
static int ctl(const size_t *mib, size_t miblen, const char *name, void *oldp, size_t *oldlenp, void *newp,
	       size_t newlen)
{
	return miblen ? je_mallctlbymib(mib, miblen, oldp, oldlenp, newp, newlen)
		      : je_mallctl(name, oldp, oldlenp, newp, newlen);
}

void rdmalloc_heap_watch_thread(void)
{
	if (ending_key_ok && pthread_getspecific(ending_key))
		return;
	if (!ending_key_ok || pthread_setspecific(ending_key, &ending_key)) {
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "no pthread key for the end of threads: an allocation in a "
				  "thread's late key destructor may get memory of no chunk (counted in fallbacks)");
	}
}

int rdmalloc_heap_bind_thread(unsigned arena)
{
	size_t len = __atomic_load_n(&bind_miblen, __ATOMIC_ACQUIRE);
	unsigned now = 0;
	size_t sz = sizeof(now);
	int e = ctl(bind_mib, len, "thread.arena", NULL, NULL, &arena, sizeof(arena));
	if (!e)
		e = ctl(bind_mib, len, "thread.arena", &now, &sz, NULL, 0);
	if (e)
		return e;
	if (now != arena)
		return ESRCH; /* re-entered: its state is cleaned up, or jemalloc makes it */
	rdmalloc_heap_watch_thread();
	return 0;
}

int rdmalloc_heap_thread_cache_on(void)
{
	bool on = true;
	return ctl(cache_mib, __atomic_load_n(&cache_miblen, __ATOMIC_ACQUIRE), "thread.tcache.enabled", NULL, NULL,
		   &on, sizeof(on));
}

size_t rdmalloc_heap_tcache_max(void)
{
	size_t v = 0, sz = sizeof(v);
	return je_mallctl("arenas.tcache_max", &v, &sz, NULL, 0) ? 0 : v;
}
