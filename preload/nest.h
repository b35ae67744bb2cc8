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
/* Whether @p is one of this allocator's blocks (lock-free, cheap). */
#define RDMALLOC_NEST_SPAN ((uintptr_t)1 << 34)
static inline int rdmalloc_nest_owns(const void *p)
{
	extern uintptr_t rdmalloc_nest_base; /* 0 until the range is reserved */
	uintptr_t lo = __atomic_load_n(&rdmalloc_nest_base, __ATOMIC_ACQUIRE);
	return lo && (uintptr_t)p - lo < RDMALLOC_NEST_SPAN;
}
void rdmalloc_nest_free(void *p);
size_t rdmalloc_nest_usable(const void *p);

#endif
