/* SPDX-License-Identifier: MIT */
/*
 * verbs_alloc.c - a verbs call of rdmalloc never waits for another
 * thread's extent hook (run under the drop-in over the fake backend, one
 * preload arena).
 *
 * libibverbs (and the fake, more) allocates inside ibv_reg_mr, and may hold
 * a lock of its own meanwhile.  If such an allocation, in a PD attach, waits
 * for the growth of an arena whose hook is registering on another thread,
 * and that hook waits for the same lock, neither returns (fork-preload-fake
 * hung that way about once in 20 runs under load).  Here one thread's hook
 * is held inside its registration; an attach on another thread, whose
 * registrations allocate up to 256 MiB each, must return all the same.
 * Exit 0, or 1 with a message.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define MiB ((size_t)1 << 20)

/* From the fake drop-in (tests/unit/fake_verbs.h), found at run time. */
static struct ibv_pd *(*pd_n)(int);
static void (*block_next_reg_on)(struct ibv_pd *);
static void (*wait_blocked)(void);
static void (*release_reg)(void);
static void (*reg_mallocs)(size_t);
static int (*attach_pd)(struct ibv_pd *);

static void *sym(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	if (!f) {
		fprintf(stderr, "verbs_alloc: %s not found: run under librdmalloc-preload-fake.so\n", name);
		exit(1);
	}
	return f;
}

static atomic_int go_grow, go_attach, attacher_bound;

static void spin_until(atomic_int *flag)
{
	while (!atomic_load(flag))
		nanosleep(&(struct timespec){ 0, 1000 * 1000 }, NULL);
}

static void *grow(void *arg)
{
	(void)arg;
	spin_until(&go_grow);
	block_next_reg_on(pd_n(0)); /* armed here: no other thread grows meanwhile */
	char *p = malloc(200 * MiB); /* a new chunk: the hook registers it, held */
	if (p)
		p[0] = 1;
	return p;
}

static atomic_int attached = -1;

static void *attach(void *arg)
{
	void *volatile first = malloc(16); /* bound to the preload arena, as a thread that */
	free(first);                       /* ever allocated is */
	atomic_store(&attacher_bound, 1);
	spin_until(&go_attach);
	atomic_store(&attached, attach_pd(arg));
	return NULL;
}

int main(void)
{
	pd_n = (struct ibv_pd * (*)(int)) sym("fake_pd");
	block_next_reg_on = (void (*)(struct ibv_pd *))sym("fake_block_next_reg_on");
	wait_blocked = (void (*)(void))sym("fake_wait_blocked");
	release_reg = (void (*)(void))sym("fake_release_reg");
	reg_mallocs = (void (*)(size_t))sym("fake_reg_mallocs");
	attach_pd = (int (*)(struct ibv_pd *))sym("rdma_malloc_attach_pd");

	/* Both threads first: creating one allocates, which must not grow the
	 * arena while the hook is held. */
	pthread_t hook, attacher;
	pthread_create(&hook, NULL, grow, NULL);
	pthread_create(&attacher, NULL, attach, pd_n(1));
	spin_until(&attacher_bound); /* its own first allocation must not meet the held hook */
	atomic_store(&go_grow, 1);
	wait_blocked(); /* the hook is inside ibv_reg_mr, with its arena's growth lock */
	reg_mallocs(256 * MiB); /* more than any free extent: the arena must grow */
	atomic_store(&go_attach, 1);
	int waited = 0;
	while (atomic_load(&attached) < 0 && waited < 5000) {
		nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
		waited += 10;
	}
	int stuck = atomic_load(&attached) < 0;
	release_reg();
	void *p;
	pthread_join(hook, &p);
	pthread_join(attacher, NULL);
	if (stuck) {
		fprintf(stderr, "verbs_alloc: rdma_malloc_attach_pd waited %d ms for another thread's "
				"extent hook (its registrations' allocations went to jemalloc)\n", waited);
		return 1;
	}
	if (atomic_load(&attached) != 0 || !p) {
		fprintf(stderr, "verbs_alloc: attach %s, growth %s\n", strerror(atomic_load(&attached)),
			p ? "ok" : "failed");
		return 1;
	}
	free(p);
	printf("ok: a PD attach returned while another thread's hook was held inside ibv_reg_mr\n");
	return 0;
}
