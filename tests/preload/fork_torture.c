/* SPDX-License-Identifier: MIT */
/*
 * fork_torture.c - fork() while other threads create chunks (large
 * allocations), create and destroy heaps, and, when the backend is the
 * fake one (it registers, and allocates inside registration as libibverbs
 * does), attach and detach a PD, change a heap's access and look keys up:
 * every child must be able to allocate, free and exit, and the parent must
 * never hang in fork().  A child stuck on a lock held at fork time is
 * killed by alarm() and counts as a failure; a parent that makes no
 * progress for 60 s says so and exits 2.
 *
 *   fork_torture [api|malloc] [FORKS] [churn]   prints "N passed, M failed"
 * ("churn": only the threads that create chunks and heaps)
 * "api" uses rdma_malloc (link with librdmalloc, or with the test library
 * and the fake backend: -DFORK_FAKE); "malloc" uses plain malloc (run under
 * the LD_PRELOAD drop-in, or under the fake drop-in, which exports
 * fake_pd).  With a real device (the Soft-RoCE guest) the second PD is
 * allocated on the default PD's context, and every thread runs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rdma_malloc.h"
#ifdef FORK_FAKE
#include "fake_verbs.h"
#endif

static int use_api;
static atomic_int stop;
static atomic_int progress; /* forks done */
static atomic_int errors;   /* unexpected results in the parent's threads */
static struct ibv_pd *(*pd_of)(int); /* fake_pd, or a second PD of the real device */
static struct ibv_pd *second_pd;

static struct ibv_pd *real_pd(int i)
{
	(void)i;
	return second_pd;
}

static void error(const char *what, int err)
{
	fprintf(stderr, "fork_torture: %s: %s\n", what, strerror(err));
	atomic_fetch_add(&errors, 1);
}

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

/* Attach and detach a second PD, over and over. */
static void *pds(void *arg)
{
	(void)arg;
	struct ibv_pd *pd = pd_of(1);
	while (!atomic_load(&stop)) {
		int e = rdma_malloc_attach_pd(pd);
		if (e && e != EEXIST)
			error("attach", e);
		void *p = xalloc(1000);
		e = rdma_malloc_keys(p, 1, pd, NULL, NULL);
		if (e && e != ENODEV) /* a detach may come first: only our thread detaches */
			error("keys with the second PD", e);
		xfree(p);
		e = rdma_malloc_detach_pd(pd);
		if (e)
			error("detach", e);
		usleep(1000); /* glibc's mutexes are unfair: let the others have the PD lock */
	}
	return NULL;
}

static atomic_ulong key_changes;

static void on_change(void *ctx, struct ibv_pd *pd, void *addr, size_t len, uint32_t ol, uint32_t ok,
		      uint32_t nl, uint32_t nk)
{
	(void)ctx, (void)pd, (void)addr, (void)len, (void)ol, (void)ok, (void)nl, (void)nk;
	atomic_fetch_add(&key_changes, 1);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st); /* allowed in the callback */
}

/* Change a heap's access while its keys are looked up and stats read. */
static void *access_changes(void *arg)
{
	(void)arg;
	const unsigned lw = IBV_ACCESS_LOCAL_WRITE, rr = IBV_ACCESS_REMOTE_READ;
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = lw | rr });
	if (!h) {
		error("heap", errno);
		return NULL;
	}
	char *p = rdma_heap_malloc(h, 100000);
	for (unsigned i = 0; p && !atomic_load(&stop); i++) {
		unsigned a = i % 2 ? lw | rr | IBV_ACCESS_REMOTE_WRITE : lw | rr;
		int e = rdma_heap_set_access(h, a, i % 3 ? 0 : RDMA_HEAP_SET_ACCESS_NEW_KEYS, on_change, NULL);
		if (e)
			error("set_access", e);
		uint32_t l, k;
		if ((e = rdma_malloc_keys(p + i % 100000, 1, NULL, &l, &k)) != 0)
			error("keys", e);
		struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
		if ((e = rdma_malloc_stats_get(&st)) != 0)
			error("stats", e);
		usleep(1000);
	}
	rdma_free(p);
	if (rdma_heap_destroy(h))
		error("heap destroy", EBUSY);
	return NULL;
}

/* A parent stuck in fork() never returns: say so instead of timing out. */
static void *watchdog(void *arg)
{
	(void)arg;
	int last = -1, still = 0;
	while (!atomic_load(&stop)) {
		sleep(1);
		int now = atomic_load(&progress);
		still = now == last ? still + 1 : 0;
		last = now;
		if (still == 60) {
			fprintf(stderr, "fork_torture: the parent hung: no fork returned for 60 s after %d\n", now);
			if (getenv("FORK_TORTURE_STAY")) /* leave it hung, for a debugger */
				for (;;)
					pause();
			_exit(2);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	/* Each line out at once: a piped log keeps what came before a crash. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	use_api = argc > 1 && !strcmp(argv[1], "api");
	int forks = argc > 2 ? atoi(argv[2]) : 200;
#ifdef FORK_FAKE
	fake_verbs_install(1);
	pd_of = fake_pd;
#else
	pd_of = (struct ibv_pd * (*)(int)) dlsym(RTLD_DEFAULT, "fake_pd"); /* the fake drop-in */
#endif
	/* A real device (the Soft-RoCE guest): a second PD on its context. */
	struct ibv_pd *def = rdma_malloc_default_pd();
	if (!pd_of && def && (second_pd = ibv_alloc_pd(def->context)) != NULL)
		pd_of = real_pd;
	/* Initialised before the first fork: a child that initialises the
	 * library itself has keys of its own, legitimately. */
	rdma_free(rdma_malloc(1));
	pthread_t t[6], dog;
	int nt = 0;
	pthread_create(&dog, NULL, watchdog, NULL);
	for (int i = 0; i < 3; i++)
		pthread_create(&t[nt++], NULL, churn, (void *)(uintptr_t)(i * 5));
	if (argc > 3 && !strcmp(argv[3], "churn"))
		pd_of = NULL;
	if (pd_of) {
		pthread_create(&t[nt++], NULL, pds, NULL);
		pthread_create(&t[nt++], NULL, access_changes, NULL);
	}
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
		atomic_fetch_add(&progress, 1);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	pthread_join(dog, NULL);
	printf("fork_torture (%s%s): %d forks while 3 threads create chunks and heaps%s\n",
	       use_api ? "api" : "malloc", second_pd ? ", real device" : pd_of ? ", fake backend" : "", forks,
	       pd_of ? ", one attaches and detaches a PD, one changes a heap's access" : "");
	if (pd_of)
		printf("%lu key changes reported, %d unexpected results\n", atomic_load(&key_changes),
		       atomic_load(&errors));
	printf("%d passed, %d failed\n", ok, bad);
	if (second_pd && ibv_dealloc_pd(second_pd))
		error("ibv_dealloc_pd", EBUSY);
	return bad != 0 || atomic_load(&errors) != 0;
}
