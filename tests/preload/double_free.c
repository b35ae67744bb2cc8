/* SPDX-License-Identifier: MIT */
/*
 * double_free.c - under the drop-in, a block freed twice aborts with a
 * message naming the call and the address, as glibc's "free(): double free
 * detected in tcache 2" does (issue 23, item 5: on c66f40e every case
 * survived, and two mallocs handed out one block twice).  The cases glibc
 * catches: the same block twice with nothing between, with allocations of
 * other sizes between, with another block freed between, freed by another
 * thread first; also realloc and C++ sized delete of a freed block, and
 * the old pointer freed after realloc moved its block (missed until
 * the checked realloc moved blocks itself: jemalloc's rallocx frees the
 * old one without the key), and a second free or a realloc after
 * malloc_trim gave the block's pages back (the key read as zeros then:
 * on 89c21d6 jemalloc crashed with SIGSEGV), and free() of an rdma_* heap's
 * block after rdma_malloc_trim gave its chunk back (on 89c21d6: "not
 * memory from this allocator"), at
 * sizes from the smallest class to large extents.  And none of the legal
 * reuses aborts: a block freed, handed out again (by each allocation call)
 * and freed by its new owner.
 * Each case runs in a child; prints one line per case and "N passed, M
 * failed".
 */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "in_child.h"

/* The defects are the point: gcc 12 sees some of them. */
#ifdef __clang__
#pragma clang diagnostic ignored "-Wunknown-warning-option"
#endif
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"

static volatile uintptr_t sink;
#define SMALL_MAX ((size_t)14 << 10) /* jemalloc 5.3's largest small size class */
static void *victim;

static void *free_it(void *p)
{
	free(p);
	return NULL;
}

enum how { TWICE, OTHERS_BETWEEN, ANOTHER_FREED_BETWEEN, OTHER_THREAD_FIRST, REALLOC_AFTER, DELETE_TWICE,
	   FREE_AFTER_REALLOC, GIVEN_BACK_BETWEEN, REALLOC_AFTER_GIVEN_BACK };
static const char *const hows[] = { "free twice", "free, malloc others, free", "free p, free q, free p",
				    "free in another thread, then here", "free, then realloc",
				    "sized delete twice", "realloc moves p, then free p",
				    "free, malloc_trim, free", "free, malloc_trim, realloc" };
static const char *const calls[] = { "free", "free", "free", "free", "realloc", "operator delete", "free",
				     "free", "realloc" };

/* The case, in the child: returns only if nothing aborted. */
static void run(enum how how, size_t size)
{
	void (*sized_delete)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
	victim = malloc(size);
	memset(victim, 0x5a, size < 64 ? size : 64);
	switch (how) {
	case TWICE:
		free(victim);
		free(victim);
		break;
	case OTHERS_BETWEEN:
		free(victim);
		/* Of other classes, and never where the victim was: a block
		 * carved from its freed extent at its address (a smaller large
		 * size) would make the second free a legal one.  Small classes
		 * have slabs of their own; large blocks, only larger sizes. */
		for (size_t s = 8; s < ((size_t)24 << 20); s = s * 3 + 1)
			if (size <= SMALL_MAX ? s < size / 2 || s > size * 2 : s > size * 2)
				sink += (uintptr_t)malloc(s);
		free(victim);
		break;
	case ANOTHER_FREED_BETWEEN: {
		void *q = malloc(size);
		free(victim);
		free(q);
		free(victim);
		break;
	}
	case OTHER_THREAD_FIRST: {
		pthread_t t;
		pthread_create(&t, NULL, free_it, victim);
		pthread_join(t, NULL);
		free(victim);
		break;
	}
	case REALLOC_AFTER:
		free(victim);
		sink += (uintptr_t)realloc(victim, size * 2);
		break;
	case DELETE_TWICE:
		sized_delete(victim, size);
		sized_delete(victim, size);
		break;
	case FREE_AFTER_REALLOC: { /* the old pointer freed after realloc moved the block */
		void *q = realloc(victim, size * 4 + 64);
		free(victim);
		if (q == victim) /* grown in place: the free was legal, this one is not */
			free(victim);
		break;
	}
	case GIVEN_BACK_BETWEEN: /* its pages come back as zeros: the key is gone */
	case REALLOC_AFTER_GIVEN_BACK:
		free(victim);
		malloc_trim(0);
		if (how == GIVEN_BACK_BETWEEN)
			free(victim);
		else
			sink += (uintptr_t)realloc(victim, size * 2);
		break;
	}
}

struct one_case {
	enum how how;
	size_t size;
};

/* A block of an rdma_* heap (the drop-in exports the API), freed, given
 * back with its chunk by rdma_malloc_trim, then passed to free(): the
 * drop-in finds no live chunk there and asks the map of idle pages. */
static void rdma_given_back(void *arg)
{
	size_t size = *(size_t *)arg;
	void *(*heap_create)(const void *, size_t) =
		(void *(*)(const void *, size_t))dlsym(RTLD_DEFAULT, "rdma_heap_create_sized");
	void *(*heap_malloc)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "rdma_heap_malloc");
	void (*rfree)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "rdma_free");
	size_t (*trim)(void) = (size_t(*)(void))dlsym(RTLD_DEFAULT, "rdma_malloc_trim");
	if (!heap_create || !heap_malloc || !rfree || !trim)
		return;
	void *h = heap_create(NULL, 0); /* NULL: the defaults, whatever the size */
	void *p = h ? heap_malloc(h, size) : NULL;
	if (!p)
		return;
	memset(p, 0x5a, size < 64 ? size : 64);
	rfree(p);
	if (!trim())
		return;
	free(p);
}

static void run_case(void *arg)
{
	struct one_case *c = arg;
	run(c->how, c->size);
}

/* Every way of getting a block the drop-in has: each hands out the block
 * that was freed last (or one of its class), which is then freed again by
 * its new owner: never an abort. */
static void reuse(void *arg)
{
	(void)arg;
	for (int round = 0; round < 20000; round++) {
		size_t size = 8 + (size_t)(round * 37 % 5000);
		void *p = malloc(size);
		memset(p, round & 0xff, size);
		free(p);
		void *q;
		switch (round % 7) {
		case 0: q = malloc(size); break;
		case 1: q = calloc(1, size); break;
		case 2: q = aligned_alloc(16, size); break;
		case 3: if (posix_memalign(&q, 64, size)) q = NULL; break;
		case 4: q = memalign(32, size); break;
		case 5: q = realloc(malloc(size / 2 + 1), size); break;
		default: q = realloc(NULL, size); break;
		}
		if (!q)
			abort();
		free(q); /* q may be p: handed out again, freed again */
	}
	printf("survived\n");
}

int main(void)
{
	static const size_t sizes[] = { 8, 40, 1000, 20000, 100000, 3 << 20 };
	int passed = 0, failed = 0;
	for (int h = 0; h <= REALLOC_AFTER_GIVEN_BACK; h++)
		for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			struct one_case c = { h, sizes[s] };
			char out[1024], want[80], what[96];
			int st = in_child(run_case, &c, out, sizeof(out));
			snprintf(want, sizeof(want), "%s(0x", calls[h]);
			snprintf(what, sizeof(what), "%s, %zu B", hows[h], sizes[s]);
			int ok = aborted_saying(st, out, want, "the block is free already");
			in_child_report(ok, what, st, out);
			passed += ok, failed += !ok;
		}
	static const size_t rdma_sizes[] = { 8, 1000, 20000 }; /* not big blocks: chunks of their own */
	for (unsigned s = 0; s < sizeof(rdma_sizes) / sizeof(rdma_sizes[0]); s++) {
		char out[1024], what[96];
		size_t size = rdma_sizes[s];
		int st = in_child(rdma_given_back, &size, out, sizeof(out));
		snprintf(what, sizeof(what), "rdma_free, rdma_malloc_trim, free, %zu B", size);
		int ok = aborted_saying(st, out, "free(0x", "the block is free already");
		in_child_report(ok, what, st, out);
		passed += ok, failed += !ok;
	}
	char out[1024];
	int st = in_child(reuse, NULL, out, sizeof(out));
	int ok = st == 0;
	in_child_report(ok, "blocks freed, handed out again by every call and freed again", st, out);
	passed += ok, failed += !ok;
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
