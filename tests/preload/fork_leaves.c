/* SPDX-License-Identifier: MIT */
/*
 * fork_leaves.c - fork() while other threads hold one of the library's leaf
 * locks (issue 10, item 4).  Each round starts threads that make their
 * first key lookup (each joins the lookup counters' list under its lock)
 * and exit (each leaves the list under the same lock), and forks in the
 * middle of that.  To make the window certain, this program interposes
 * pthread_mutex_lock: in those threads every lock is held 20 ms longer.  The child reads the stats, looks
 * keys up and exits; a child that inherited a lock held at fork hangs and
 * is killed by alarm(), which counts as a failure.  Before every lock was
 * in lock.h's table, the lookup counters' lock had no fork handler.
 *
 *   fork_leaves [ROUNDS] [THREADS]     prints "N passed, M failed"
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_malloc.h"

static atomic_int go, started;
static _Thread_local int stretch; /* hold every lock this thread takes longer */

/* The library's pthread_mutex_lock calls bind to this one (the executable
 * comes first in symbol lookup). */
int pthread_mutex_lock(pthread_mutex_t *m)
{
	static int (*real)(pthread_mutex_t *);
	if (!real)
		real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
	int rc = real(m);
	if (stretch)
		usleep(20000);
	return rc;
}
static char *buf;

static void *one_lookup(void *arg)
{
	(void)arg;
	uint32_t lkey;
	stretch = (int)(uintptr_t)arg;
	rdma_malloc_keys(buf, 1, NULL, &lkey, NULL);
	atomic_fetch_add(&started, 1);
	while (!atomic_load(&go))
		sched_yield();
	return NULL; /* the exit leaves the list, under the lock */
}

static int child(void)
{
	alarm(3);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		return 3;
	uint32_t lkey;
	rdma_malloc_keys(buf, 1, NULL, &lkey, NULL);
	rdma_free(rdma_malloc(1000));
	return 0;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 30;
	int nthreads = argc > 2 ? atoi(argv[2]) : 4;
	buf = rdma_malloc(4096);
	pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
	pthread_attr_t small;
	pthread_attr_init(&small);
	pthread_attr_setstacksize(&small, 64 << 10);
	int ok = 0, bad = 0;
	for (int r = 0; r < rounds; r++) {
		atomic_store(&go, 0);
		atomic_store(&started, 0);
		int n = 0;
		while (n < nthreads && pthread_create(&t[n], &small, one_lookup, (void *)1) == 0)
			n++;
		usleep(5000); /* some are joining the list now, each holding its lock 20 ms */
		pid_t pid = fork();
		if (pid == 0)
			_exit(child());
		atomic_store(&go, 1);
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
			bad++;
			fprintf(stderr, "fork_leaves: round %d: child %s %d\n", r,
				WIFSIGNALED(st) ? "killed by signal (alarm: it hung)" : "exit status",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		} else {
			ok++;
		}
		for (int i = 0; i < n; i++)
			pthread_join(t[i], NULL);
	}
	printf("fork_leaves: %d forks, each while %d threads join or leave the lookup counters\n", rounds,
	       nthreads);
	printf("%d passed, %d failed\n", ok, bad);
	return bad != 0;
}
