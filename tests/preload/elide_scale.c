/* SPDX-License-Identifier: MIT */
/*
 * elide_scale.c - registration elision at the scale of an engine (issue 13,
 * item 3), on a host without a device: run under the fake drop-in
 * (librdmalloc-preload-fake.so, tests/preload/fake_dropin.c), whose
 * stand-ins answer what elide.c hands on to libibverbs.  PDs are the
 * program's own structs: the fake backend registers chunks with any.
 *   elide_scale CASE    (rereg, dealloc, evict, slots, scale, threads,
 *                        detach, adopt, handed, fork, atfork, lookups, iova)
 * Prints ok/FAIL lines; exit 0 when every check passed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_dropin.h"
#include "fake_verbs.h"
#include "rdma_malloc.h"

#ifndef ELIDED_MAX
#error "ELIDED_MAX: the fake drop-in's RDMALLOC_ELIDED_MAX"
#endif

#define ACC IBV_ACCESS_LOCAL_WRITE
#define MiB ((size_t)1 << 20)

static int failed;

#define CHECK(cond, ...)                                \
	do {                                            \
		if (cond) {                             \
			printf("ok   ");                \
		} else {                                \
			printf("FAIL ");                \
			__atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED); \
		}                                       \
		printf(__VA_ARGS__);                    \
		printf("\n");                           \
	} while (0)

/* The drop-in's functions, found at run time (it is preloaded). */
static int (*stats_get)(struct rdma_malloc_stats *);
static int (*keys_of)(const void *, size_t, struct ibv_pd *, uint32_t *, uint32_t *);
static struct ibv_mr *(*mr_of)(const void *, size_t, struct ibv_pd *);
static fake_dropin_passed_live_fn passed_live;
static fake_dropin_deallocs_fn deallocs;
static fake_dropin_dealloc_calls_fn dealloc_calls;
static int (*attach_pd)(struct ibv_pd *);
static int (*detach_pd)(struct ibv_pd *);
static const struct fake_mr_info *(*chunk_reg)(struct ibv_pd *, const void *);

static void *need(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	if (!f) {
		printf("FAIL %s not found: run under librdmalloc-preload-fake.so\n", name);
		exit(1);
	}
	return f;
}

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (stats_get(&st)) {
		printf("FAIL rdma_malloc_stats_get\n");
		exit(1);
	}
	return st;
}

static struct ibv_pd *new_pd(void)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd)
		exit(1);
	return pd;
}

/* Whether @mr is an elided region: its keys are its chunk's with its PD. */
/* Whether @mr is elided: the keys of its chunk's registration with @pd, as
 * the backend has them.  Not through rdma_malloc_keys, which would hand
 * keys of @pd out to the program (and keep elision from ever evicting it). */
static int elided(const struct ibv_mr *mr, struct ibv_pd *pd)
{
	const struct fake_mr_info *f = mr ? chunk_reg(pd, mr->addr) : NULL;
	return mr && mr->lkey < FAKE_DROPIN_KEY_BASE && f && f->mr->lkey == mr->lkey && f->mr->rkey == mr->rkey &&
	       mr->pd == pd;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
	return *x;
}

/* ---- rereg: the handle, re-registration in place, and its own registration ---- */

static void case_rereg(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *a = new_pd(), *b = new_pd();
	struct rdma_malloc_stats s0 = stats();
	struct ibv_mr *mr = ibv_reg_mr(a, buf, 4096, ACC);
	CHECK(elided(mr, a), "ibv_reg_mr of malloc'ed memory is elided");
	struct ibv_mr *cmr = mr_of(buf, 4096, a);
	CHECK(cmr && mr && cmr != mr && mr->handle != cmr->handle,
	      "the elided region's handle (%u) is not its chunk's registration's (%u)", mr ? mr->handle : 0,
	      cmr ? cmr->handle : 0);
	if (!mr)
		return;

	int r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf + 8192, 65536, 0);
	struct rdma_malloc_stats s1 = stats();
	CHECK(r == 0 && mr->addr == buf + 8192 && mr->length == 65536 && elided(mr, a),
	      "rereg CHANGE_TRANSLATION in place: %d, [%p, +%zu), elided", r, mr->addr, mr->length);
	CHECK(s1.elided_rereg_in_place == s0.elided_rereg_in_place + 1 && passed_live() == 0,
	      "counted in elided_rereg_in_place (%llu), nothing handed to libibverbs (%zu)",
	      (unsigned long long)s1.elided_rereg_in_place, passed_live());

	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, b, NULL, 0, 0);
	struct rdma_malloc_stats s2 = stats();
	CHECK(r == 0 && elided(mr, b) && s2.pds == s1.pds + 1,
	      "rereg CHANGE_PD in place: %d, the new PD attached (pds %llu -> %llu), keys its", r,
	      (unsigned long long)s1.pds, (unsigned long long)s2.pds);
	r = ibv_dealloc_pd(a);
	CHECK(r == 0 && a->handle == FAKE_DROPIN_PD_DEALLOCATED && stats().pds == s2.pds - 1,
	      "the old PD, left without regions, deallocates (%d): detached, then libibverbs's", r);

	errno = 0;
	r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE);
	CHECK(r == IBV_REREG_MR_ERR_INPUT && errno == EINVAL && elided(mr, b),
	      "access without CHANGE_ACCESS: IBV_REREG_MR_ERR_INPUT, EINVAL (%d, %s), region intact", r,
	      strerror(errno));
	/* Nothing to change: libibverbs hands it to the kernel, which refuses
	 * it before touching the region (EINVAL, ib_uverbs_rereg_mr). */
	errno = 0;
	r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
	CHECK(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL && elided(mr, b) && passed_live() == 0,
	      "no flags: IBV_REREG_MR_ERR_CMD, EINVAL as the kernel's (%d, %s), region intact", r, strerror(errno));

	/* Not elidable, and libibverbs refuses too: the region stays as it was. */
	struct ibv_pd *refuses = new_pd();
	refuses->handle = FAKE_DROPIN_PD_REFUSES;
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS | IBV_REREG_MR_CHANGE_PD, refuses, NULL, 0,
			 ACC | IBV_ACCESS_REMOTE_WRITE);
	CHECK(r == IBV_REREG_MR_ERR_CMD && errno == EPERM && elided(mr, b) && passed_live() == 0,
	      "a registration of its own refused: IBV_REREG_MR_ERR_CMD, its errno (%d, %s), region as it was", r,
	      strerror(errno));
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, ACC | IBV_ACCESS_REMOTE_WRITE);
	struct rdma_malloc_stats s3 = stats();
	CHECK(r == 0 && mr->lkey >= FAKE_DROPIN_KEY_BASE && passed_live() == 1 && mr->addr == buf + 8192 &&
	      mr->length == 65536 && mr->pd == b,
	      "rereg to more access than the chunk grants: a registration of its own (%d, lkey %#x)", r,
	      mr->lkey);
	CHECK(s3.elided_rereg_backed == s0.elided_rereg_backed + 1 && s3.elided_regions == s0.elided_regions &&
	      mr->handle != cmr->handle,
	      "counted in elided_rereg_backed, no longer in elided_regions; handle still not a chunk's");
	uint32_t old_lkey = mr->lkey;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf, 4096, 0);
	CHECK(r == 0 && mr->lkey != old_lkey && mr->addr == buf && mr->length == 4096,
	      "rereg of it goes to libibverbs (%d): new keys and range", r);
	r = ibv_dereg_mr(mr);
	CHECK(r == 0 && passed_live() == 0, "ibv_dereg_mr of it deregisters its registration (%d)", r);
	r = ibv_dealloc_pd(b);
	CHECK(r == 0 && b->handle == FAKE_DROPIN_PD_DEALLOCATED, "ibv_dealloc_pd of the other PD: %d", r);
	CHECK(stats().pds == s0.pds, "PDs attached as at the start (%llu)", (unsigned long long)stats().pds);

	/* A region libibverbs registered is re-registered by libibverbs. */
	struct ibv_pd *c = new_pd();
	struct ibv_mr *own = ibv_reg_mr(c, buf, 4096, ACC | IBV_ACCESS_REMOTE_READ);
	CHECK(own && own->lkey >= FAKE_DROPIN_KEY_BASE, "more access than the heap's: passed through");
	r = ibv_rereg_mr(own, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf + 4096, 4096, 0);
	CHECK(r == 0 && own->addr == buf + 4096, "its rereg goes to libibverbs (%d)", r);
	CHECK(ibv_dereg_mr(own) == 0 && ibv_dealloc_pd(c) == 0 && passed_live() == 0, "and its dereg");
	free(buf);
}

/* ---- dealloc: EBUSY while regions live, detached with the last ---- */

static void case_dealloc(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *p = new_pd();
	struct rdma_malloc_stats s0 = stats();
	struct ibv_mr *m1 = ibv_reg_mr(p, buf, 100, ACC);
	struct rdma_malloc_stats s1 = stats();
	CHECK(elided(m1, p) && s1.pds == s0.pds + 1, "elided, the PD attached (pds %llu)",
	      (unsigned long long)s1.pds);
	int r = ibv_dealloc_pd(p);
	CHECK(r == EBUSY && p->handle != FAKE_DROPIN_PD_DEALLOCATED, "ibv_dealloc_pd with a live region: EBUSY (%d)",
	      r);
	struct ibv_mr *m2 = ibv_reg_mr(p, buf + 4096, 100, ACC);
	CHECK(elided(m2, p), "the PD still elides after the refused deallocation");
	CHECK(ibv_dereg_mr(m1) == 0 && stats().pds == s1.pds, "one region left: still attached");
	CHECK(ibv_dereg_mr(m2) == 0, "the last region deregistered");
	struct rdma_malloc_stats s2 = stats();
	CHECK(s2.pds == s0.pds && s2.elided_pds_detached == s0.elided_pds_detached + 1 && !chunk_reg(p, buf),
	      "with its last region the PD was detached: pds %llu -> %llu, elided_pds_detached %llu, no chunk "
	      "registered with it",
	      (unsigned long long)s1.pds, (unsigned long long)s2.pds, (unsigned long long)s2.elided_pds_detached);
	r = ibv_dealloc_pd(p);
	CHECK(r == 0 && p->handle == FAKE_DROPIN_PD_DEALLOCATED, "ibv_dealloc_pd again goes to libibverbs: %d", r);
	free(buf);
}

/* ---- evict: leaked idle PDs never block elision ---- */

static void case_evict(void)
{
	char *buf = malloc(MiB);
	struct rdma_malloc_stats s0 = stats();
	int n = 3 * RDMA_MALLOC_MAX_PDS, ok = 0;
	struct ibv_pd *first = NULL;
	for (int i = 0; i < n; i++) {
		struct ibv_pd *q = new_pd(); /* leaked: never deallocated */
		if (!first)
			first = q;
		struct ibv_mr *mr = ibv_reg_mr(q, buf + i * 64, 64, ACC);
		ok += elided(mr, q);
		if (mr)
			ibv_dereg_mr(mr);
	}
	struct rdma_malloc_stats s1 = stats();
	CHECK(ok == n && s1.passthrough_registrations == s0.passthrough_registrations,
	      "%d of %d leaked PDs elided, none passed through (%llu)", ok, n,
	      (unsigned long long)(s1.passthrough_registrations - s0.passthrough_registrations));
	CHECK(s1.pds <= RDMA_MALLOC_MAX_PDS && s1.elided_pds_detached >= s0.elided_pds_detached + (uint64_t)n -
			RDMA_MALLOC_MAX_PDS,
	      "idle ones evicted: pds %llu, elided_pds_detached %llu", (unsigned long long)s1.pds,
	      (unsigned long long)s1.elided_pds_detached);
	int was_attached = chunk_reg(first, buf) != NULL;
	struct ibv_mr *mr = ibv_reg_mr(first, buf, 64, ACC);
	CHECK(!was_attached && elided(mr, first) && chunk_reg(first, buf),
	      "the first leaked PD, evicted, is attached again at its next elision");
	ibv_dereg_mr(mr);
	free(buf);
}

/* ---- slots: every slot held by a busy PD, the next passes through ---- */

static void case_slots(void)
{
	char *buf = malloc(MiB);
	struct rdma_malloc_stats s0 = stats();
	/* A leaked idle PD first: it must make way. */
	struct ibv_pd *leaked = new_pd();
	ibv_dereg_mr(ibv_reg_mr(leaked, buf, 64, ACC));
	int room = RDMA_MALLOC_MAX_PDS - (int)s0.pds; /* the default PD holds one */
	struct ibv_pd *q[RDMA_MALLOC_MAX_PDS + 1];
	struct ibv_mr *mr[RDMA_MALLOC_MAX_PDS + 1];
	int held = 0;
	for (int i = 0; i < room; i++) {
		q[i] = new_pd();
		mr[i] = ibv_reg_mr(q[i], buf + 4096 * i, 100, ACC);
		held += elided(mr[i], q[i]);
	}
	struct rdma_malloc_stats s1 = stats();
	CHECK(held == room && s1.pds == RDMA_MALLOC_MAX_PDS,
	      "%d of %d PDs with a live region each elided, the leaked idle one evicted: pds %llu", held, room,
	      (unsigned long long)s1.pds);
	q[room] = new_pd();
	mr[room] = ibv_reg_mr(q[room], buf, 100, ACC);
	struct rdma_malloc_stats s2 = stats();
	CHECK(mr[room] && mr[room]->lkey >= FAKE_DROPIN_KEY_BASE &&
	      s2.elision_no_pd_slot == s1.elision_no_pd_slot + 1 &&
	      s2.passthrough_registrations == s1.passthrough_registrations + 1 && s2.fallbacks == s1.fallbacks + 1,
	      "every slot busy: the next PD's registration passed through, counted in elision_no_pd_slot (%llu)",
	      (unsigned long long)s2.elision_no_pd_slot);
	CHECK(ibv_dereg_mr(mr[room]) == 0 && ibv_dereg_mr(mr[0]) == 0, "deregistered");
	struct ibv_mr *again = ibv_reg_mr(q[room], buf, 100, ACC);
	CHECK(elided(again, q[room]) && !chunk_reg(q[0], buf),
	      "one PD idle again: the next registration elided, the idle PD evicted");
	ibv_dereg_mr(again);
	for (int i = 1; i < room; i++)
		ibv_dereg_mr(mr[i]);
	int bad = 0;
	for (int i = 0; i <= room; i++)
		bad += ibv_dealloc_pd(q[i]) != 0 || q[i]->handle != FAKE_DROPIN_PD_DEALLOCATED;
	CHECK(!bad && stats().elided_regions == 0, "every PD deallocates (%d failed)", bad);
	free(buf);
}

/* ---- scale: the pool, O(1) deregistration, exhaustion ---- */

static void case_scale(void)
{
	size_t n = ELIDED_MAX, span = 4 * MiB;
	char *buf = malloc(span);
	struct ibv_mr **mrs = malloc(n * sizeof(*mrs));
	struct ibv_pd *pd[3] = { new_pd(), new_pd(), new_pd() };
	if (!buf || !mrs)
		exit(1);
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (int round = 0; round < 2; round++) {
		struct rdma_malloc_stats s0 = stats();
		double t0 = now();
		size_t ok = 0;
		for (size_t i = 0; i < n; i++) {
			size_t off = rnd(&x) % (span - 65536), len = 1 + rnd(&x) % 65536;
			struct ibv_pd *p = pd[i % 3];
			mrs[i] = ibv_reg_mr(p, buf + off, len, ACC);
			ok += i % 61 ? mrs[i] && mrs[i]->lkey < FAKE_DROPIN_KEY_BASE : elided(mrs[i], p);
		}
		double t1 = now();
		struct rdma_malloc_stats s1 = stats();
		CHECK(ok == n && s1.elided_regions == n, "round %d: %zu regions, %zu elided, %llu alive (%.2f s)", round,
		      n, ok, (unsigned long long)s1.elided_regions, t1 - t0);
		struct ibv_mr *more = ibv_reg_mr(pd[0], buf, 64, ACC);
		struct rdma_malloc_stats s2 = stats();
		CHECK(more && more->lkey >= FAKE_DROPIN_KEY_BASE && s2.elision_pool_full == s0.elision_pool_full + 1,
		      "the pool full: the next registration passed through, counted in elision_pool_full (%llu)",
		      (unsigned long long)s2.elision_pool_full);
		CHECK(ibv_dereg_mr(more) == 0 && passed_live() == 0, "and deregistered by libibverbs");
		for (size_t i = n - 1; i > 0; i--) { /* random order */
			size_t j = rnd(&x) % (i + 1);
			struct ibv_mr *t = mrs[i];
			mrs[i] = mrs[j], mrs[j] = t;
		}
		double t2 = now();
		size_t done = 0, bad = 0;
		for (; done < n; done++) {
			bad += ibv_dereg_mr(mrs[done]) != 0;
			if (!(done & 1023) && now() - t2 > 10)
				break;
		}
		double t3 = now();
		CHECK(done == n && !bad, "%zu of %zu deregistered in random order in %.2f s (bound 10 s), %zu failed",
		      done, n, t3 - t2, bad);
		if (done != n)
			exit(1);
		CHECK(stats().elided_regions == 0, "none alive");
	}
	for (int i = 0; i < 3; i++)
		CHECK(ibv_dealloc_pd(pd[i]) == 0, "PD %d deallocates", i);
	free(mrs);
	free(buf);
}

/* ---- threads: registrations in several threads, PDs come and go ---- */

#define WORKERS 3
#define STABLE 6
#define WORKER_OPS 100000
static struct ibv_pd *stable[STABLE];
static int workers_done;
static int churn_rounds; /* the workers go on until the churn has overlapped them */

static void *worker(void *arg)
{
	uint64_t x = 0x2545F4914F6CDD1Dull * ((uintptr_t)arg + 1);
	char *buf = malloc(MiB);
	struct ibv_mr *live[64] = { 0 };
	int bad = 0, passed = 0, op = 0;
	/* On a loaded machine the churn thread may not run before the
	 * workers are done: they go on (up to 100 times as long) until it has
	 * made its rounds beside them. */
	for (; op < WORKER_OPS || (__atomic_load_n(&churn_rounds, __ATOMIC_RELAXED) < 20 && op < 100 * WORKER_OPS);
	     op++) {
		int k = (int)(rnd(&x) % 64);
		if (live[k]) {
			bad += ibv_dereg_mr(live[k]) != 0;
			live[k] = NULL;
			continue;
		}
		struct ibv_pd *p = stable[rnd(&x) % STABLE];
		size_t off = rnd(&x) % (MiB - 4096), len = 1 + rnd(&x) % 4096;
		struct ibv_mr *mr = ibv_reg_mr(p, buf + off, len, ACC);
		if (!mr) {
			bad++;
			continue;
		}
		if (mr->lkey >= FAKE_DROPIN_KEY_BASE)
			passed++;
		else if (!elided(mr, p) || !chunk_reg(p, buf + off))
			bad++; /* an elided region whose PD is no longer attached */
		live[k] = mr;
	}
	for (int k = 0; k < 64; k++)
		if (live[k])
			bad += ibv_dereg_mr(live[k]) != 0;
	CHECK(!bad && !passed, "worker %ld: %d ops, %d inconsistent, %d passed through", (long)(uintptr_t)arg, op,
	      bad, passed);
	free(buf);
	return NULL;
}

static void *churn(void *arg)
{
	(void)arg;
	char *buf = malloc(MiB);
	int rounds = 0, elided_n = 0, bad = 0;
	while (!__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE)) {
		struct ibv_pd *q = new_pd();
		struct ibv_mr *mr = ibv_reg_mr(q, buf, 4096, ACC);
		int el = elided(mr, q);
		elided_n += el;
		bad += ibv_dealloc_pd(q) != EBUSY; /* busy, elided or not */
		bad += !mr || ibv_dereg_mr(mr) != 0;
		__atomic_store_n(&churn_rounds, rounds + 1, __ATOMIC_RELAXED);
		if (rounds++ % 2) /* every other PD leaked */
			bad += ibv_dealloc_pd(q) != 0 || q->handle != FAKE_DROPIN_PD_DEALLOCATED;
	}
	CHECK(!bad && elided_n == rounds && rounds > 10,
	      "PD churn: %d PDs created (half leaked), %d elided, %d inconsistent", rounds, elided_n, bad);
	free(buf);
	return NULL;
}

static void case_threads(void)
{
	for (int i = 0; i < STABLE; i++)
		stable[i] = new_pd();
	pthread_t w[WORKERS], c;
	pthread_create(&c, NULL, churn, NULL);
	for (long i = 0; i < WORKERS; i++)
		pthread_create(&w[i], NULL, worker, (void *)i);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(w[i], NULL);
	__atomic_store_n(&workers_done, 1, __ATOMIC_RELEASE);
	pthread_join(c, NULL);
	struct rdma_malloc_stats s = stats();
	CHECK(s.elided_regions == 0 && passed_live() == 0, "no region left (%llu elided, %zu others)",
	      (unsigned long long)s.elided_regions, passed_live());
	int bad = 0;
	for (int i = 0; i < STABLE; i++)
		bad += ibv_dealloc_pd(stable[i]) != 0;
	CHECK(!bad, "the workers' PDs deallocate (%d failed); %llu PDs detached by elision", bad,
	      (unsigned long long)stats().elided_pds_detached);
}

/* ---- keys handed out stay valid until the program lets go (issue 23, item 1) ---- */

/* The program's own detach of a PD whose elided regions are alive would
 * kill the keys they carry: EBUSY, whoever attached the PD, until the last
 * of them is deregistered. */
static void case_detach(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *p = new_pd(), *q = new_pd();
	struct ibv_mr *mp = ibv_reg_mr(p, buf, 100, ACC); /* elision attaches p */
	CHECK(elided(mp, p), "elided with a PD elision attached");
	int r = detach_pd(p);
	CHECK(r == EBUSY && chunk_reg(p, buf) && elided(mp, p),
	      "rdma_malloc_detach_pd with a live elided region: EBUSY (%d), the keys stay", r);
	CHECK(attach_pd(q) == 0, "the program attaches another PD itself");
	struct ibv_mr *mq = ibv_reg_mr(q, buf + 4096, 100, ACC);
	CHECK(elided(mq, q), "elided with it");
	r = detach_pd(q);
	CHECK(r == EBUSY && elided(mq, q), "its detach with a live elided region: EBUSY (%d)", r);
	CHECK(ibv_dereg_mr(mp) == 0 && ibv_dereg_mr(mq) == 0, "both regions deregistered");
	CHECK(detach_pd(q) == 0 && !chunk_reg(q, buf), "then the detach goes through");
	CHECK(detach_pd(p) == 0 && !chunk_reg(p, buf), "and for the PD elision attached too");
	free(buf);
}

/* Elision's eviction of idle PDs it attached, under pressure for PD slots
 * (8 of them): @p, idle, must survive when the program relies on it.
 * Whether it did, its registration and keys unchanged. */
static int survives_eviction(struct ibv_pd *p, char *buf)
{
	const struct fake_mr_info *before = chunk_reg(p, buf);
	struct ibv_mr *was = before ? before->mr : NULL;
	uint32_t lkey = was ? was->lkey : 0;
	for (int i = 0; i < 2 * RDMA_MALLOC_MAX_PDS; i++) {
		struct ibv_pd *q = new_pd(); /* leaked: evictable */
		struct ibv_mr *mr = ibv_reg_mr(q, buf + 64 * (i + 1), 64, ACC);
		if (mr)
			ibv_dereg_mr(mr);
	}
	const struct fake_mr_info *after = chunk_reg(p, buf);
	return was && after && after->mr == was && after->mr->lkey == lkey;
}

/* rdma_malloc_attach_pd(p) answered EEXIST: the program counts on p being
 * attached; elision, which attached it, never detaches it. */
/* A new PD that elision attached for one region of @buf, deregistered
 * since: idle, evictable. */
static struct ibv_pd *idle_pd_of_elision(char *buf)
{
	struct ibv_pd *p = new_pd();
	struct ibv_mr *mr = ibv_reg_mr(p, buf, 64, ACC);
	CHECK(mr && mr->lkey < FAKE_DROPIN_KEY_BASE && ibv_dereg_mr(mr) == 0, "elided once, deregistered: p idle");
	return p;
}

static void case_adopt(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *p = idle_pd_of_elision(buf);
	int r = attach_pd(p);
	CHECK(r == EEXIST, "rdma_malloc_attach_pd(p): EEXIST (%d)", r);
	CHECK(survives_eviction(p, buf), "p is not evicted when 16 more PDs need slots");
	CHECK(detach_pd(p) == 0, "the program detaches it itself");
	free(buf);
}

/* rdma_malloc_keys(buf, p) handed keys out: they stay valid; elision never
 * evicts p under the program. */
static void case_handed(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *p = idle_pd_of_elision(buf);
	uint32_t l = 0, rk = 0;
	CHECK(keys_of(buf, 64, p, &l, &rk) == 0, "rdma_malloc_keys(buf, p) hands out keys");
	CHECK(survives_eviction(p, buf), "p is not evicted when 16 more PDs need slots");
	uint32_t l2 = 0, r2 = 0;
	CHECK(keys_of(buf, 64, p, &l2, &r2) == 0 && l2 == l && r2 == rk, "the keys handed out still answer");
	CHECK(ibv_dealloc_pd(p) == 0, "the program lets go of p: ibv_dealloc_pd detaches it");

	/* A refused ibv_dealloc_pd (EBUSY: nothing done, as libibverbs says)
	 * lets the program go on with the PD: keys it looks up then stay
	 * valid after its last elided region goes (before, that region took
	 * the PD with it: the review of issue 23). */
	struct ibv_pd *q = new_pd();
	struct ibv_mr *m = ibv_reg_mr(q, buf, 100, ACC);
	CHECK(elided(m, q), "a region of q elided");
	CHECK(ibv_dealloc_pd(q) == EBUSY, "ibv_dealloc_pd(q) with a live region: EBUSY");
	CHECK(keys_of(buf + 4096, 64, q, &l, &rk) == 0, "the program goes on: keys of q handed out");
	CHECK(ibv_dereg_mr(m) == 0, "its last elided region deregistered");
	CHECK(chunk_reg(q, buf + 4096) && keys_of(buf + 4096, 64, q, &l2, &r2) == 0 && l2 == l && r2 == rk,
	      "q stays attached, the keys handed out after the refusal still answer");
	CHECK(ibv_dealloc_pd(q) == 0 && q->handle == FAKE_DROPIN_PD_DEALLOCATED && !chunk_reg(q, buf + 4096),
	      "the program's next ibv_dealloc_pd detaches and deallocates q");

	/* Keys looked up only before the refused call: the program meant to
	 * let go of them, and the PD goes with its last region as before (it
	 * stayed attached for good, a slot lost: the second review). */
	struct ibv_pd *v = new_pd();
	m = ibv_reg_mr(v, buf, 100, ACC);
	CHECK(elided(m, v) && keys_of(buf + 4096, 64, v, &l, &rk) == 0, "v elided, keys of v handed out");
	CHECK(ibv_dealloc_pd(v) == EBUSY, "ibv_dealloc_pd(v) with a live region: EBUSY");
	CHECK(ibv_dereg_mr(m) == 0 && !chunk_reg(v, buf + 4096), "with its last region v is detached");
	CHECK(ibv_dealloc_pd(v) == 0 && v->handle == FAKE_DROPIN_PD_DEALLOCATED, "and deallocated by the next call");
	free(buf);
}

/* Lookups of a PD whose keys were handed out, from one thread, while
 * another's registrations with ever new PDs keep elision evicting: the PD
 * stays attached throughout, so no lookup may fail (in an eager rdma_*
 * heap nothing retries an ENODEV).  Before, each eviction that tried it
 * and backed off made its lookups fail meanwhile (found in review). */
static char *lk_buf;
static struct ibv_pd *lk_pd;
static _Atomic int lk_stop;
static unsigned long lk_ok, lk_failed;

static void *look_up_keys(void *arg)
{
	(void)arg;
	while (!atomic_load(&lk_stop)) {
		uint32_t l, r;
		if (keys_of(lk_buf, 64, lk_pd, &l, &r))
			lk_failed++;
		else
			lk_ok++;
	}
	return NULL;
}

static void case_lookups(void)
{
	rdma_heap_t *(*heap_create)(const struct rdma_heap_attr *) = need("rdma_heap_create");
	void *(*heap_malloc)(rdma_heap_t *, size_t) = need("rdma_heap_malloc");
	rdma_heap_t *h = heap_create(&(struct rdma_heap_attr){ .access = ACC });
	lk_buf = h ? heap_malloc(h, 4096) : NULL;
	char *other = malloc(MiB);
	lk_pd = idle_pd_of_elision(lk_buf);
	uint32_t l, r;
	CHECK(keys_of(lk_buf, 64, lk_pd, &l, &r) == 0, "keys of p handed out");
	pthread_t t;
	pthread_create(&t, NULL, look_up_keys, NULL);
	double end = now() + 2;
	unsigned long regs = 0;
	while (now() < end) {
		struct ibv_mr *m = ibv_reg_mr(new_pd(), other, 64, ACC); /* leaked PDs: evictions */
		if (m)
			ibv_dereg_mr(m);
		regs++;
	}
	atomic_store(&lk_stop, 1);
	pthread_join(t, NULL);
	CHECK(!lk_failed && lk_ok, "lookups of p, attached throughout: %lu ok, %lu failed, during %lu registrations "
	      "with new PDs", lk_ok, lk_failed, regs);
	CHECK(chunk_reg(lk_pd, lk_buf) != NULL, "p still attached");
	free(other);
}

/* ibv_reg_mr_iova and _iova2 are elided with iova == addr, whatever
 * optional flags (relaxed ordering: a hint) come with the access; another
 * iova, which an elided region cannot give, goes to libibverbs unchanged
 * (doc/preload.md, "Registration elision"). */
static void case_iova(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *pd = new_pd();
	size_t live = passed_live();
	struct ibv_mr *a = ibv_reg_mr_iova(pd, buf, 4096, (uintptr_t)buf, ACC);
	CHECK(elided(a, pd), "ibv_reg_mr_iova with iova == addr elided");
	struct ibv_mr *b = ibv_reg_mr_iova2(pd, buf + 8192, 4096, (uintptr_t)(buf + 8192),
					    ACC | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(elided(b, pd), "ibv_reg_mr_iova2 with iova == addr and relaxed ordering elided");
	struct ibv_mr *c = ibv_reg_mr(pd, buf, 4096, ACC | IBV_ACCESS_RELAXED_ORDERING);
	CHECK(elided(c, pd), "ibv_reg_mr with relaxed ordering elided");
	CHECK(passed_live() == live, "%zu regions handed on, not 0", passed_live() - live);
	struct ibv_mr *d = ibv_reg_mr_iova(pd, buf, 4096, 0x10000, ACC);
	CHECK(d && !elided(d, pd) && d->lkey >= FAKE_DROPIN_KEY_BASE && passed_live() == live + 1,
	      "ibv_reg_mr_iova with another iova handed on to libibverbs");
	struct ibv_mr *e = ibv_reg_mr_iova2(pd, buf, 4096, 0x20000, ACC);
	CHECK(e && !elided(e, pd) && passed_live() == live + 2, "ibv_reg_mr_iova2 with another iova handed on");
	struct ibv_mr *all[] = { a, b, c, d, e };
	int dereg = 0;
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		dereg += all[i] && ibv_dereg_mr(all[i]) == 0;
	CHECK(dereg == 5 && passed_live() == live, "all five deregistered (%d), none left handed on", dereg);
	free(buf);
	/* Refused by the kernel (EINVAL): handed on, not answered, even from
	 * memory whose chunks allow it (the default heap's, rdma_malloc). */
	void *(*rdma_malloc_fn)(size_t) = (void *(*)(size_t))need("rdma_malloc");
	void (*rdma_free_fn)(void *) = (void (*)(void *))need("rdma_free");
	char *remote = rdma_malloc_fn(MiB);
	CHECK(remote != NULL, "rdma_malloc");
	struct ibv_mr *g = ibv_reg_mr(pd, remote, 4096, ACC | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(elided(g, pd), "the default heap's memory with remote write and atomic elided");
	CHECK(!g || ibv_dereg_mr(g) == 0, "deregistered");
	static const unsigned int without_local_write[] = { IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC };
	for (size_t i = 0; i < 2; i++) {
		struct ibv_mr *f = ibv_reg_mr(pd, remote, 4096, without_local_write[i] | IBV_ACCESS_REMOTE_READ);
		CHECK(f && !elided(f, pd) && passed_live() == live + 1,
		      "remote %s without local write handed on to libibverbs", i ? "atomic" : "write");
		CHECK(!f || ibv_dereg_mr(f) == 0, "deregistered");
	}
	rdma_free_fn(remote);
}

/* A fork child does not inherit elision's view: its copy of an elided
 * region has no keys (they were the parent's registration's), its
 * ibv_dealloc_pd is the child's business (not refused for the parent's
 * regions), deregistering the copy works; the parent is untouched. */
static void case_fork(void)
{
	char *buf = malloc(MiB);
	struct ibv_pd *p = new_pd();
	struct ibv_mr *mr = ibv_reg_mr(p, buf, 100, ACC);
	CHECK(elided(mr, p), "elided in the parent");
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	pid_t pid = fork();
	if (pid == 0) {
		unsigned long calls = dealloc_calls();
		int bad = 0;
		if (mr->lkey || mr->rkey) {
			printf("FAIL the child's copy of the region kept the parent's keys %#x/%#x\n", mr->lkey, mr->rkey);
			bad = 1;
		}
		int r = ibv_dealloc_pd(p);
		if (dealloc_calls() != calls + 1) {
			printf("FAIL the child's ibv_dealloc_pd was refused by the parent's regions (%d)\n", r);
			bad = 1;
		}
		if (ibv_dereg_mr(mr) != 0) {
			printf("FAIL the child's ibv_dereg_mr of its copy\n");
			bad = 1;
		}
		_exit(bad);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: no keys on its copy, its own dealloc, its own dereg");
	CHECK(elided(mr, p) && mr->lkey == lkey && mr->rkey == rkey, "the parent's region unchanged");
	CHECK(ibv_dereg_mr(mr) == 0, "and deregistered by the parent");
	free(buf);
}

/* A child fork handler of the program's, registered before the process's
 * first elision, deregisters its copy of an elided region: the library
 * forgets the parent's pins in its own child handler, which runs first,
 * and the region's chunk must be pinned again before any other handler
 * runs ("unpinned more often than pinned" otherwise). */
static struct ibv_mr *fh_mr;
static int fh_result = -1;

static void fh_child(void)
{
	if (fh_mr)
		fh_result = ibv_dereg_mr(fh_mr);
}

static void case_fork_handler(void)
{
	CHECK(pthread_atfork(NULL, NULL, fh_child) == 0, "a child handler of the program's");
	char *buf = malloc(MiB);
	struct ibv_pd *p = new_pd();
	struct ibv_mr *mr = ibv_reg_mr(p, buf, 100, ACC);
	CHECK(elided(mr, p), "elided in the parent");
	fh_mr = mr;
	pid_t pid = fork();
	if (pid == 0)
		_exit(fh_result == 0 ? 0 : 1);
	fh_mr = NULL;
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's handler deregistered its copy (status %#x)", st);
	CHECK(ibv_dereg_mr(mr) == 0, "and the parent its region");
	free(buf);
}

/* The process's first elision inside the program's own fork handlers (a
 * library that registers memory around a fork): glibc holds its handler
 * lock while the parent's handlers run, so a pthread_atfork of ours there
 * would never return.  Each handler's process must go on: the parent's
 * (prepare and parent handlers) and the child's. */
static char *af_buf;
static struct ibv_pd *af_pd;
static const char *af_when; /* the handler that registers: prepare, parent, child */
static int af_elided = -1;

static void af_register(const char *when)
{
	if (strcmp(when, af_when))
		return;
	alarm(20); /* a hang becomes SIGALRM, which the test reports */
	struct ibv_mr *mr = ibv_reg_mr(af_pd, af_buf, 100, ACC);
	af_elided = elided(mr, af_pd);
	if (mr)
		ibv_dereg_mr(mr);
	alarm(0);
}

static void af_prepare(void)
{
	af_register("prepare");
}

static void af_parent(void)
{
	af_register("parent");
}

static void af_child(void)
{
	af_register("child");
}

static void *af_nothing(void *arg)
{
	return arg;
}

/* One fork whose @when handler makes the process's first elision: run in a
 * process of its own (the elision must be the first). */
static void atfork_once(const char *when)
{
	af_when = when;
	af_buf = malloc(MiB);
	af_pd = new_pd();
	/* A second thread once: glibc takes its handler lock only then. */
	pthread_t t;
	if (pthread_create(&t, NULL, af_nothing, NULL) || pthread_join(t, NULL) ||
	    pthread_atfork(af_prepare, af_parent, af_child) || stats().elided_registrations != 0)
		_exit(4);
	pid_t pid = fork();
	if (pid == 0)
		_exit(strcmp(when, "child") ? 0 : af_elided == 1 ? 0 : 3);
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		_exit(5);
	_exit(strcmp(when, "child") ? (af_elided == 1 ? 0 : 3) : 0);
}

static void case_atfork(void)
{
	static const char *const whens[] = { "prepare", "parent", "child" };
	for (size_t i = 0; i < 3; i++) {
		pid_t pid = fork();
		if (pid == 0)
			atfork_once(whens[i]);
		int st = 0;
		waitpid(pid, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "the first elision in the program's %s handler, and the fork goes on (%s %d)", whens[i],
		      WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	stats_get = need("rdma_malloc_stats_get");
	keys_of = need("rdma_malloc_keys");
	mr_of = need("rdma_malloc_mr");
	passed_live = (fake_dropin_passed_live_fn)need("fake_dropin_passed_live");
	deallocs = (fake_dropin_deallocs_fn)need("fake_dropin_deallocs");
	dealloc_calls = (fake_dropin_dealloc_calls_fn)need("fake_dropin_dealloc_calls");
	attach_pd = need("rdma_malloc_attach_pd");
	detach_pd = need("rdma_malloc_detach_pd");
	chunk_reg = need("fake_find");
	/* RDMA up before the first case: the PD counts below include the
	 * default PD, which comes with the first RDMA call (src/api/init.h;
	 * lazy_rdma.c tests that it comes no earlier). */
	struct ibv_pd *(*default_pd)(void) = need("rdma_malloc_default_pd");
	default_pd();
	static const struct {
		const char *name;
		void (*run)(void);
	} cases[] = {
		{ "rereg", case_rereg },   { "dealloc", case_dealloc }, { "evict", case_evict },
		{ "slots", case_slots },   { "scale", case_scale },     { "threads", case_threads },
		{ "detach", case_detach }, { "adopt", case_adopt },     { "handed", case_handed },
		{ "fork", case_fork },     { "atfork", case_atfork },   { "lookups", case_lookups },
		{ "iova", case_iova },     { "fork-handler", case_fork_handler },
	};
	const char *want = argc > 1 ? argv[1] : "";
	int ran = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!*want || !strcmp(want, cases[i].name)) {
			printf("--- %s\n", cases[i].name);
			cases[i].run();
			ran++;
		}
	if (!ran) {
		printf("FAIL unknown case %s\n", want);
		return 1;
	}
	printf("%s: %d failed\n", want, failed);
	return failed != 0;
}
