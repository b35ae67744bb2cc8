/* SPDX-License-Identifier: MIT */
/*
 * maptrack.c - the library's own mappings, checked at every unmap, remap
 * and discard (maptrack.h).  Compiled to nothing unless the build has
 * -Dfault_injection=true.  A flat table, searched whole under the MAPS
 * lock: test builds hold a few thousand mappings at most.
 */
#include "maptrack.h"

#ifdef RDMALLOC_FAULT_INJECTION

#include <stdint.h>

#include "compiler.h"
#include "lock.h"
#include "log.h"

#define PAGE ((uintptr_t)4096)
#define MAPS_MAX 65536

static struct {
	uintptr_t lo, hi;
} maps[MAPS_MAX];
static size_t nmaps;

/* The pages [@lo, @hi) that [@p, +@len) touches. */
static void pages_of(const void *p, size_t len, uintptr_t *lo, uintptr_t *hi)
{
	*lo = (uintptr_t)p & ~(PAGE - 1);
	*hi = align_up((uintptr_t)p + len, PAGE);
}

/* MAPS held. */
static void add_locked(uintptr_t lo, uintptr_t hi)
{
	if (nmaps == MAPS_MAX) {
		rdmalloc_unlock(RDMALLOC_LOCK_MAPS);
		rdmalloc_fatal("maptrack: more than %d mappings", MAPS_MAX);
	}
	maps[nmaps].lo = lo;
	maps[nmaps].hi = hi;
	nmaps++;
}

void rdmalloc_maps_add(const void *p, size_t len)
{
	uintptr_t lo, hi;
	pages_of(p, len, &lo, &hi);
	rdmalloc_lock(RDMALLOC_LOCK_MAPS);
	add_locked(lo, hi);
	rdmalloc_unlock(RDMALLOC_LOCK_MAPS);
}

void rdmalloc_maps_check(const void *p, size_t len, const char *what, int forget)
{
	uintptr_t lo, hi;
	pages_of(p, len, &lo, &hi);
	rdmalloc_lock(RDMALLOC_LOCK_MAPS);
	for (uintptr_t at = lo; at < hi;) {
		size_t i = 0;
		while (i < nmaps && !(maps[i].lo <= at && at < maps[i].hi))
			i++;
		if (i == nmaps) {
			rdmalloc_unlock(RDMALLOC_LOCK_MAPS);
			rdmalloc_fatal("%s of [%p, +%zu): the page at %p is not the library's (never mapped by "
				       "it, or unmapped since): it would hit someone else's memory",
				       what, p, len, (void *)at);
		}
		uintptr_t end = maps[i].hi < hi ? maps[i].hi : hi;
		if (forget) { /* what is left of the mapping stays, one or two pieces */
			uintptr_t mlo = maps[i].lo, mhi = maps[i].hi;
			maps[i] = maps[--nmaps];
			if (mlo < at)
				add_locked(mlo, at);
			if (end < mhi)
				add_locked(end, mhi);
		}
		at = end;
	}
	rdmalloc_unlock(RDMALLOC_LOCK_MAPS);
}

#endif
