/* SPDX-License-Identifier: MIT */
/*
 * fork_torture.c - fork() while other threads create chunks (large
 * allocations), attach PDs and create heaps: every child must be able to
 * allocate, free and exit.  A child stuck on a lock held at fork time is
 * killed by alarm() and counts as a failure.
 *
 *   fork_torture [api|malloc] [FORKS]     prints "N passed, M failed"
 * "api" uses rdma_malloc (link with librdmalloc); "malloc" uses plain malloc
 * (run under the LD_PRELOAD drop-in).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_malloc.h"

static int use_api;
static atomic_int stop;

static void *xalloc(size_t n)
{
	return use_api ? rdma_malloc(n) : malloc(n);
}

static void xfree(void *p)
{
	if (use_api)
		rdma_free(p);
	else
		free(p);
}

static void *churn(void *arg)
{
	unsigned i = (unsigned)(uintptr_t)arg;
	while (!atomic_load(&stop)) {
		/* Large and growing sizes keep jemalloc asking for chunks. */
		i++;
		size_t n = ((size_t)1 << (12 + i % 14)) + i % 4096;
		void *p = xalloc(n);
		if (p)
			memset(p, 1, n < 65536 ? n : 65536);
		xfree(p);
		if (i % 64 == 0) {
			rdma_heap_t *h = rdma_heap_create(NULL);
			if (h) {
				void *q = rdma_heap_malloc(h, (size_t)3 << 20);
				rdma_free(q);
				rdma_heap_destroy(h);
			}
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	use_api = argc > 1 && !strcmp(argv[1], "api");
	int forks = argc > 2 ? atoi(argv[2]) : 200;
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i * 5));
	int ok = 0, bad = 0;
	for (int f = 0; f < forks; f++) {
		pid_t pid = fork();
		if (pid == 0) {
			alarm(20);
			for (int k = 0; k < 8; k++) {
				size_t n = (size_t)(k + 1) << 19; /* new chunks in the child */
				char *p = xalloc(n);
				if (!p)
					_exit(3);
				memset(p, 7, n);
				xfree(p);
			}
			/* The parent's registrations are not the child's. */
			void *small = xalloc(100);
			int e = rdma_malloc_keys(small, 1, NULL, NULL, NULL);
			xfree(small);
			_exit(e == 0 ? 4 : 0);
		}
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
			bad++;
			fprintf(stderr, "fork_torture: child %d: %s %d\n", f,
				WIFSIGNALED(st) ? "killed by signal" : "exit status",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		} else {
			ok++;
		}
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("fork_torture (%s): %d forks while 3 threads create chunks and heaps\n",
	       use_api ? "api" : "malloc", forks);
	printf("%d passed, %d failed\n", ok, bad);
	return bad != 0;
}
