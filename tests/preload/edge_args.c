/* SPDX-License-Identifier: MIT */
/*
 * edge_args.c - the drop-in answers the edge arguments of every allocation
 * function as the glibc it replaces does: zero sizes and alignments,
 * alignments that are not powers of two, sizes past PTRDIFF_MAX, products
 * that overflow.  For each call it prints what a program can see: a
 * pointer or NULL, errno, whether the pointer has the alignment asked for
 * (rounded up to a power of two) and at least the bytes asked for.
 * edge-args.sh runs it plain and under the drop-in and compares the two.
 *
 * Built with -DAS_GLIBC='"2.38"' it answers the drop-in's question of
 * which glibc it replaces (gnu_get_libc_version(), exported from the
 * program, which comes first in the lookup): a glibc whose aligned_alloc
 * refuses alignments that are not powers of two.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AS_GLIBC
const char *gnu_get_libc_version(void);
const char *gnu_get_libc_version(void)
{
	return AS_GLIBC;
}
#endif

static size_t pow2_up(size_t a)
{
	size_t p = 1;
	while (p < a && p)
		p <<= 1;
	return p;
}

/* @p, the result of @call asking for @n bytes aligned to @align, with
 * errno @e after it. */
static void said(const char *call, void *p, int e, size_t align, size_t n)
{
	if (!p) {
		printf("%-44s NULL, errno %d\n", call, e);
		return;
	}
	size_t a = pow2_up(align ? align : 1);
	printf("%-44s a pointer, errno %d, %s, %s\n", call, e, a && (uintptr_t)p % a ? "MISALIGNED" : "aligned",
	       malloc_usable_size(p) >= n ? "big enough" : "TOO SMALL");
	free(p);
}

#define CALL(expr, align, n)                                                                                 \
	do {                                                                                                 \
		errno = 0;                                                                                   \
		void *p_ = (expr);                                                                           \
		said(#expr, p_, errno, (align), (n));                                                        \
	} while (0)

/* posix_memalign answers with its return value; errno is left out of a
 * failure's line, being no part of it (glibc's leaks an ENOMEM from inside,
 * the drop-in's keeps the caller's). */
#define MEMALIGN_RC(align, n)                                                                                \
	do {                                                                                                 \
		void *p_ = NULL;                                                                             \
		errno = 0;                                                                                   \
		int rc_ = posix_memalign(&p_, (align), (n));                                                 \
		printf("posix_memalign(%zu, %zu): %d\n", (size_t)(align), (size_t)(n), rc_);                 \
		if (!rc_)                                                                                    \
			said("  its pointer", p_, errno, (align), (n));                                      \
	} while (0)

/* The sizes, out of the compiler's sight (it rejects constants past
 * PTRDIFF_MAX in allocation calls). */
static size_t hidden(size_t x)
{
	__asm__("" : "+r"(x));
	return x;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const size_t big = hidden((size_t)PTRDIFF_MAX + 1), max = hidden(SIZE_MAX), half = hidden(SIZE_MAX / 2),
		     pmax = hidden(PTRDIFF_MAX);
	CALL(malloc(0), 1, 0);
	CALL(malloc(max), 1, 0);
	CALL(malloc(pmax), 1, 0);
	CALL(malloc(big), 1, 0);
	CALL(calloc(0, 0), 1, 0);
	CALL(calloc(max, 0), 1, 0);
	CALL(calloc(half, 3), 1, 0);
	CALL(calloc(1, max), 1, 0);
	CALL(calloc(1, big), 1, 0);
	CALL(realloc(NULL, 0), 1, 0);
	CALL(realloc(NULL, max), 1, 0);
	CALL(reallocarray(NULL, half, 3), 1, 0);
	CALL(reallocarray(NULL, 0, 0), 1, 0);
	CALL(reallocarray(NULL, 1, big), 1, 0);

	/* realloc of a live block: to 0 (glibc frees it), past pmax
	 * (the block stays, its bytes too). */
	/* (through a pointer: the compiler takes a use after a failed
	 * realloc for a use after free) */
	void *(*volatile re)(void *, size_t) = realloc;
	void *(*volatile rea)(void *, size_t, size_t) = reallocarray;
	char *b = malloc(100);
	memset(b, 7, 100);
	errno = 0;
	void *r = re(b, max);
	printf("%-44s %s, errno %d, block %s\n", "realloc(block, max)", r ? "a pointer" : "NULL", errno,
	       !r && b[99] == 7 ? "kept" : "?");
	errno = 0;
	r = rea(b, half, 3);
	printf("%-44s %s, errno %d, block %s\n", "reallocarray(block, half, 3)", r ? "a pointer" : "NULL",
	       errno, !r && b[0] == 7 ? "kept" : "?");
	errno = 0;
	r = re(b, 0);
	printf("%-44s %s, errno %d\n", "realloc(block, 0)", r ? "a pointer" : "NULL", errno);
	free(r);

	static const size_t aligns[] = { 0, 1, 2, 3, 8, 24, 48, 64, 100, 4096, 12288, (size_t)2 << 20 };
	char call[96];
	for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
		size_t a = aligns[i];
		snprintf(call, sizeof(call), "memalign(%zu, 100)", a);
		errno = 0;
		void *p = memalign(a, 100);
		said(call, p, errno, a, 100);
		snprintf(call, sizeof(call), "aligned_alloc(%zu, 100)", a);
		errno = 0;
		p = aligned_alloc(a, 100);
		said(call, p, errno, a, 100);
		snprintf(call, sizeof(call), "aligned_alloc(%zu, 0)", a);
		errno = 0;
		p = aligned_alloc(a, 0);
		said(call, p, errno, a, 0);
		MEMALIGN_RC(a, 100);
	}
	CALL(memalign(half + 2, 1), 1, 0);
	CALL(aligned_alloc(half + 2, 1), 1, 0);
	CALL(memalign(64, max), 1, 0);
	CALL(aligned_alloc(64, max), 1, 0);
	CALL(memalign(64, big), 1, 0);
	MEMALIGN_RC(8, max);
	MEMALIGN_RC(8, 0);
	MEMALIGN_RC(half + 1, 1);

	CALL(valloc(0), 4096, 0);
	CALL(valloc(max), 1, 0);
	CALL(valloc(big), 1, 0);
	CALL(pvalloc(0), 4096, 0);
	CALL(pvalloc(max), 1, 0);
	CALL(pvalloc(big), 1, 0);
	printf("malloc_usable_size(NULL): %zu\n", malloc_usable_size(NULL));
	errno = 0;
	free(NULL);
	printf("free(NULL): errno %d\n", errno);
	return 0;
}
