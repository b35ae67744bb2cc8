/* SPDX-License-Identifier: MIT */
/*
 * cancel.c - a thread with a cancellation pending (deferred, the default)
 * is not cancelled inside an allocation call: glibc's malloc has no
 * cancellation point, and one inside ours (a wait for a lock's condition,
 * a nap, the log's write, a read of /proc) would unwind the thread out of
 * jemalloc or our hooks with their locks held, and every later allocation
 * would wait for ever.  The thread's allocation returns, and the
 * cancellation acts at its next cancellation point.
 * Run under the fake drop-in, eager, with RDMALLOC_LOG_LEVEL=debug: every
 * chunk made is registered and logged inside the hook.
 *   cancel
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int returned; /* allocation calls the victim came back from */

static void *victim(void *arg)
{
	void *(*rmalloc)(size_t) = (void *(*)(size_t))arg;
	pthread_cancel(pthread_self()); /* pending until a cancellation point */
	void *p = malloc((size_t)64 << 20); /* a chunk made, registered, logged */
	atomic_fetch_add(&returned, 1);
	void *q = realloc(p, (size_t)160 << 20);
	atomic_fetch_add(&returned, 1);
	free(q ? q : p);
	atomic_fetch_add(&returned, 1);
	void *r = rmalloc((size_t)100 << 20); /* an rdma_* heap's big block */
	atomic_fetch_add(&returned, 1);
	free(r);
	atomic_fetch_add(&returned, 1);
	pthread_testcancel();
	return NULL;
}

int main(void)
{
	void *rmalloc = dlsym(RTLD_DEFAULT, "rdma_malloc");
	if (!rmalloc) {
		fprintf(stderr, "cancel: rdma_malloc not found: run under the drop-in\n");
		return 2;
	}
	alarm(60); /* a lock left held: every allocation below waits */
	pthread_t t;
	void *res = NULL;
	if (pthread_create(&t, NULL, victim, rmalloc) || pthread_join(t, &res))
		return 2;
	int n = atomic_load(&returned);
	if (n != 5 || res != PTHREAD_CANCELED) {
		fprintf(stderr, "cancel: FAIL: the thread was cancelled inside its allocation call %d of 5\n", n + 1);
		return 1;
	}
	/* Nothing was left held: the other threads allocate as before. */
	for (int i = 0; i < 4; i++) {
		void *p = malloc((size_t)(i + 1) << 24);
		if (!p)
			return 2;
		free(p);
	}
	printf("cancel: a thread with a pending cancellation came back from its 5 allocation calls\n");
	return 0;
}
