/* SPDX-License-Identifier: MIT */
/*
 * thread_end.c - under the drop-in, allocations in a thread's pthread key
 * destructors that run after jemalloc's (any key the program creates: its
 * index comes after jemalloc's) are memory that free() and realloc() take.
 * jemalloc cleans a thread's state up in its own key destructor; an
 * allocation after it finds the state "reincarnated" and is served from
 * jemalloc's arena 0, whatever arena the thread was bound to.  At dbf609a
 * such a block was no preload chunk's, and realloc() of it aborted ("not
 * memory from this allocator").
 *   bound      threads that allocated before they end
 *   free-only  threads whose first allocation is in the destructor (they
 *              only freed before, so jemalloc has state to clean up)
 *   order      (under the fake drop-in, which exports it) the key that
 *              marks a thread ended comes before jemalloc's, whatever ran
 *              first at start-up (at 3e40003 the drop-in's constructor
 *              started jemalloc before the key was made)
 *   free-only-realloc  free-only threads whose first allocation call, in
 *              the destructor, is a realloc of the main thread's block
 *              (at a489e41, with RDMALLOC_CHECK_FREE=1, the new block was
 *              jemalloc's arena 0's, and its free aborted)
 *   rdma       (under the fake drop-in: a device) bound threads whose
 *              destructor also calls rdma_malloc: a big block of a page,
 *              with keys (at 65045a0, jemalloc's arena 0: no keys)
 * Prints "ok"/"FAIL" lines; run with LD_PRELOAD.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_key_t key;
static int rdma; /* the destructor also allocates registered memory */
static int rdma_failed;
/* The drop-in's rdma_* calls, looked up once in rdma mode (it exports them). */
static void *(*rmalloc)(size_t);
static size_t (*usable)(const void *);
static int (*keys)(const void *, size_t, void *, unsigned *, unsigned *);
static void (*rfree)(void *);
static void *given; /* a block of the main thread's, freed by a free-only thread */
static char *moved; /* one of the main thread's, reallocated first (free-only-realloc) */

static void destructor(void *v)
{
	if (moved) { /* the thread's first allocation call */
		char *m = realloc(moved, 100000);
		if (!m || m[63] != 0x3c)
			abort();
		free(m);
		moved = NULL;
	}
	char *p = malloc(100);
	if (!p)
		abort();
	memset(p, 0xa5, 100);
	char *q = realloc(p, 5000); /* moves it: both blocks must be ours */
	if (!q || q[99] != (char)0xa5)
		abort();
	free(q);
	free(calloc(3, 1000));
	if (rdma) {
		char *r = rmalloc && usable && keys && rfree ? rmalloc(100) : NULL;
		unsigned l;
		if (!r || usable(r) != 4096 || keys(r, 100, NULL, &l, NULL))
			rdma_failed++;
		else
			rfree(r);
	}
	if (v != &key) { /* the thread's block from before it ended: moved, then freed */
		char *w = realloc(v, 300);
		if (!w || w[9] != 0x5a)
			abort();
		free(w);
	}
}

static void *bound(void *arg)
{
	(void)arg;
	char *p = malloc(10);
	if (!p)
		abort();
	memset(p, 0x5a, 10);
	pthread_setspecific(key, p);
	return NULL;
}

static void *free_only(void *arg)
{
	(void)arg;
	free(given);
	pthread_setspecific(key, &key);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "bound";
	if (!strcmp(how, "order")) {
		int (*first)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "rdmalloc_heap_ending_key_first");
		int ok = first && first();
		printf("%s the drop-in's end-of-thread key %s jemalloc's\n", ok ? "ok  " : "FAIL",
		       !first ? "(no getter: run under the fake drop-in) vs" : ok ? "comes before" : "comes after");
		return !ok;
	}
	rdma = !strcmp(how, "rdma");
	int realloc_first = !strcmp(how, "free-only-realloc");
	if (rdma) {
		rmalloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "rdma_malloc");
		usable = (size_t(*)(const void *))dlsym(RTLD_DEFAULT, "rdma_malloc_usable_size");
		keys = (int (*)(const void *, size_t, void *, unsigned *, unsigned *))dlsym(RTLD_DEFAULT,
											 "rdma_malloc_keys");
		rfree = (void (*)(void *))dlsym(RTLD_DEFAULT, "rdma_free");
	}
	free(malloc(1)); /* the drop-in is ready; the key comes after jemalloc's */
	if (pthread_key_create(&key, destructor))
		return 2;
	for (int i = 0; i < 8; i++) {
		pthread_t t;
		given = malloc(64);
		if (realloc_first && (moved = malloc(64)))
			memset(moved, 0x3c, 64);
		if (pthread_create(&t, NULL, strncmp(how, "free-only", 9) ? bound : free_only, NULL))
			return 2;
		pthread_join(t, NULL);
	}
	if (rdma_failed) {
		printf("FAIL %d of 8 threads' rdma_malloc in a key destructor: not a registered big block\n",
		       rdma_failed);
		return 1;
	}
	printf("ok   8 %s threads allocated, reallocated and freed in a key destructor\n", how);
	return 0;
}
