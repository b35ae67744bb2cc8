/* SPDX-License-Identifier: MIT */
/*
 * calls_count.c - malloc's family for calls_kept: each call counted, then
 * glibc's own (its __libc_* names).  aligned_alloc refuses an alignment
 * that is not a power of two with EINVAL, as glibc 2.38 does.
 */
#include <errno.h>
#include <stddef.h>

#include "calls_count.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

unsigned long calls_malloc, calls_calloc, calls_realloc, calls_free, calls_aligned_alloc;
unsigned long calls_new, calls_delete;

void calls_count_reset(void)
{
	calls_malloc = calls_calloc = calls_realloc = calls_free = calls_aligned_alloc = 0;
	calls_new = calls_delete = 0;
}

void *malloc(size_t n)
{
	calls_malloc++;
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
	calls_calloc++;
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
	calls_realloc++;
	return __libc_realloc(p, n);
}

void free(void *p)
{
	calls_free++;
	__libc_free(p);
}

void *aligned_alloc(size_t align, size_t n)
{
	calls_aligned_alloc++;
	if (!align || (align & (align - 1))) {
		errno = EINVAL;
		return NULL;
	}
	return __libc_memalign(align, n);
}
