/* SPDX-License-Identifier: MIT */
/* jemalloc.h - the private jemalloc as a whole (jemalloc.c). */
#ifndef RDMALLOC_JEMALLOC_H
#define RDMALLOC_JEMALLOC_H

#include <stddef.h>

#include "compiler.h"

/* Initialise the private jemalloc now (its fork handlers come in then).
 * It must be the first call into jemalloc: it creates, before jemalloc's,
 * the pthread key that marks a thread ended (rdmalloc_heap_watch_thread). */
void rdmalloc_heap_jemalloc_boot(void);
/* Whether jemalloc keeps unused address space (opt.retain). */
int rdmalloc_heap_jemalloc_retains(void);
/* The options of the environment's MALLOC_CONF in turn, as jemalloc reads
 * them: the one after @o (NULL: the first), a "key:value" of *@len bytes
 * not terminated; NULL after the last. */
const char *rdmalloc_heap_malloc_conf_next(const char *o, size_t *len);
/* Bind the calling thread to @arena (thread.arena): 0, ESRCH when
 * jemalloc re-enters itself on this thread and so serves it from arena 0
 * however bound (its state is cleaned up: the thread ends; or jemalloc
 * itself is creating it: RDMALLOC_TL_ENDED either way), or errno.  The
 * thread is watched (rdmalloc_heap_watch_thread) once bound. */
int rdmalloc_heap_bind_thread(unsigned arena);
/* Watch the calling thread: its words (tls.h: bound, rdmalloc_tl_watch)
 * become RDMALLOC_TL_ENDED before jemalloc's state of it is cleaned up,
 * when it ends.  Without a pthread key: logged once, counted in
 * fallbacks. */
void rdmalloc_heap_watch_thread(void);
/* Give the calling thread its automatic thread cache (thread.tcache.enabled),
 * with the arena it is bound to, where jemalloc's options leave it without
 * one until then (the drop-in's): 0 or errno. */
int rdmalloc_heap_thread_cache_on(void);
/* mallctl of "arena.<@arena>.<@what>": 0 or errno. */
int rdmalloc_arena_ctl(unsigned arena, const char *what, void *oldp, size_t *oldlen, void *newp, size_t newlen);

/* For the tests' crash reports: what jemalloc's table of explicit caches
 * holds for cache @id, in *@value: RDMALLOC_JE_SLOT_CACHE (a cache),
 * _FLUSHED (flushed: jemalloc makes it again at its next use), _FREE (the id
 * is on jemalloc's list of free ids: a link into the table, or NULL), or
 * _UNKNOWN (no table yet, or a build without the fault-injection hooks:
 * the table is jemalloc 5.3's own, read only there).  Racy, lock-free: for
 * a process that is dying. */
enum { RDMALLOC_JE_SLOT_UNKNOWN, RDMALLOC_JE_SLOT_CACHE, RDMALLOC_JE_SLOT_FLUSHED, RDMALLOC_JE_SLOT_FREE };
int rdmalloc_heap_je_cache_slot(unsigned id, void **value);

/* For the tests: whether the key that marks a thread ended runs its
 * destructor before jemalloc's (a lower index: glibc runs them in order). */
RDMALLOC_TESTABLE int rdmalloc_heap_ending_key_first(void);
/* For the tests: the largest block jemalloc's thread caches keep. */
RDMALLOC_TESTABLE size_t rdmalloc_heap_tcache_max(void);
/* For the tests: the hooks installed on any arena. */
RDMALLOC_TESTABLE const void *rdmalloc_arena_hooks(unsigned arena);
RDMALLOC_TESTABLE const void *rdmalloc_default_extent_hooks(void);
RDMALLOC_TESTABLE unsigned rdmalloc_automatic_arenas(void);
/* The private jemalloc's own malloc/free (automatic arenas), for the tests
 * that re-enter jemalloc from inside a hook, as libibverbs does under the
 * LD_PRELOAD drop-in. */
RDMALLOC_TESTABLE void *rdmalloc_probe_malloc(size_t size);
RDMALLOC_TESTABLE void rdmalloc_probe_free(void *p);

/*
 * jemalloc options every copy of ours is built with (je_malloc_conf; the
 * program's MALLOC_CONF may change them).
 * narenas: one automatic arena.  Every block of ours comes from a heap's
 * own arenas; the automatic ones serve only what jemalloc itself assigns a
 * thread (its reentrant calls from inside a hook among them).  With
 * jemalloc's default (4 per CPU), a drop-in program whose threads come and
 * go (mimalloc-bench's mleak) had jemalloc initialise three more, about
 * 90 KiB of metadata each.
 */
#define RDMALLOC_JE_CONF "narenas:1"
/*
 * Options the program's MALLOC_CONF cannot change (jemalloc reads
 * je_malloc_conf_2_conf_harder after it): without them registration would
 * no longer stay off the data path.
 * retain: every extent hook allocation is a chunk and its registration,
 * and jemalloc grows an arena by a geometric series of them only while it
 * retains; without it each slab and large block is a chunk of its own (a
 * registration each, thousands of MRs, a 2 MiB granule of address space
 * each), and RDMALLOC_CHUNK_MAX (retain_grow_limit) is refused.
 * oversize_threshold: jemalloc purges a freed extent of 8 MiB or more at
 * once, not after the decay time; for us that is a chunk given back and
 * registered again on every free and malloc of a big buffer.  1 TiB: never
 * (RDMALLOC_DECAY_MS is the knob).
 */
#define RDMALLOC_JE_CONF_HARDER "retain:true,oversize_threshold:1099511627776"

#endif
