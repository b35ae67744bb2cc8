/* SPDX-License-Identifier: MIT */
/* jemalloc_conf.c - compiled-in options of the drop-in's private jemalloc
 * (src/heap/jemalloc_conf.c says why the API library's differ). */
#include <string.h>

#include "je.h"
#include "jemalloc.h"
#include "preload.h"

/* tcache:false: a thread gets its automatic thread cache only once it is
 * bound to the preload heap's arena (malloc.c), so that it is associated
 * with that arena alone.  Enabled by jemalloc's default, it was created at
 * the thread's first jemalloc call (the binding), associated with the
 * automatic arena, moved to ours, and its stats merged on the way: locks
 * that threads starting together contended on (bench/alloc leak, 1.05-1.10
 * of plain jemalloc's CPU before, 0.94-1.04 after, in the same runs;
 * doc/benchmarks.md, "Fifth run"). */
const char *je_malloc_conf = RDMALLOC_JE_CONF ",tcache:false";
const char *je_malloc_conf_2_conf_harder = RDMALLOC_JE_CONF_HARDER;

/* Whether the program's MALLOC_CONF leaves threads their cache: jemalloc
 * reads it after the options above, so its last "tcache:" is jemalloc's;
 * the drop-in honours "tcache:false" by not giving the cache at binding. */
int rdmalloc_preload_thread_cache_wanted(void)
{
	int want = 1;
	size_t len;
	for (const char *o = NULL; (o = rdmalloc_heap_malloc_conf_next(o, &len));)
		if (!strncmp(o, "tcache:", 7))
			want = len != 12 || strncmp(o + 7, "false", 5) != 0;
	return want;
}
