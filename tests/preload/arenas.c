/* SPDX-License-Identifier: MIT */
/*
 * arenas.c - RDMALLOC_PRELOAD_ARENAS under the drop-in: threads are bound to
 * the preload heap's arenas round-robin, each arena growing chunks of its
 * own.  With N arenas and 3N threads each holding a small block, the process
 * has exactly N chunks (the default heap is never used here); the blocks are
 * freed by other threads than their owners, and everything is still there.
 *   arenas N   (run with LD_PRELOAD and RDMALLOC_PRELOAD_ARENAS=N)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_malloc.h"

#define MAXT 48

static pthread_barrier_t all_allocated, may_exit;
static char *block[MAXT];

static void *worker(void *arg)
{
	long i = (long)arg;
	block[i] = malloc(100);
	if (block[i])
		memset(block[i], (int)i, 100);
	pthread_barrier_wait(&all_allocated);
	pthread_barrier_wait(&may_exit);
	return NULL;
}

static unsigned long chunks(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		return 0;
	return (unsigned long)(st.chunks - st.reserve_chunks); /* a reserve is no arena's yet */
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0;
	if (n < 1 || 3 * n > MAXT) {
		fprintf(stderr, "usage: arenas N (1-16), with LD_PRELOAD and RDMALLOC_PRELOAD_ARENAS=N\n");
		return 2;
	}
	int nt = 3 * n, failed = 0;
	pthread_t t[MAXT];
	pthread_barrier_init(&all_allocated, NULL, (unsigned)nt + 1);
	pthread_barrier_init(&may_exit, NULL, (unsigned)nt + 1);
	for (long i = 0; i < nt; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	pthread_barrier_wait(&all_allocated);
	unsigned long c = chunks();
	if (c != (unsigned long)n) {
		fprintf(stderr, "arenas: %d arenas, %d threads: %lu chunks, want %d\n", n, nt, c, n);
		failed = 1;
	}
	for (int i = 0; i < nt; i++) {
		for (int k = 0; k < 100 && block[i]; k++)
			if (block[i][k] != (char)i) {
				fprintf(stderr, "arenas: block of thread %d changed\n", i);
				failed = 1;
				break;
			}
		if (!block[i]) {
			fprintf(stderr, "arenas: thread %d got no memory\n", i);
			failed = 1;
		}
		free(block[i]); /* freed on another thread than its owner's */
	}
	pthread_barrier_wait(&may_exit);
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	printf("arenas: %d arenas, %d threads, %lu chunks%s\n", n, nt, c, failed ? ": FAILED" : "");
	return failed;
}
