/* SPDX-License-Identifier: MIT */
/*
 * test_metadata.c - a refused mapping of the library's own tables (the
 * META fault site: chunk descriptors, the address map's leaves, idle maps,
 * counter slots, the window and key-change tables) never crashes, hangs or
 * loses a byte: the call that needed it answers ENOMEM, or goes on without
 * it where the contract says so (a lookup's counter slot), and everything
 * else keeps working.
 *
 * Those tables are mapped once and kept, so the calls of a run are not those
 * of the next one in the same process: each run is a child forked before the
 * library initialises (criterion runs each test in a process of its own), so
 * that call n names the same table in every run.  For n = 1, 2, ... a child
 * fails the n-th call (or every call from the n-th on) and runs the
 * workload below, checking after every operation; the sweep ends when a
 * child's whole run injected nothing.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../preload/in_child.h"
#include "fake_verbs.h"
#include "fault.h"
#include "rdma_malloc.h"
#include "reserve.h"

#define SLOTS 24
#define NO_FAULT 2 /* a child's exit status: nothing was injected */

/* The child's verdict: criterion's asserts belong to the test's process. */
static __attribute__((noreturn, format(printf, 1, 2))) void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(1);
}

static unsigned long injected(void)
{
	return rdmalloc_fault_injected_total(RDMALLOC_FAULT_META);
}

static unsigned long op_n;
static unsigned long inj0;

static const char *op_name;

/* The next operation, @what, starts. */
static void op(const char *what)
{
	op_name = what;
	op_n++;
	inj0 = injected();
}

/* @what failed with @err: only ENOMEM, and only if this very operation was
 * refused a table. */
static void refused(const char *what, int err)
{
	if (err != ENOMEM)
		fail("op %lu (%s), %s: failed with %d (%s), want ENOMEM", op_n, op_name, what, err, strerror(err));
	if (injected() == inj0)
		fail("op %lu (%s), %s: ENOMEM although no mapping was refused", op_n, op_name, what);
}

/* The keys of [p, p+len) under @pd are those of a region the backend holds
 * live for that PD over the whole range; @want: the lookup's answer. */
static void keys_ok(const void *p, size_t len, struct ibv_pd *pd, int want, const char *what)
{
	uint32_t lk = 0, rk = 0;
	errno = 4321;
	int e = rdma_malloc_keys(p, len, pd, &lk, &rk);
	if (errno != 4321)
		fail("op %lu, %s: the lookup changed errno to %d", op_n, what, errno);
	if (e != want)
		fail("op %lu, %s: lookup of %p (%zu B) gave %d, want %d", op_n, what, p, len, e, want);
	if (e)
		return;
	const struct fake_mr_info *f = fake_find(pd ? pd : fake_pd(0), p);
	if (!f || f->mr->lkey != lk || f->mr->rkey != rk)
		fail("op %lu, %s: keys of %p are of no live region of that PD", op_n, what, p);
	if ((const char *)p + len > (const char *)f->addr + f->len)
		fail("op %lu, %s: [%p, +%zu) runs past its region", op_n, what, p, len);
}

struct state {
	rdma_heap_t *h;
	char *p[SLOTS];
	size_t sz[SLOTS];
	unsigned char fill[SLOTS];
	int attached;
};

static void check_blocks(struct state *s, const char *what)
{
	for (int i = 0; i < SLOTS; i++) {
		if (!s->p[i])
			continue;
		for (size_t k = 0; k < s->sz[i]; k += 4093)
			if ((unsigned char)s->p[i][k] != s->fill[i])
				fail("op %lu, %s: byte %zu of block %d changed", op_n, what, k, i);
		if ((unsigned char)s->p[i][s->sz[i] - 1] != s->fill[i])
			fail("op %lu, %s: the last byte of block %d changed", op_n, what, i);
		keys_ok(s->p[i], s->sz[i], NULL, 0, what);
		keys_ok(s->p[i], s->sz[i], fake_pd(1), s->attached ? 0 : ENODEV, what);
	}
}

static void put(struct state *s, int i, char *p, size_t sz)
{
	s->p[i] = p;
	s->sz[i] = sz;
	s->fill[i] = (unsigned char)(op_n * 29 + 3);
	memset(p, s->fill[i], sz);
}

static void key_changed(void *ctx, struct ibv_pd *pd, void *addr, size_t len, uint32_t old_lkey,
			uint32_t old_rkey, uint32_t new_lkey, uint32_t new_rkey)
{
	(void)pd, (void)addr, (void)len, (void)old_lkey, (void)old_rkey, (void)new_lkey, (void)new_rkey;
	++*(unsigned long *)ctx;
}

/* More threads than the counters' first page of slots holds, alive at once:
 * the last ones' first lookup maps a page (counters.c). */
#define LOOKUP_THREADS 72
static pthread_barrier_t all_looked;

static void *lookup_thread(void *arg)
{
	struct state *s = arg;
	for (int i = 0; i < SLOTS; i++)
		if (s->p[i])
			keys_ok(s->p[i], s->sz[i], NULL, 0, "a new thread's first lookups");
	pthread_barrier_wait(&all_looked);
	return NULL;
}

static void workload(void)
{
	static struct state st;
	struct state *s = &st;
	static const size_t sizes[SLOTS] = { 16,	 48,	  100,	   512,	    2000,      4096,
					     9000,	 30000,	  65536,   200000,  1 << 20,   3 << 20,
					     (9 << 20) + 5, 24, 64,	  128,	   3000,      70000,
					     (2 << 20) + 1, 33, 777,	  5000,	   (17 << 20), 40 };

	op("heap create");
	s->h = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, .flags = RDMA_HEAP_MW_BIND });
	if (!s->h) {
		refused("rdma_heap_create", errno);
		return; /* nothing else to do without it: the default heap's calls below */
	}
	for (int i = 0; i < SLOTS; i++) {
		op("allocation");
		errno = 4321;
		char *p = i % 5 == 4 ? rdma_heap_aligned_alloc(s->h, 4096, sizes[i])
			  : i % 5 == 3 ? rdma_heap_calloc(s->h, 1, sizes[i])
				       : rdma_heap_malloc(s->h, sizes[i]);
		if (!p) {
			refused("an allocation", errno);
		} else {
			if (errno != 4321)
				fail("op %lu: a successful allocation changed errno to %d", op_n, errno);
			put(s, i, p, sizes[i]);
		}
		check_blocks(s, "allocations");
	}

	op("new threads' lookups");
	pthread_t t[LOOKUP_THREADS];
	pthread_barrier_init(&all_looked, NULL, LOOKUP_THREADS);
	for (int i = 0; i < LOOKUP_THREADS; i++)
		if (pthread_create(&t[i], NULL, lookup_thread, s))
			fail("no thread");
	for (int i = 0; i < LOOKUP_THREADS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&all_looked);

	op("attach");
	int e = rdma_malloc_attach_pd(fake_pd(1));
	if (e)
		refused("rdma_malloc_attach_pd", e);
	s->attached = !e;
	check_blocks(s, "attach");

	op("access change");
	unsigned long changes = 0;
	const unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	e = rdma_heap_set_access(s->h, access, RDMA_HEAP_SET_ACCESS_NEW_KEYS, key_changed, &changes);
	if (e) {
		refused("rdma_heap_set_access", e);
		if (changes) /* no memory to record them: not reported, whether made or not */
			fail("op %lu: ENOMEM, yet %lu key changes were reported", op_n, changes);
	} else if (!changes) {
		fail("op %lu: new keys for every region, none reported", op_n);
	}
	check_blocks(s, "access change");

	for (int i = 0; i < SLOTS; i += 7) {
		if (!s->p[i])
			continue;
		op("memory window");
		struct ibv_qp qp = { .pd = fake_pd(0) };
		errno = 0;
		struct ibv_mw *mw = rdma_malloc_mw_grant(&qp, s->p[i], s->sz[i], IBV_ACCESS_REMOTE_READ,
							 IBV_MW_TYPE_2, 0, 0);
		if (!mw)
			refused("rdma_malloc_mw_grant", errno);
		else if ((e = rdma_malloc_mw_free(mw)))
			fail("op %lu: rdma_malloc_mw_free: %d", op_n, e);
	}

	for (int i = 0; i < SLOTS; i += 3) {
		if (!s->p[i])
			continue;
		op("realloc");
		size_t n = s->sz[i] * 3 + 70000;
		char *q = rdma_heap_realloc(s->h, s->p[i], n);
		if (!q) {
			refused("rdma_heap_realloc", errno);
		} else {
			for (size_t k = 0; k < s->sz[i]; k += 4093)
				if ((unsigned char)q[k] != s->fill[i])
					fail("op %lu: realloc lost byte %zu of block %d", op_n, k, i);
			put(s, i, q, n);
		}
		check_blocks(s, "realloc");
	}

	op("default heap");
	errno = 4321;
	char *d = rdma_malloc(100000);
	if (!d)
		refused("rdma_malloc", errno);
	else
		keys_ok(d, 100000, NULL, 0, "the default heap");
	rdma_free(d);

	op("detach");
	e = rdma_malloc_detach_pd(fake_pd(1));
	if (e != (s->attached ? 0 : ENODEV))
		fail("op %lu: detach gave %d", op_n, e);
	s->attached = 0;
	check_blocks(s, "detach");

	char *was[SLOTS];
	for (int i = 0; i < SLOTS; i++) {
		was[i] = s->p[i];
		rdma_free(s->p[i]);
		s->p[i] = NULL;
	}
	op("heap destroy");
	if ((e = rdma_heap_destroy(s->h)))
		fail("rdma_heap_destroy: %d", e);
	for (int i = 0; i < SLOTS; i++)
		if (was[i])
			keys_ok(was[i], 1, NULL, ENOENT, "after destroy");
}

static unsigned long arm_n, arm_count;

/* A child's run: 0 (a fault injected, everything held), NO_FAULT, or 1 with
 * what failed on its standard error. */
static void child(void *unused)
{
	(void)unused;
	alarm(60); /* a hang fails the run (SIGALRM) */
	fake_verbs_install(1);
	rdmalloc_fault_arm(RDMALLOC_FAULT_META, arm_n, arm_count, ENOMEM);
	workload();
	unsigned long got = injected();
	rdmalloc_fault_disarm_all();
	rdmalloc_reserves_settle();
	/* Nothing the backend holds that the stats do not count. */
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		fail("rdma_malloc_stats_get");
	if (st.mrs != fake_live_mrs())
		fail("the stats say %llu regions, the backend holds %zu", (unsigned long long)st.mrs,
		     fake_live_mrs());
	if (st.heaps != 1)
		fail("%llu heaps left", (unsigned long long)st.heaps);
	_exit(got ? 0 : NO_FAULT);
}

static int run(unsigned long n, unsigned long count, char *out, size_t len)
{
	arm_n = n;
	arm_count = count;
	int ws = in_child(child, NULL, out, len);
	cr_assert_neq(ws, -1, "no child: %s", strerror(errno));
	return ws;
}

/* Fail call n (@count 1) or every call from n on (@count 0), n = 1, 2, ...
 * until a run injects nothing twice in a row (the reserve's thread makes
 * tables too, so a run's calls may vary by a few). */
static void sweep(unsigned long count, const char *mode)
{
	char out[4096];
	unsigned long n, faulted = 0, quiet = 0;
	for (n = 1; quiet < 2 && n < 2000; n++) {
		int ws = run(n, count, out, sizeof(out));
		cr_assert(WIFEXITED(ws) && (WEXITSTATUS(ws) == 0 || WEXITSTATUS(ws) == NO_FAULT),
			  "%s, n=%lu: %s %d; said: %s", mode, n, WIFEXITED(ws) ? "exit" : "signal",
			  WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), out);
		quiet = WEXITSTATUS(ws) == NO_FAULT ? quiet + 1 : 0;
		faulted += WEXITSTATUS(ws) == 0;
	}
	cr_assert_lt(n, 2000, "%s: still faults at n=%lu", mode, n);
	cr_assert_gt(faulted, 4, "%s: only %lu runs had a mapping refused", mode, faulted);
	printf("metadata sweep %s: %lu runs refused a table, all held\n", mode, faulted);
}

Test(metadata, refused_once, .timeout = 300)
{
	sweep(1, "once");
}

Test(metadata, refused_from_n_on, .timeout = 300)
{
	sweep(0, "from-n-on");
}
