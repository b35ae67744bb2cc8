/* SPDX-License-Identifier: MIT */
/*
 * nest.h - the drop-in's allocator for code running inside an extent hook
 * (libibverbs' allocations in ibv_reg_mr, libc's): outside jemalloc, whose
 * locks the hook's thread may hold while fork() takes them (nest.c).
 */
#ifndef RDMALLOC_NEST_H
#define RDMALLOC_NEST_H

#include <stddef.h>
#include <stdint.h>

/* @size bytes aligned to @align (a power of two, 0 for the default 16),
 * zeroed if @zero; NULL with errno ENOMEM when its space is used up. */
void *rdmalloc_nest_alloc(size_t size, size_t align, int zero);
/* The ranges of address space the blocks are carved from: reserved as
 * needed, each twice the one before (nest.c); never unmapped. */
#define RDMALLOC_NEST_RANGES 24
extern uintptr_t rdmalloc_nest_lo[RDMALLOC_NEST_RANGES], rdmalloc_nest_len[RDMALLOC_NEST_RANGES];
extern unsigned rdmalloc_nest_ranges; /* published ones, release-stored after lo/len */
/* Whether @p is one of this allocator's blocks (lock-free; one compare per
 * range, and a program has one or two). */
static inline int rdmalloc_nest_owns(const void *p)
{
	unsigned n = __atomic_load_n(&rdmalloc_nest_ranges, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < n; i++)
		if ((uintptr_t)p - rdmalloc_nest_lo[i] < rdmalloc_nest_len[i])
			return 1;
	return 0;
}
/* Free @p / its usable size.  @p must be a live block of the nest: else
 * (freed already, or no block's address) they abort, naming @who's call. */
void rdmalloc_nest_free(void *p, const char *who);
size_t rdmalloc_nest_usable(const void *p, const char *who);

#endif
