/* SPDX-License-Identifier: MIT */
/*
 * jemalloc_conf.c - compiled-in options of the private jemalloc of
 * librdmalloc.so (read when it initialises; MALLOC_CONF in the environment
 * still overrides them, for this copy as for any jemalloc, but for
 * RDMALLOC_JE_CONF_HARDER: jemalloc.h).
 *
 * Thread caches keep blocks up to 1 MiB instead of jemalloc's 32 KiB:
 * message-sized buffers, the common RDMA case, are then allocated and freed
 * without the arena's lock and extent work.  The blocks cached are in chunks
 * already registered; jemalloc's cache GC gives idle ones back to the arena.
 *
 * Not linked into the LD_PRELOAD drop-in, which keeps jemalloc's 32 KiB: a
 * program's realloc growth needs freed large blocks back in the arena to
 * grow in place.
 * Figures: doc/benchmarks.md, section 2 and section 3's "Thread caches".
 *
 * Both take RDMALLOC_JE_CONF (one automatic arena) and, after MALLOC_CONF,
 * RDMALLOC_JE_CONF_HARDER (retain, no eager purge of big frees): jemalloc.h.
 */
#include "je.h"
#include "jemalloc.h"

const char *je_malloc_conf = RDMALLOC_JE_CONF ",tcache_max:1048576";
const char *je_malloc_conf_2_conf_harder = RDMALLOC_JE_CONF_HARDER;
