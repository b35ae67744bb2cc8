/* SPDX-License-Identifier: MIT */
/*
 * test_stress.c - reuse of freed registered memory, concurrency, and a
 * process whose RLIMIT_MEMLOCK is too low to register anything.
 */
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e.h"

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* ------------------------------------------------------------------ churn */

/*
 * 200 rounds: free every buffer and allocate the same sizes again, in a
 * shuffled order, then RDMA-WRITE the peer's data into every new buffer and
 * compare every byte.  Memory that jemalloc purged (or decommitted) while it
 * stayed registered shows up here: the NIC writes the old pinned page, the
 * CPU reads a fresh one.  Each round writes a different window of the peer's
 * buffer, so stale data of an earlier round cannot pass either.
 * (~4 GiB through the emulated NIC: about 90 s in the Soft-RoCE guest.)
 */
E2E_TEST(churn, 300)
{
	static const size_t csizes[] = { 4 * KiB, 256 * KiB, 4 * MiB, 16 * MiB };
	enum { NBUF = sizeof(csizes) / sizeof(csizes[0]), ROUNDS = 200, SHIFT = 4096 };
	uint8_t *peer = rdma_malloc(16 * MiB + SHIFT);
	cr_assert(peer, "rdma_malloc: %s", strerror(errno));
	e2e_fill(peer, 16 * MiB + SHIFT, 1200);
	E2E_ASSERT_PATTERN(peer, 16 * MiB + SHIFT, 1200, "peer buffer");
	uint8_t *buf[NBUF] = { 0 };
	size_t order[NBUF];
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	size_t written = 0;
	uint64_t t0 = mono_ms();
	for (int r = 0; r < ROUNDS; r++) {
		for (size_t i = 0; i < NBUF; i++)
			order[i] = i;
		for (size_t i = NBUF - 1; i > 0; i--) {
			size_t j = xorshift(&rng) % (i + 1), t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (size_t i = 0; i < NBUF; i++)
			rdma_free(buf[order[i]]);
		for (size_t i = 0; i < NBUF; i++) {
			size_t k = order[(i + 1) % NBUF];
			buf[k] = rdma_malloc(csizes[k]);
			cr_assert(buf[k], "round %d: rdma_malloc(%zu): %s", r, csizes[k], strerror(errno));
		}
		size_t shift = (size_t)(xorshift(&rng) % SHIFT);
		for (size_t k = 0; k < NBUF; k++) {
			memset(buf[k], 0xc3, csizes[k]);
			char what[128];
			snprintf(what, sizeof(what), "churn round %d: RDMA WRITE of %zu B into %p", r,
				 csizes[k], (void *)buf[k]);
			E2E_ASSERT_WC_OK(e2e_write(&e2e, buf[k], peer + shift, csizes[k]), what);
			E2E_ASSERT_SAME(buf[k], peer + shift, csizes[k], what);
			written += csizes[k];
		}
	}
	cr_log_info("churn: %d rounds, %zu MiB written in %llu ms", ROUNDS, written >> 20,
		    (unsigned long long)(mono_ms() - t0));
	for (size_t i = 0; i < NBUF; i++)
		rdma_free(buf[i]);
	rdma_free(peer);
}

/* ------------------------------------------------------------------ threads */

#define NTHREADS 8
#define RUN_MS 4000

struct worker {
	pthread_t tid;
	unsigned id;
	atomic_bool *stop;
	unsigned long ops;
	char err[256]; /* first failure, empty if none */
};

static void worker_fail(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void worker_fail(struct worker *w, const char *fmt, ...)
{
	if (w->err[0])
		return;
	int n = snprintf(w->err, sizeof(w->err), "thread %u, op %lu: ", w->id, w->ops);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(w->err + n, sizeof(w->err) - (size_t)n, fmt, ap);
	va_end(ap);
}

static void *worker_main(void *arg)
{
	static const size_t wsizes[] = { 24, 200, 3000, 4096, 40000, 300000 };
	enum { SLOTS = 64 };
	struct worker *w = arg;
	uint8_t *live[SLOTS] = { 0 };
	size_t len[SLOTS] = { 0 };
	uint64_t rng = 0x1234567ull * (w->id + 1);
	while (!atomic_load_explicit(w->stop, memory_order_relaxed) && !w->err[0]) {
		size_t k = xorshift(&rng) % SLOTS;
		uint8_t stamp = (uint8_t)(k * 7 + w->id);
		if (live[k]) {
			if (live[k][0] != stamp || live[k][len[k] - 1] != stamp)
				worker_fail(w, "allocation %p of %zu B was overwritten", (void *)live[k], len[k]);
			rdma_free(live[k]);
			live[k] = NULL;
			w->ops++;
			continue;
		}
		size_t n = wsizes[xorshift(&rng) % 6];
		uint8_t *p;
		switch (xorshift(&rng) % 4) {
		case 0: p = rdma_malloc(n); break;
		case 1: p = rdma_calloc(1, n); break;
		case 2: p = rdma_aligned_alloc(64, n); break;
		default:
			p = rdma_malloc(n / 2 + 1);
			if (p) {
				uint8_t *q = rdma_realloc(p, n);
				if (!q)
					rdma_free(p);
				p = q;
			}
			break;
		}
		if (!p) {
			worker_fail(w, "allocation of %zu B: %s", n, strerror(errno));
			break;
		}
		uint32_t lk = 0, rk = 0;
		int err = rdma_malloc_keys(p, n, NULL, &lk, &rk);
		struct ibv_mr *mr = rdma_malloc_mr(p, n, NULL);
		if (err)
			worker_fail(w, "rdma_malloc_keys(%p, %zu): %s", (void *)p, n, strerror(err));
		else if (!mr || mr->lkey != lk || mr->rkey != rk ||
			 (uintptr_t)p < (uintptr_t)mr->addr ||
			 (uintptr_t)p + n > (uintptr_t)mr->addr + mr->length)
			worker_fail(w, "rdma_malloc_mr(%p, %zu) disagrees with rdma_malloc_keys", (void *)p, n);
		p[0] = p[n - 1] = stamp;
		live[k] = p;
		len[k] = n;
		w->ops++;
	}
	for (size_t k = 0; k < SLOTS; k++)
		rdma_free(live[k]);
	return NULL;
}

/*
 * 8 threads allocate, free and look up keys for ~4 s while this thread
 * RDMA-writes into a set of live buffers (one of which it reallocates now
 * and then) and compares every byte.
 */
E2E_TEST(threads, 120)
{
	enum { NLIVE = 16, SHIFT = 4096 };
	const size_t blen = 128 * KiB;
	uint8_t *peer = rdma_malloc(blen + SHIFT);
	uint8_t *live[NLIVE];
	cr_assert(peer, "rdma_malloc: %s", strerror(errno));
	e2e_fill(peer, blen + SHIFT, 1300);
	for (int i = 0; i < NLIVE; i++) {
		live[i] = rdma_malloc(blen);
		cr_assert(live[i], "rdma_malloc: %s", strerror(errno));
	}
	atomic_bool stop = false;
	struct worker w[NTHREADS];
	memset(w, 0, sizeof(w));
	for (unsigned i = 0; i < NTHREADS; i++) {
		w[i].id = i;
		w[i].stop = &stop;
		int err = pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
		cr_assert(err == 0, "pthread_create: %s", strerror(err));
	}
	uint64_t end = mono_ms() + RUN_MS, rng = 99;
	unsigned long writes = 0;
	char failure[320] = "";
	while (mono_ms() < end && !failure[0]) {
		int i = (int)(writes % NLIVE);
		if (writes % 5 == 4) {
			rdma_free(live[i]);
			live[i] = rdma_malloc(blen);
			if (!live[i]) {
				snprintf(failure, sizeof(failure), "rdma_malloc: %s", strerror(errno));
				break;
			}
		}
		size_t shift = (size_t)(xorshift(&rng) % SHIFT);
		memset(live[i], 0x3c, blen);
		int st = e2e_write(&e2e, live[i], peer + shift, blen);
		size_t nd = 0, at = st == IBV_WC_SUCCESS ? e2e_compare(live[i], peer + shift, blen, &nd)
						       : E2E_NO_DIFF;
		if (st != IBV_WC_SUCCESS)
			snprintf(failure, sizeof(failure), "RDMA WRITE #%lu into %p: %s (%s)", writes,
				 (void *)live[i], e2e_status_str(st), e2e.err);
		else if (at != E2E_NO_DIFF)
			snprintf(failure, sizeof(failure),
				 "RDMA WRITE #%lu into %p: first differing byte at offset %zu of %zu "
				 "(got 0x%02x, want 0x%02x); %zu bytes differ",
				 writes, (void *)live[i], at, blen, live[i][at], peer[shift + at], nd);
		writes++;
	}
	atomic_store(&stop, true);
	unsigned long ops = 0;
	for (unsigned i = 0; i < NTHREADS; i++) {
		pthread_join(w[i].tid, NULL);
		ops += w[i].ops;
	}
	cr_log_info("threads: %lu verified RDMA WRITEs, %lu allocator operations in %d threads",
		    writes, ops, NTHREADS);
	cr_assert(!failure[0], "main thread: %s", failure);
	for (unsigned i = 0; i < NTHREADS; i++) {
		cr_assert(!w[i].err[0], "%s", w[i].err);
		cr_assert(w[i].ops > 0, "thread %u made no progress", i);
	}
	cr_assert(writes > 0, "no RDMA WRITE completed in %d ms", RUN_MS);
	for (int i = 0; i < NLIVE; i++)
		rdma_free(live[i]);
	rdma_free(peer);
}

/* ------------------------------------------------------------------ memlock */

#define CHILD_ENV "RDMALLOC_E2E_CHILD"
#define MEMLOCK_LIMIT (64 * KiB)

/* Child exit statuses. */
enum { CHILD_ENOMEM = 0, CHILD_KEYS = 10, CHILD_BAD = 1, CHILD_SETUP = 2 };

/*
 * The child: exec'd with RLIMIT_MEMLOCK at 64 KiB and without CAP_IPC_LOCK
 * (rdma_env.h), so the library initialises under those conditions.  It runs
 * before Criterion's main and never returns to it.
 */
static int memlock_child(void)
{
	struct rlimit rl;
	getrlimit(RLIMIT_MEMLOCK, &rl);
	int capped = e2e_ipc_lock_effective();
	printf("child: uid %u, CAP_IPC_LOCK %s, RLIMIT_MEMLOCK %llu\n", (unsigned)getuid(),
	       capped ? "effective" : "dropped", (unsigned long long)rl.rlim_cur);
	if (capped) {
		printf("child: CAP_IPC_LOCK is effective (or unknown): the limit would not hold\n");
		return CHILD_SETUP;
	}
	if (rl.rlim_cur > MEMLOCK_LIMIT) {
		printf("child: RLIMIT_MEMLOCK was not lowered\n");
		return CHILD_SETUP;
	}
	errno = 0;
	void *p = rdma_malloc(1 * MiB);
	int err = errno;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	int serr = rdma_malloc_stats_get(&st);
	struct ibv_pd *pd = rdma_malloc_default_pd();
	printf("child: rdma_malloc(1 MiB) = %p, errno %d (%s); default PD %p; stats: %s, "
	       "registrations %llu, registration_failures %llu, chunks %llu, unregistered_chunks %llu\n",
	       p, err, strerror(err), (void *)pd, serr ? strerror(serr) : "ok",
	       (unsigned long long)st.registrations, (unsigned long long)st.registration_failures,
	       (unsigned long long)st.chunks, (unsigned long long)st.unregistered_chunks);
	if (serr)
		return CHILD_BAD;
	if (!p) {
		if (err != ENOMEM) {
			printf("child: FAIL: NULL with errno %d (%s), want ENOMEM\n", err, strerror(err));
			return CHILD_BAD;
		}
		if (st.registration_failures == 0) {
			printf("child: FAIL: NULL but registration_failures is 0\n");
			return CHILD_BAD;
		}
		return CHILD_ENOMEM;
	}
	uint32_t lk, rk;
	int kerr = rdma_malloc_keys(p, 1 * MiB, NULL, &lk, &rk);
	if (!pd) {
		printf("child: FAIL: no default PD as uid %u: is /dev/infiniband/uverbs* open to it?\n",
		       (unsigned)getuid());
		return CHILD_BAD;
	}
	if (kerr) {
		printf("child: FAIL: rdma_malloc(1 MiB) succeeded but has no keys: %s\n", strerror(kerr));
		return CHILD_BAD;
	}
	memset(p, 0x77, 1 * MiB);
	rdma_free(p);
	printf("child: allocation succeeded with lkey 0x%x rkey 0x%x\n", lk, rk);
	return CHILD_KEYS;
}

__attribute__((constructor)) static void e2e_child_hook(void)
{
	const char *m = getenv(CHILD_ENV);
	if (m && strcmp(m, "memlock") == 0) {
		int rc = memlock_child();
		fflush(stdout);
		_exit(rc);
	}
}

E2E_TEST(memlock_low, 60)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert(n > 0, "readlink /proc/self/exe: %s", strerror(errno));
	exe[n] = '\0';
	int pfd[2];
	cr_assert(pipe(pfd) == 0);
	pid_t pid = fork();
	cr_assert(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		close(pfd[0]);
		e2e_exec_memlock_child(exe, "memlock", MEMLOCK_LIMIT, CHILD_SETUP);
	}
	close(pfd[1]);
	char out[4096];
	size_t got = 0;
	uint64_t deadline = mono_ms() + 30000;
	for (;;) {
		uint64_t now = mono_ms();
		if (now >= deadline)
			break;
		struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
		if (poll(&pf, 1, (int)(deadline - now)) <= 0)
			break;
		ssize_t r = read(pfd[0], out + got, sizeof(out) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(out) - 1)
			break;
	}
	out[got] = '\0';
	close(pfd[0]);
	int status = 0;
	pid_t w = 0;
	while (mono_ms() < deadline && (w = waitpid(pid, &status, WNOHANG)) == 0)
		poll(NULL, 0, 20);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_assert_fail("the RLIMIT_MEMLOCK child did not finish within 30 s; it said:\n%s", out);
	}
	cr_assert(WIFEXITED(status), "the RLIMIT_MEMLOCK child died of signal %d; it said:\n%s",
		  WIFSIGNALED(status) ? WTERMSIG(status) : -1, out);
	int rc = WEXITSTATUS(status);
	cr_assert(rc == CHILD_ENOMEM || rc == CHILD_KEYS,
		  "the RLIMIT_MEMLOCK child (64 KiB, no CAP_IPC_LOCK) failed with status %d; it said:\n%s",
		  rc, out);
	cr_log_info("RLIMIT_MEMLOCK child: %s", out);
}
