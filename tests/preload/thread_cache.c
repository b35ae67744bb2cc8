/* SPDX-License-Identifier: MIT */
/*
 * thread_cache.c - under the drop-in, every bound thread has jemalloc's
 * automatic thread cache: the drop-in's private jemalloc starts threads
 * without one (preload/jemalloc_conf.c) and gives it when it binds them to
 * the preload heap's arena (preload/malloc.c).  The cache is a stack: of
 * two blocks of a size class freed in turn, the next allocation returns
 * the one freed last, where jemalloc's arena, uncached, returns the one
 * at the lower address.  The main thread and 4 others, in turn, free the lower one
 * first; each must get the higher one back, and none is counted in
 * tcache_fallbacks.  With `off` (and MALLOC_CONF=tcache:false, which the
 * drop-in honours) each must get the lower one: no cache.
 * Run with LD_PRELOAD.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_malloc.h"

#define THREADS 4

static int off; /* MALLOC_CONF=tcache:false: no thread has a cache */

static void *cached(void *arg)
{
	(void)arg;
	char *a = malloc(48), *b = malloc(48);
	char *lo = (uintptr_t)a < (uintptr_t)b ? a : b, *hi = lo == a ? b : a;
	free(lo);
	free(hi);
	char *c = malloc(48);
	intptr_t ok = a && b && c == (off ? lo : hi);
	free(c);
	return (void *)ok;
}

int main(int argc, char **argv)
{
	off = argc > 1 && !strcmp(argv[1], "off");
	int failed = 0;
	if (!cached(NULL)) {
		printf("FAIL the main thread's freed block: %s\n", off ? "a cache despite tcache:false" : "not from its thread cache");
		failed++;
	}
	/* One at a time: uncached, threads bound to one arena would take
	 * each other's freed blocks (13-26 runs in 100 failed so). */
	for (int i = 0; i < THREADS; i++) {
		pthread_t t;
		void *ok = NULL;
		if (pthread_create(&t, NULL, cached, NULL))
			return 2;
		pthread_join(t, &ok);
		if (!ok) {
			printf("FAIL thread %d's freed block: %s\n", i, off ? "a cache despite tcache:false" : "not from its thread cache");
			failed++;
		}
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	/* fallbacks: no thread left unbound (the nest's free lists are stacks too) */
	if (rdma_malloc_stats_get(&st) || st.tcache_fallbacks || st.fallbacks) {
		printf("FAIL %llu threads uncached (tcache_fallbacks), %llu fallbacks\n",
		       (unsigned long long)st.tcache_fallbacks, (unsigned long long)st.fallbacks);
		failed++;
	}
	printf("%s: %d failed\n", failed ? "FAIL" : "ok", failed);
	return failed != 0;
}
