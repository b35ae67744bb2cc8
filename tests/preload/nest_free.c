/* SPDX-License-Identifier: MIT */
/*
 * nest_free.c - under the drop-in, blocks of its nest (preload/nest.c: what
 * is allocated before the drop-in is ready, inside its verbs calls, or on a
 * thread jemalloc has cleaned up) freed twice, or an address in them that
 * is no block's, abort with a message naming the call, whether
 * RDMALLOC_CHECK_FREE is set or not.  Before, a second free pushed the
 * block on a free list again, its link read as the size class: a write
 * out of the free-list table, or one block handed out twice.  The blocks
 * come from a pthread key destructor that runs after jemalloc's (the
 * drop-in serves that thread from the nest).  And a block freed and handed
 * out again is freed again without an abort.
 * Each case runs in a child; prints one line per case and "N passed, M
 * failed".
 */
#include <malloc.h>
#include <pthread.h>
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
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

enum how { TWICE, REALLOC_AFTER, USABLE_AFTER, INTERIOR, REUSE };
static const char *const hows[] = { "free twice", "free, then realloc", "free, then malloc_usable_size",
				    "free of an address inside a block", "free, malloc again, free" };
/* What the abort must say (REUSE: no abort). */
static const char *const says[] = { "free(0x", "realloc(0x", "malloc_usable_size(0x", "free(0x", NULL };
static const char *const why[] = { "the block is free already", "the block is free already",
				   "the block is free already", "not memory from this allocator", NULL };

static pthread_key_t key;
static enum how how;
static volatile size_t sink;
static char *volatile victim; /* the compiler must not pair malloc and free away */

static void destructor(void *v)
{
	(void)v;
	char *p = victim = malloc(100);
	if (!p)
		abort();
	memset(p, 0x5a, 100);
	switch (how) {
	case TWICE:
		free(p);
		free(victim);
		break;
	case REALLOC_AFTER:
		free(p);
		sink = (size_t)realloc(victim, 200);
		break;
	case USABLE_AFTER:
		free(p);
		sink = malloc_usable_size(victim);
		break;
	case INTERIOR:
		free(victim + 16);
		break;
	case REUSE:
		for (int i = 0; i < 100; i++) {
			free(p);
			p = victim = i % 2 ? malloc(100) : calloc(1, 100);
			if (!p)
				abort();
		}
		free(p);
		break;
	}
}

static void *thread(void *arg)
{
	victim = malloc(10); /* bound to the drop-in's arena: its mallocs after jemalloc's */
	free(victim);        /* destructor are the nest's */
	pthread_setspecific(key, &key);
	return arg;
}

/* The case @how, in the child: a thread whose destructor runs it. */
static void run(void *arg)
{
	(void)arg;
	pthread_t t;
	if (pthread_create(&t, NULL, thread, NULL) || pthread_join(t, NULL))
		_exit(3);
}

int main(void)
{
	free(malloc(1)); /* the drop-in is ready: the key comes after jemalloc's */
	if (pthread_key_create(&key, destructor))
		return 2;
	int passed = 0, failed = 0;
	for (how = TWICE; how <= REUSE; how++) {
		char out[1024];
		int st = in_child(run, NULL, out, sizeof(out));
		int ok = how == REUSE ? st == 0 : aborted_saying(st, out, says[how], why[how]);
		in_child_report(ok, hows[how], st, out);
		passed += ok, failed += !ok;
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
