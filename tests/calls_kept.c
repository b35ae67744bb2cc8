/* SPDX-License-Identifier: MIT */
/*
 * The build keeps every allocation call a test makes.  gcc and clang know
 * malloc's family as builtins: a block never used is never allocated
 * (free(malloc(n)) compiles to nothing) and clang assumes aligned_alloc
 * leaves errno alone; g++ and clang++ drop a new expression's block the
 * same way.  A test whose warm-up malloc or whose bad call is compiled
 * away passes without testing anything, so every test target is built
 * with test_c_args/test_cpp_args (meson.build: -fno-builtin-<each> and
 * C++'s equivalents); this program fails without them.
 *
 * The calls are counted by this program's own definitions (calls_count.c),
 * which glibc's dynamic linker gives precedence to.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calls_count.h"

static int failed;

static void check(const char *what, unsigned long got, unsigned long want)
{
	if (got != want) {
		printf("FAIL %s: %lu calls, %lu wanted\n", what, got, want);
		failed = 1;
	}
}

/* Each pattern in a function of its own, as a test's warm-up would be. */
static __attribute__((noinline)) void unused_block(void)
{
	free(malloc(4096));
}

static __attribute__((noinline)) void unused_calloc(void)
{
	void *q = calloc(1, 100);
	free(q);
}

static __attribute__((noinline)) void unused_realloc(void)
{
	char *p = malloc(10);
	p = realloc(p, 20);
	free(p);
}

static __attribute__((noinline)) void unused_strdup(const char *s)
{
	free(strdup(s));
}

static __attribute__((noinline)) int refused_aligned_alloc(void)
{
	static volatile size_t odd = 24; /* a constant one: clang warns */
	errno = 0;
	void *a = aligned_alloc(odd, 100); /* refused with EINVAL (calls_count.c) */
	int e = errno;
	return a ? -1 : e;
}

int main(void)
{
	calls_count_reset();
	unused_block();
	check("free(malloc(4096)): malloc", calls_malloc, 1);
	check("free(malloc(4096)): free", calls_free, 1);

	calls_count_reset();
	unused_calloc();
	check("calloc of a block never used", calls_calloc, 1);

	calls_count_reset();
	unused_realloc();
	check("realloc of a block never used", calls_realloc, 1);

	calls_count_reset();
	int e = refused_aligned_alloc();
	check("aligned_alloc(24, 100)", calls_aligned_alloc, 1);
	check("errno after a refused aligned_alloc (-1: a block)", (unsigned long)e, EINVAL);

	calls_count_reset();
	unused_strdup("kept");
	check("free(strdup(s)): glibc's malloc", calls_malloc, 1);

	calls_count_reset();
	calls_unused_new();
	check("delete new int(3): operator new", calls_new, 1);
	check("delete new int(3): operator delete", calls_delete, 1);

	if (!failed)
		printf("ok: every allocation call made and its errno seen\n");
	return failed;
}
