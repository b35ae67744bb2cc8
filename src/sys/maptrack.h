/* SPDX-License-Identifier: MIT */
/*
 * maptrack.h - test builds (-Dfault_injection=true): the library's own
 * mappings, so that an unmap, a remap or a discard (MADV_DONTNEED) of
 * memory it did not map, or has unmapped since, aborts there and then.
 *
 * Why: a stray munmap or MADV_DONTNEED (a chunk released twice, a give-back
 * landing after its chunk's release) hits memory that is someone else's by
 * then: jemalloc's own, a thread's stack, the program's.  It reads as zeros
 * once the hole is mapped again, far from the cause and rarely.  os.c calls
 * these at each of its mmap, mremap, munmap and MADV_DONTNEED; elsewhere
 * they are empty.
 */
#ifndef RDMALLOC_MAPTRACK_H
#define RDMALLOC_MAPTRACK_H

#include <stddef.h>

#ifdef RDMALLOC_FAULT_INJECTION
/* [@p, +@len), page-rounded, was just mapped by the library. */
void rdmalloc_maps_add(const void *p, size_t len);
/* @what (the call, for the message) of [@p, +@len): abort unless every page
 * of it is in the library's mappings; with @forget, they are not any more. */
void rdmalloc_maps_check(const void *p, size_t len, const char *what, int forget);
#else
static inline void rdmalloc_maps_add(const void *p, size_t len)
{
	(void)p, (void)len;
}
static inline void rdmalloc_maps_check(const void *p, size_t len, const char *what, int forget)
{
	(void)p, (void)len, (void)what, (void)forget;
}
#endif

#endif
