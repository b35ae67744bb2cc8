/* SPDX-License-Identifier: MIT */
/* jemalloc_conf.c - compiled-in options of the drop-in's private jemalloc
 * (src/heap/jemalloc_conf.c says why the API library's differ). */
#include "je.h"
#include "jemalloc.h"

/* tcache:false: a thread gets its automatic thread cache only once it is
 * bound to the preload heap's arena (malloc.c), so that it is associated
 * with that arena alone.  Enabled by jemalloc's default, it was created at
 * the thread's first jemalloc call (the binding), associated with the
 * automatic arena, moved to ours, and its stats merged on the way: locks
 * that threads starting together contended on (bench/alloc leak, 1.05-1.10
 * of plain jemalloc's CPU before, 0.94-1.04 after, in the same runs;
 * doc/benchmarks.md, "Fifth run"). */
const char *je_malloc_conf = RDMALLOC_JE_CONF ",tcache:false";
