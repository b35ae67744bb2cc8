/* SPDX-License-Identifier: MIT */
/*
 * errno_kept.c - under the drop-in, a successful call of the allocation ABI
 * leaves errno as it found it, whatever ran inside it: a chunk made and
 * registered (eager), one registered on first use and then grown, the
 * reserve's thread started, a given-back chunk taken back, an rdma_* big
 * block freed and deregistered by free().  POSIX: no function sets errno
 * to 0; glibc: free() preserves errno; rdma_malloc.h: the allocation calls
 * leave it alone on success.  Run under the fake drop-in, whose backend
 * leaves errno set on a successful registration, as a provider may
 * (tests/unit/fake_verbs.c).
 *   errno_kept
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_malloc.h"

#define SENTINEL 4321 /* no errno value: whatever changes it shows */

static _Atomic int changed;

static void check(const char *what, size_t n)
{
	if (errno != SENTINEL) {
		if (atomic_fetch_add(&changed, 1) < 20)
			fprintf(stderr, "errno_kept: %s(%zu) succeeded and changed errno to %d (%s)\n", what, n,
				errno, strerror(errno));
		errno = SENTINEL;
	}
}

static void *sym(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	if (!f) {
		fprintf(stderr, "errno_kept: %s not found: run under the drop-in\n", name);
		exit(2);
	}
	return f;
}

#define BLOCKS 64

static void *run(void *arg)
{
	(void)arg;
	void *(*rmalloc)(size_t) = sym("rdma_malloc");
	int (*keys)(const void *, size_t, struct ibv_pd *, uint32_t *, uint32_t *) = sym("rdma_malloc_keys");
	size_t (*trim)(void) = sym("rdma_malloc_trim");
	void *b[BLOCKS] = { 0 };
	errno = SENTINEL;
	for (int round = 0; round < 3; round++) {
		int k = 0;
		/* Growth: chunks of up to 64 MiB made (and registered, eager). */
		for (size_t n = 8; n <= ((size_t)64 << 20) && k < BLOCKS - 12; n *= 4, k++) {
			if (!(b[k] = malloc(n)))
				return "malloc failed";
			check("malloc", n);
			memset(b[k], 1, n < 4096 ? n : 4096);
		}
		if (!(b[k] = calloc(1000, 1000)))
			return "calloc failed";
		check("calloc", 1000000);
		k++;
		if (!(b[k] = realloc(malloc(100), (size_t)48 << 20)))
			return "realloc failed";
		check("realloc", (size_t)48 << 20);
		k++;
		if (posix_memalign(&b[k], 4096, (size_t)3 << 20))
			return "posix_memalign failed";
		check("posix_memalign", (size_t)3 << 20);
		k++;
		if (!(b[k] = aligned_alloc(1 << 16, (size_t)5 << 20)))
			return "aligned_alloc failed";
		check("aligned_alloc", (size_t)5 << 20);
		k++;
		if (!(b[k] = memalign(64, 1000)) || !(b[k + 1] = valloc(10000)) || !(b[k + 2] = pvalloc(10)))
			return "memalign, valloc or pvalloc failed";
		check("memalign/valloc/pvalloc", 10000);
		k += 3;
		if (!(b[k] = reallocarray(NULL, 1000, 3000)))
			return "reallocarray failed";
		check("reallocarray", 3000000);
		k++;
		/* Chunks registered on first use (a lookup), then more growth
		 * from them: a registration on the allocating thread. */
		(void)keys(b[0], 8, NULL, NULL, NULL);
		errno = SENTINEL;
		if (!(b[k] = malloc((size_t)96 << 20)))
			return "malloc after a lookup failed";
		check("malloc", (size_t)96 << 20);
		k++;
		/* An rdma_* big block freed by free(): its chunk deregistered
		 * once the heap's cache of them is full. */
		for (int i = 0; i < 6 && k < BLOCKS; i++, k++) {
			if (!(b[k] = rmalloc((size_t)(i + 1) << 20)))
				return "rdma_malloc failed";
			check("rdma_malloc", (size_t)(i + 1) << 20);
		}
		for (int i = 0; i < k; i++) {
			free(b[i]);
			check("free", (size_t)i);
			b[i] = NULL;
		}
		/* Chunks given back, then taken back by the next round. */
		(void)trim();
		errno = SENTINEL;
	}
	return NULL;
}

int main(void)
{
	(void)sym("rdma_malloc"); /* under the drop-in */
	const char *why = run(NULL);
	void *r = NULL;
	pthread_t t;
	if (!why && (pthread_create(&t, NULL, run, NULL) || pthread_join(t, &r)))
		why = "pthread_create or pthread_join failed";
	if (!why)
		why = r;
	if (why) {
		fprintf(stderr, "errno_kept: %s\n", why);
		return 2;
	}
	if (changed) {
		fprintf(stderr, "errno_kept: FAIL: %d successful calls changed errno\n", (int)changed);
		return 1;
	}
	printf("errno_kept: every successful call left errno alone\n");
	return 0;
}
