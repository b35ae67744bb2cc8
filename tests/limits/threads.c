/* SPDX-License-Identifier: MIT */
/*
 * threads.c - many threads and heaps, created and destroyed (fake verbs
 * backend).  A plain program, not Criterion, so that it also runs under
 * ThreadSanitizer.
 *
 *   1. waves: WAVES x WAVE threads alive at once; each creates a heap (or is
 *      told EAGAIN when every slot is taken), allocates in it and in the
 *      default heap, checks keys, destroys its heap with allocations live,
 *      and exits leaving its default-heap blocks live: the main thread
 *      checks and frees them after the thread is gone;
 *   2. cache recycling: SHORT short-lived threads each allocate from two
 *      heaps, i.e. about 2*SHORT thread caches, more than jemalloc's ~4093
 *      cache ids: unless a thread's exit gives its caches back, threads end
 *      up uncached (tcache_fallbacks > 0) and this fails;
 *   3. heap churn: CHURN_T threads create and destroy heaps concurrently.
 * At the end: only the default heap is left, every region the stats count
 * is live in the backend, one per chunk.
 *
 *   threads [WAVE]       prints "N passed, M failed"
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_verbs.h"
#include "rdma_malloc.h"

#define WAVES 4
#define MAXWAVE 256
#define BLOCKS 24
#define SHORT 2600
#define SHORT_PAR 50
#define CHURN_T 8
#define CHURN_N 120

static atomic_long violations, eagain, heaps_created, threads_created;

static void violation(const char *what, long a, long b)
{
	if (atomic_fetch_add(&violations, 1) < 10)
		fprintf(stderr, "threads: %s (%ld, %ld)\n", what, a, b);
}

static void check_block(const void *p, size_t n, unsigned char c)
{
	if (rdma_malloc_keys(p, n, NULL, NULL, NULL) != 0)
		violation("block without keys", (long)n, 0);
	const unsigned char *b = p;
	if (b[0] != c || b[n - 1] != c)
		violation("block contents changed", b[0], c);
}

struct wave_arg {
	int id;
	void *left[BLOCKS]; /* default-heap blocks left live at exit */
	size_t len[BLOCKS];
};

static void *wave_thread(void *argp)
{
	struct wave_arg *a = argp;
	rdma_heap_t *h = rdma_heap_create(NULL);
	if (!h) {
		if (errno != EAGAIN)
			violation("rdma_heap_create failed with something other than EAGAIN", errno, 0);
		atomic_fetch_add(&eagain, 1);
	} else {
		atomic_fetch_add(&heaps_created, 1);
	}
	void *mine[BLOCKS];
	for (int i = 0; i < BLOCKS; i++) {
		size_t n = 16 + (size_t)((a->id * 131 + i * 977) % (i % 4 ? 3000 : 200000));
		unsigned char c = (unsigned char)(a->id + i);
		mine[i] = h ? rdma_heap_malloc(h, n) : NULL;
		a->left[i] = rdma_malloc(n);
		a->len[i] = n;
		if (!a->left[i] || (h && !mine[i])) {
			violation("allocation failed", (long)n, errno);
			continue;
		}
		memset(a->left[i], c, n);
		if (mine[i])
			memset(mine[i], c, n);
	}
	for (int i = 0; i < BLOCKS; i++) {
		unsigned char c = (unsigned char)(a->id + i);
		if (a->left[i])
			check_block(a->left[i], a->len[i], c);
		if (mine[i]) {
			check_block(mine[i], a->len[i], c);
			if (i & 1)
				rdma_free(mine[i]);
		}
	}
	/* Destroyed with half of its blocks live. */
	if (h && rdma_heap_destroy(h) != 0)
		violation("rdma_heap_destroy failed", 0, 0);
	return NULL;
}

static rdma_heap_t *shared;
static void *short_thread(void *arg)
{
	(void)arg;
	void *p = rdma_malloc(100), *q = rdma_heap_malloc(shared, 100);
	if (!p || !q)
		violation("allocation failed in a short-lived thread", 0, 0);
	rdma_free(p);
	rdma_free(q);
	return NULL;
}

static void *churn_thread(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int r = 0; r < CHURN_N; r++) {
		rdma_heap_t *h = rdma_heap_create(NULL);
		if (!h) {
			if (errno != EAGAIN)
				violation("heap creation in churn", errno, 0);
			atomic_fetch_add(&eagain, 1);
			continue;
		}
		atomic_fetch_add(&heaps_created, 1);
		void *p[6];
		for (int i = 0; i < 6; i++) {
			size_t n = (size_t)1 << (4 + (i + r + id) % 18);
			p[i] = rdma_heap_malloc(h, n);
			if (!p[i]) {
				violation("allocation in churn", (long)n, errno);
				continue;
			}
			memset(p[i], i, n < 4096 ? n : 4096);
			if (rdma_malloc_keys(p[i], n, NULL, NULL, NULL))
				violation("no keys in churn", (long)n, 0);
		}
		for (int i = 0; i < 6; i += 2)
			rdma_free(p[i]);
		if (rdma_heap_destroy(h))
			violation("destroy in churn", 0, 0);
	}
	return NULL;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 256 << 10);
	int e = pthread_create(t, &at, fn, arg);
	pthread_attr_destroy(&at);
	if (e)
		violation("pthread_create", e, 0);
	else
		atomic_fetch_add(&threads_created, 1);
	return e;
}

int main(int argc, char **argv)
{
	int wave = argc > 1 ? atoi(argv[1]) : 200;
	if (wave < 1 || wave > MAXWAVE)
		wave = 200;
	fake_verbs_install(1);
	double t0 = now();
	static struct wave_arg args[MAXWAVE];
	static pthread_t t[MAXWAVE];
	int ok[MAXWAVE];
	for (int w = 0; w < WAVES; w++) {
		for (int i = 0; i < wave; i++) {
			memset(&args[i], 0, sizeof(args[i]));
			args[i].id = w * wave + i;
			ok[i] = start(&t[i], wave_thread, &args[i]) == 0;
		}
		for (int i = 0; i < wave; i++)
			if (ok[i])
				pthread_join(t[i], NULL);
		/* The threads are gone; their default-heap blocks are not. */
		for (int i = 0; i < wave; i++)
			for (int k = 0; k < BLOCKS; k++) {
				if (!args[i].left[k])
					continue;
				check_block(args[i].left[k], args[i].len[k], (unsigned char)(args[i].id + k));
				rdma_free(args[i].left[k]);
			}
	}
	double t1 = now();

	shared = rdma_heap_create(NULL);
	if (!shared) {
		perror("rdma_heap_create");
		return 2;
	}
	for (int done = 0; done < SHORT; done += SHORT_PAR) {
		for (int i = 0; i < SHORT_PAR; i++)
			ok[i] = start(&t[i], short_thread, NULL) == 0;
		for (int i = 0; i < SHORT_PAR; i++)
			if (ok[i])
				pthread_join(t[i], NULL);
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	if (st.tcache_fallbacks)
		violation("threads ran uncached: exiting threads do not give their caches back",
			  (long)st.tcache_fallbacks, 0);
	double t2 = now();

	for (int i = 0; i < CHURN_T; i++)
		ok[i] = start(&t[i], churn_thread, (void *)(intptr_t)i) == 0;
	for (int i = 0; i < CHURN_T; i++)
		if (ok[i])
			pthread_join(t[i], NULL);
	double t3 = now();

	if (rdma_heap_destroy(shared))
		violation("destroying the shared heap", 0, 0);
	rdma_malloc_stats_get(&st);
	if (st.heaps != 1)
		violation("heaps left besides the default one", (long)st.heaps, 1);
	if (st.mrs != fake_live_mrs() || st.mrs != st.chunks)
		violation("regions do not match chunks", (long)st.mrs, (long)st.chunks);
	long v = atomic_load(&violations);
	printf("threads: %ld threads created (%d alive at once in %d waves, %d short-lived, %d churning), %ld heaps "
	       "created and destroyed, %ld EAGAIN (all slots taken), %llu uncached; waves %.2f s, short-lived "
	       "%.2f s, churn %.2f s; %ld violations\n",
	       atomic_load(&threads_created), wave, WAVES, SHORT, CHURN_T, atomic_load(&heaps_created),
	       atomic_load(&eagain), (unsigned long long)st.tcache_fallbacks, t1 - t0, t2 - t1, t3 - t2, v);
	printf("%d passed, %d failed\n", v ? 0 : 1, v ? 1 : 0);
	return v ? 1 : 0;
}
