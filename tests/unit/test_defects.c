/* SPDX-License-Identifier: MIT */
/*
 * test_defects.c - the defects an adversarial review found (issue 10), one
 * test each, against the fake backend.  Each of them failed on commit
 * 0c281c6 (doc/reliability.md says how); the fork and drop-in ones are in
 * tests/preload, the guest one in tests/e2e.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "rdma_malloc.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define LW IBV_ACCESS_LOCAL_WRITE
#define RR IBV_ACCESS_REMOTE_READ
#define RW IBV_ACCESS_REMOTE_WRITE

static void setup(void)
{
	fake_verbs_install(1);
}

TestSuite(defects, .init = setup);

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* ---- item 2: a region replaced while a window, a grant or elision uses it ---- */

/* A window bound on a region: the region cannot be replaced (a device
 * refuses to deregister it, IBA 10.6.7.2.6) nor its PD detached nor its
 * heap destroyed: EBUSY, and the region the window was bound on stays the
 * one the revocation passes.  0c281c6 replaced the region, freed its
 * struct ibv_mr, and the type 1 revocation read it (ASan:
 * heap-use-after-free in rdma_malloc_mw_revoke). */
Test(defects, item2_window_keeps_its_region, .init = cr_redirect_stderr)
{
	struct ibv_qp qp = { .pd = fake_pd(0) };
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_MW_BIND });
	cr_assert(h);
	char *buf = rdma_heap_malloc(h, 4096);
	cr_assert(buf);
	fake_set_rereg(FAKE_REREG_REFUSE); /* as rxe: every access change replaces */
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp, buf, 100, RR, IBV_MW_TYPE_1, 1, 0);
	cr_assert(mw, "grant: %s", strerror(errno));
	struct ibv_mr *mr = rdma_malloc_mr(buf, 1, NULL);
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), EBUSY,
		     "an access change replaced the region a window is bound on");
	cr_assert_eq(rdma_malloc_mr(buf, 1, NULL), mr);
	cr_assert_eq(rdma_heap_destroy(h), EBUSY, "a heap with a live window was destroyed");
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(0)), EBUSY, "a PD with a live window was detached");
	cr_assert_eq(rdma_malloc_mw_revoke(&qp, mw, 2, 0), 0);
	cr_assert_eq(fake_mw(mw)->mr, mr, "the revocation passed another region");
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), 0, "once the window is gone");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* ---- item 3: detach racing a chunk creation ---- */

static atomic_int detached;

static void *grow(void *arg)
{
	void **out = arg;
	*out = rdma_malloc(40 * MiB); /* a new chunk, registered with every PD */
	return NULL;
}

static void *detach(void *arg)
{
	cr_assert_eq(rdma_malloc_detach_pd(arg), 0);
	atomic_store(&detached, 1);
	return NULL;
}

/* A creator that snapshotted the PD slots before the detach registers with
 * P; detach must not return before it has undone that, or the program's
 * ibv_dealloc_pd finds P busy, or the creator uses a freed P.  0c281c6
 * returned at once, and the creator registered and deregistered with P
 * after. */
Test(defects, item3_detach_waits_for_creators, .timeout = 60)
{
	struct ibv_pd *p = fake_pd(1);
	cr_assert_eq(rdma_malloc_attach_pd(p), 0);
	fake_block_next_reg_on(p);
	void *big = NULL;
	pthread_t creator, detacher;
	pthread_create(&creator, NULL, grow, &big);
	fake_wait_blocked(); /* the creator is inside ibv_reg_mr(P) */
	pthread_create(&detacher, NULL, detach, p);
	sleep_ms(300);
	int early = atomic_load(&detached);
	unsigned long calls_then = fake_pd_calls(p);
	fake_release_reg();
	pthread_join(creator, NULL);
	pthread_join(detacher, NULL);
	cr_assert(!early, "rdma_malloc_detach_pd returned while a registration with the PD was under way");
	cr_assert(big);
	cr_assert_null(fake_find(p, big), "a region of the detached PD is alive");
	cr_assert_eq(rdma_malloc_keys(big, 1, p, NULL, NULL), ENODEV);
	cr_assert_eq(fake_pd_calls(p), calls_then + 1, "only the blocked registration's undoing may follow");
	rdma_free(big);
}

/* The same class: a big block's chunk let go of (a trim, a free, the decay
 * tick) is deregistered outside the PD lock, so detach must wait for that
 * too.  a489e41 returned at once, with the chunk's region of P alive. */
static void *trim(void *arg)
{
	(void)arg;
	rdma_malloc_trim();
	return NULL;
}

Test(defects, detach_waits_for_a_big_chunk_let_go_of, .timeout = 60)
{
	struct ibv_pd *p = fake_pd(1);
	cr_assert_eq(rdma_malloc_attach_pd(p), 0);
	void *b = rdma_malloc(MiB); /* a big block: a chunk of its own */
	cr_assert(b);
	rdma_free(b); /* kept, registered, for the decay time */
	cr_assert_not_null(fake_find(p, b));
	fake_block_next_dereg();
	pthread_t trimmer, detacher;
	pthread_create(&trimmer, NULL, trim, NULL);
	fake_wait_blocked(); /* the trim is deregistering the chunk */
	pthread_create(&detacher, NULL, detach, p);
	sleep_ms(300);
	int early = atomic_load(&detached);
	int alive = fake_find(p, b) != NULL;
	fake_release_reg();
	pthread_join(trimmer, NULL);
	pthread_join(detacher, NULL);
	cr_assert(alive, "the chunk's region of P was gone before its deregistration was let go");
	cr_assert(!early, "rdma_malloc_detach_pd returned while a region of the PD was alive");
	cr_assert_null(fake_find(p, b), "a region of the detached PD is alive");
}

/* ---- item 3, the same class: a detach that fails, a lookup racing one ---- */

/* A detach refused with EBUSY changes nothing: the default PD stays the
 * default.  4a272f5 cleared it before the window check, so lookups with
 * NULL failed with ENODEV after the refusal. */
Test(defects, item3_refused_detach_keeps_the_default_pd, .init = cr_redirect_stderr)
{
	struct ibv_qp qp = { .pd = fake_pd(0) };
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_MW_BIND });
	cr_assert(h);
	char *buf = rdma_heap_malloc(h, 4096);
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp, buf, 100, RR, IBV_MW_TYPE_2, 1, 0);
	cr_assert(mw, "grant: %s", strerror(errno));
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(0)), EBUSY);
	cr_assert_eq(rdma_malloc_default_pd(), fake_pd(0), "a refused detach took the default PD away");
	cr_assert_eq(rdma_malloc_keys(buf, 1, NULL, NULL, NULL), 0);
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

static atomic_int flipping, overlapped;

/* P and Q take turns in the same PD slot: 20000 times, and on until a
 * lookup has overlapped an attachment of P (a loaded machine may not
 * schedule the two threads together for a while), within bounds. */
static void *flip_pds(void *arg)
{
	(void)arg;
	for (int i = 0; (i < 20000 || !atomic_load(&overlapped)) && i < 4000000 && atomic_load(&flipping); i++) {
		struct ibv_pd *pd = fake_pd(1 + (i & 1));
		cr_assert_eq(rdma_malloc_attach_pd(pd), 0);
		cr_assert_eq(rdma_malloc_detach_pd(pd), 0);
	}
	atomic_store(&flipping, 0);
	return NULL;
}

/* A lookup with P while P is detached and P or Q attached in its slot
 * answers P's keys or ENODEV: never no keys (0), never Q's.  4a272f5 read
 * the slot's PD, then its keys: in between they could be cleared or
 * another PD's. */
Test(defects, item3_lookup_racing_detach_gives_keys_of_its_pd, .timeout = 120)
{
	char *buf = rdma_malloc(64);
	cr_assert(buf);
	struct ibv_pd *p = fake_pd(1);
	atomic_store(&flipping, 1);
	pthread_t t;
	pthread_create(&t, NULL, flip_pds, NULL);
	unsigned long found = 0, bad = 0;
	uint32_t bad_l = 0, bad_k = 0;
	while (atomic_load(&flipping)) {
		uint32_t l = 0, k = 0;
		int err = rdma_malloc_keys(buf, 1, p, &l, &k);
		if (err) {
			cr_assert_eq(err, ENODEV);
			continue;
		}
		found++;
		atomic_store(&overlapped, 1);
		if (fake_pd_of_lkey(l) != p || k != (0x80000000u | (l + 1))) {
			bad++;
			bad_l = l, bad_k = k;
		}
	}
	pthread_join(t, NULL);
	cr_assert_eq(bad, 0, "%lu of %lu lookups with P gave keys not P's (e.g. lkey %#x rkey %#x)", bad, found,
		     bad_l, bad_k);
	cr_assert(found > 0, "no lookup ever overlapped an attachment");
	rdma_free(buf);
}

/* ---- item 5: the key-change callback and the library's locks ---- */

static rdma_heap_t *victim;
static atomic_int destroying;

static void *destroy_victim(void *arg)
{
	(void)arg;
	atomic_store(&destroying, 1);
	cr_assert_eq(rdma_heap_destroy(victim), 0);
	return NULL;
}

static atomic_int cb_calls;

/* Allowed by the contract: allocate, look up, read the stats, create a
 * heap; meanwhile another thread destroys a heap (heap then PD lock). */
static void cb_busy(void *ctx, struct ibv_pd *pd, void *addr, size_t len, uint32_t ol, uint32_t ok,
		    uint32_t nl, uint32_t nk)
{
	(void)pd, (void)len, (void)ol, (void)ok, (void)nl, (void)nk;
	if (atomic_fetch_add(&cb_calls, 1))
		return;
	pthread_create(ctx, NULL, destroy_victim, NULL);
	while (!atomic_load(&destroying))
		sleep_ms(1);
	sleep_ms(100); /* it holds the heap lock now, and waits for the PD lock if held */
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	uint32_t l;
	cr_assert_eq(rdma_malloc_keys(addr, 1, NULL, &l, NULL), 0);
	rdma_free(rdma_malloc(100));
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* 0c281c6 ran the callback under the PD lock: deadlock. */
Test(defects, item5_callback_runs_without_library_locks, .timeout = 20, .init = cr_redirect_stderr)
{
	victim = rdma_heap_create(NULL);
	cr_assert(victim);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW | RR | RW });
	char *p = rdma_heap_malloc(h, 1000);
	cr_assert(p);
	pthread_t t;
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, RDMA_HEAP_SET_ACCESS_NEW_KEYS, cb_busy, &t), 0);
	cr_assert_eq(atomic_load(&cb_calls), 1);
	pthread_join(t, NULL);
}

/* ---- item 6: implicit ODP heaps and memory windows ---- */

/* The implicit region spans the whole address space: a window could be
 * bound anywhere.  0c281c6 checked only the RDMA_HEAP_MW_BIND flag, not the
 * access bit. */
Test(defects, item6_implicit_odp_refuses_mw_bind_access)
{
	const unsigned implicit = RDMA_HEAP_ODP | RDMA_HEAP_ODP_IMPLICIT;
	errno = 0;
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = LW | IBV_ACCESS_MW_BIND,
								  .flags = implicit }));
	cr_assert_eq(errno, EINVAL);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = implicit });
	cr_assert(h, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_set_access(h, LW | IBV_ACCESS_MW_BIND, 0, NULL, NULL), EINVAL);
	cr_assert_eq(rdma_heap_access(h) & IBV_ACCESS_MW_BIND, 0);
}

/* ---- item 7: lkey and rkey read as one unit ---- */

static rdma_heap_t *torn_heap;
static char *torn_page;

/* The lookup is stopped between its two stores: change the keys then. */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)uc;
	if ((char *)si->si_addr < torn_page || (char *)si->si_addr >= torn_page + 4096)
		abort();
	rdma_heap_set_access(torn_heap, LW | RR, RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL);
	mprotect(torn_page, 4096, PROT_READ | PROT_WRITE);
}

/* The fake gives a region lkey n and rkey 0x80000000 | (n + 1): a pair
 * from two regions shows.  0c281c6 loaded the lkey, stored it, then loaded
 * the rkey: here it returned the old lkey with the new rkey. */
Test(defects, item7_keys_are_one_unit)
{
	fake_set_rereg(FAKE_REREG_REFUSE);
	torn_heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW | RR });
	char *p = rdma_heap_malloc(torn_heap, 64);
	cr_assert(p);
	uint32_t l, k;
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &l, &k), 0);
	cr_assert_eq(k, 0x80000000u | (l + 1), "the fake's pairing");
	torn_page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert(torn_page != MAP_FAILED);
	struct sigaction sa = { .sa_sigaction = on_segv, .sa_flags = SA_SIGINFO };
	sigaction(SIGSEGV, &sa, NULL);
	uint32_t *lk = (uint32_t *)torn_page;
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, lk, &k), 0);
	cr_assert_eq(k, 0x80000000u | (*lk + 1), "a torn pair: lkey %#x with rkey %#x", *lk, k);
	uint32_t nl, nk;
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &nl, &nk), 0);
	cr_assert(nl != l, "the keys did change meanwhile");
}

/* ---- item 9: prefetch of more than 4 GiB ---- */

/* One ibv_sge carries 32 bits of length: 0c281c6 passed a 5 GiB prefetch
 * as one 1 GiB advice. */
Test(defects, item9_prefetch_longer_than_4g, .timeout = 120)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_ODP });
	cr_assert(h, "%s", strerror(errno));
	size_t len = 5 * GiB;
	char *p = rdma_heap_malloc(h, len);
	cr_assert(p, "%s", strerror(errno));
	cr_assert_eq(rdma_malloc_prefetch(p, len, NULL, 1), 0);
	struct fake_advice a = fake_last_advice();
	cr_assert(a.max_len <= UINT32_MAX, "one advice of %zu bytes", a.max_len);
	cr_assert_eq(a.total_len, len, "advised %zu of %zu bytes", a.total_len, len);
	rdma_free(p);
}
