/* SPDX-License-Identifier: MIT */
/*
 * test_limits.c - resource limits with real registrations (doc/reliability.md).
 *
 *  - memlock_sweep: a process (without CAP_IPC_LOCK, which ignores the
 *    limit) under RLIMIT_MEMLOCK of 64 KiB, 2, 8 (the common container
 *    default) and 32 MiB fills a heap until ibv_reg_mr is refused.  Every
 *    refusal is NULL + ENOMEM, every block it got has keys the NIC accepts,
 *    and after the heap is destroyed the same amount can be had again: the
 *    deregistrations really unpinned the pages, nothing leaked.
 *  - memlock_unlimited: the same process under an unlimited RLIMIT_MEMLOCK
 *    gets everything it asks for (2 heaps of 64 MiB in turn).
 *  - memlock_phases: under 8 MiB, 40 phases of 2 MiB live in blocks of a
 *    new size each (80 MiB allocated in all), every block's keys used by
 *    the NIC: idle chunks go back, nothing is refused (issue 12).
 *  - many_threads_many_heaps: 128 threads at once, each with a heap of its
 *    own (127 at most exist: the last one is told EAGAIN) whose chunks are
 *    really registered, destroyed with blocks live;
 *    the threads exit with default-heap blocks live, which the NIC then
 *    writes and the main thread checks and frees.
 */
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e.h"

#define CHILD_ENV "RDMALLOC_E2E_CHILD"
#define LIMIT_ENV "RDMALLOC_E2E_MEMLOCK"
#define BLOCK (256 * KiB)
#define MAXBLOCKS 1200 /* 300 MiB */

/* Child exit statuses: 0 ok, 1 a check failed, 2 set-up failed. */

/* The stats once every region is a chunk's: the reserve's thread may be
 * inside ibv_reg_mr for a chunk it has not counted yet (doc/design.md,
 * "The reserve"); it finishes within seconds. */
static void stats_settled(struct rdma_malloc_stats *st)
{
	for (int i = 0; i < 2000; i++) {
		rdma_malloc_stats_get(st);
		if (st->mrs == st->chunks * (st->pds ? st->pds : 1))
			return;
		usleep(10000);
	}
}

static int child_fail(const char *fmt, const char *what, long a, long b)
{
	printf("child: FAIL: ");
	printf(fmt, what, a, b);
	printf("\n");
	return 1;
}

/* The peer's source buffer, registered by the child itself before the heap
 * takes the rest of its RLIMIT_MEMLOCK. */
static uint8_t src[4096] __attribute__((aligned(4096)));
static struct ibv_mr *src_mr;

/* One fill: allocate BLOCKs in a fresh heap until refused (or @want).
 * Returns the count, or -1 after printing why. */
static int fill_once(struct e2e_pair *pair, size_t want, int round)
{
	static void *p[MAXBLOCKS];
	rdma_heap_t *h = rdma_heap_create(NULL);
	if (!h)
		return child_fail("%s: %ld %ld", "rdma_heap_create", errno, 0), -1;
	int n = 0, refused = 0;
	while ((size_t)n < want && n < MAXBLOCKS && refused < 3) {
		errno = 0;
		void *q = rdma_heap_malloc(h, BLOCK);
		if (!q) {
			if (errno != ENOMEM)
				return child_fail("%s: errno %ld (round %ld)", "a refused allocation", errno, round), -1;
			refused++;
			continue;
		}
		if (rdma_malloc_keys(q, BLOCK, NULL, NULL, NULL))
			return child_fail("%s %ld (round %ld)", "no keys for block", n, round), -1;
		memset(q, n & 0xff, 64);
		p[n++] = q;
	}
	/* The NIC accepts the keys of the first and the last block. */
	for (int k = 0; k < 2 && n; k++) {
		uint8_t *dst = p[k ? n - 1 : 0];
		memset(src, 0x5c + k, sizeof(src));
		uint32_t rkey = 0;
		rdma_malloc_keys(dst, sizeof(src), NULL, NULL, &rkey);
		int st = e2e_post_write(pair, src, sizeof(src), src_mr->lkey, (uintptr_t)dst, rkey, 1);
		st = st ? E2E_ST_POST : e2e_wait(pair, 0, NULL, E2E_WC_TIMEOUT_MS);
		if (st != IBV_WC_SUCCESS || dst[0] != 0x5c + k || dst[4095] != 0x5c + k)
			return child_fail("%s: status %ld, block %ld", "RDMA WRITE into a block", st, k), -1;
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	stats_settled(&st);
	if (st.mrs != st.chunks)
		return child_fail("%s: %ld regions, %ld chunks", "regions", (long)st.mrs, (long)st.chunks), -1;
	for (int i = 0; i < n; i++)
		rdma_free(p[i]);
	if (rdma_heap_destroy(h))
		return child_fail("%s %ld %ld", "rdma_heap_destroy", 0, 0), -1;
	rdma_malloc_stats_get(&st);
	if (st.deregistration_failures)
		return child_fail("%s: %ld %ld", "deregistration failures", (long)st.deregistration_failures, 0), -1;
	printf("child: round %d: %d blocks of 256 KiB (%d MiB registered), then %d refusals\n", round, n,
	       (int)(((size_t)n * BLOCK) >> 20), refused);
	return n;
}

/* What every child under a limit needs: CAP_IPC_LOCK gone (else the limit
 * would not hold), a QP pair, and src registered before the heap takes
 * the rest of the limit.  0, or 2 (set-up failed) after saying why. */
static int child_setup(struct e2e_pair *pair)
{
	if (e2e_ipc_lock_effective()) {
		printf("child: CAP_IPC_LOCK is effective (or unknown): the limit would not hold\n");
		return 2;
	}
	memset(pair, 0, sizeof(*pair));
	if (e2e_pair_open(pair, NULL)) {
		printf("child: cannot open a QP pair: %s\n", pair->err);
		return 2;
	}
	src_mr = ibv_reg_mr(pair->pd, src, sizeof(src), IBV_ACCESS_LOCAL_WRITE);
	if (!src_mr) {
		printf("child: ibv_reg_mr of 4 KiB: %s\n", strerror(errno));
		return 2;
	}
	return 0;
}

static int limits_child(void)
{
	struct rlimit rl;
	getrlimit(RLIMIT_MEMLOCK, &rl);
	int unlimited = rl.rlim_cur == RLIM_INFINITY;
	printf("child: uid %u, CAP_IPC_LOCK %s, RLIMIT_MEMLOCK %s%llu\n", (unsigned)getuid(),
	       e2e_ipc_lock_effective() ? "effective" : "dropped", unlimited ? "unlimited " : "",
	       (unsigned long long)rl.rlim_cur);
	struct e2e_pair pair;
	int setup = child_setup(&pair);
	if (setup)
		return setup;
	if (unlimited) {
		/* Two heaps one after another, 64 MiB each: nothing is refused. */
		int got = 0;
		for (int r = 0; r < 2; r++) {
			int n = fill_once(&pair, 256, r);
			if (n < 0)
				return 1;
			if (n != 256)
				return child_fail("%s: %ld of %ld blocks", "unlimited RLIMIT_MEMLOCK refused", n, 256);
			got += n;
		}
		printf("child: %d MiB registered and released under an unlimited RLIMIT_MEMLOCK\n",
		       (int)(((size_t)got * BLOCK) >> 20));
		e2e_pair_close(&pair);
		return 0;
	}
	int first = -1;
	for (int r = 0; r < 2; r++) {
		int n = fill_once(&pair, MAXBLOCKS, r);
		if (n < 0)
			return 1;
		if ((size_t)n * BLOCK > rl.rlim_cur)
			return child_fail("%s: %ld blocks under a %ld-byte limit", "more than the limit", n,
					  (long)rl.rlim_cur);
		if (n >= MAXBLOCKS)
			return child_fail("%s: %ld %ld", "the limit was never reached", n, 0);
		/* Each round gets as much as the first: nothing stayed pinned. */
		if (first >= 0 && (n < first - 1 || n > first + 1))
			return child_fail("%s: round got %ld blocks, the first %ld", "memory stayed pinned", n, first);
		if (first < 0)
			first = n;
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	if (!st.registration_failures)
		return child_fail("%s %ld %ld", "no registration failure counted", 0, 0);
	e2e_pair_close(&pair);
	return 0;
}

/* Phases under the limit (issue 12): 2 MiB live at a time in blocks of a
 * new size each phase (16 KiB to 1 MiB), 40 phases, each block's keys
 * used by the NIC, all freed; no trim by the program.  Over time the
 * phases allocate many times the limit: idle chunks must go back. */
static int phases_child(void)
{
	struct e2e_pair pair;
	int setup = child_setup(&pair);
	if (setup)
		return setup;
	static void *p[MAXBLOCKS];
	size_t total = 0;
	for (int phase = 0; phase < 40; phase++) {
		size_t sz = ((size_t)16 << 10 << (phase % 7)) + (size_t)(phase % 3) * 4096, live = 0;
		int n = 0;
		while (live < 2 * MiB) {
			errno = 0;
			p[n] = rdma_malloc(sz);
			if (!p[n])
				return child_fail("%s: errno %ld, phase %ld", "allocation under the limit failed", errno,
						  phase);
			live += sz;
			n++;
		}
		for (int k = 0; k < 2; k++) { /* the NIC writes the first and the last block */
			uint8_t *dst = p[k ? n - 1 : 0];
			memset(src, 0x30 + phase, sizeof(src));
			uint32_t rkey = 0;
			if (rdma_malloc_keys(dst, sizeof(src), NULL, NULL, &rkey))
				return child_fail("%s: phase %ld, block %ld", "no keys", phase, k);
			int st = e2e_post_write(&pair, src, sizeof(src), src_mr->lkey, (uintptr_t)dst, rkey, 1);
			st = st ? E2E_ST_POST : e2e_wait(&pair, 0, NULL, E2E_WC_TIMEOUT_MS);
			if (st != IBV_WC_SUCCESS || dst[0] != 0x30 + phase || dst[4095] != 0x30 + phase)
				return child_fail("%s: status %ld, phase %ld", "RDMA WRITE into a block", st, phase);
		}
		for (int i = 0; i < n; i++)
			rdma_free(p[i]);
		total += live;
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	printf("child: 40 phases, %zu MiB allocated in all; %llu registration failures, %llu chunks given "
	       "back, %llu taken back, %llu allocations relieved\n",
	       total >> 20, (unsigned long long)st.registration_failures, (unsigned long long)st.chunks_given_back,
	       (unsigned long long)st.chunks_taken_back, (unsigned long long)st.pressure_trims);
	e2e_pair_close(&pair);
	return 0;
}

__attribute__((constructor)) static void limits_child_hook(void)
{
	const char *m = getenv(CHILD_ENV);
	if (m && (strcmp(m, "limits") == 0 || strcmp(m, "phases") == 0)) {
		int rc = strcmp(m, "limits") == 0 ? limits_child() : phases_child();
		fflush(stdout);
		_exit(rc);
	}
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Run this executable as the child @mode under RLIMIT_MEMLOCK @limit
 * (without CAP_IPC_LOCK); its exit status, its output in @out. */
static int run_child(const char *mode, rlim_t limit, char *out, size_t outlen)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	cr_assert(n > 0);
	exe[n] = '\0';
	int pfd[2];
	cr_assert(pipe(pfd) == 0);
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		close(pfd[0]);
		e2e_exec_memlock_child(exe, mode, (unsigned long long)limit, 2);
	}
	close(pfd[1]);
	size_t got = 0;
	uint64_t deadline = now_ms() + 120000;
	for (;;) {
		uint64_t t = now_ms();
		if (t >= deadline || got >= outlen - 1)
			break;
		struct pollfd pf = { .fd = pfd[0], .events = POLLIN };
		if (poll(&pf, 1, (int)(deadline - t)) <= 0)
			break;
		ssize_t r = read(pfd[0], out + got, outlen - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	out[got] = '\0';
	close(pfd[0]);
	int status = 0;
	pid_t w = 0;
	while (now_ms() < deadline && (w = waitpid(pid, &status, WNOHANG)) == 0)
		poll(NULL, 0, 20);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		return -1;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

E2E_TEST(memlock_sweep, 600)
{
	static const rlim_t limits[] = { 64 * KiB, 2 * MiB, 8 * MiB, 32 * MiB };
	static char out[16384];
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		int rc = run_child("limits", limits[i], out, sizeof(out));
		cr_assert(rc == 0, "RLIMIT_MEMLOCK %llu KiB: the child failed (status %d); it said:\n%s",
			  (unsigned long long)limits[i] >> 10, rc, out);
		cr_log_info("RLIMIT_MEMLOCK %llu KiB:\n%s", (unsigned long long)limits[i] >> 10, out);
	}
	printf("e2e memlock sweep: %zu limits (64 KiB .. 32 MiB), 2 fill/destroy rounds each, all clean\n",
	       sizeof(limits) / sizeof(limits[0]));
}

E2E_TEST(memlock_unlimited, 300)
{
	static char out[16384];
	int rc = run_child("limits", RLIM_INFINITY, out, sizeof(out));
	cr_assert(rc == 0, "RLIMIT_MEMLOCK unlimited: the child failed (status %d); it said:\n%s", rc, out);
	cr_log_info("RLIMIT_MEMLOCK unlimited:\n%s", out);
}

/* Issue 12: under the common 8 MiB RLIMIT_MEMLOCK, phases whose live
 * memory stays under the limit keep working although they allocate many
 * times the limit over time. */
E2E_TEST(memlock_phases, 300)
{
	static char out[16384];
	int rc = run_child("phases", 8 * MiB, out, sizeof(out));
	cr_assert(rc == 0, "RLIMIT_MEMLOCK 8 MiB, phases: the child failed (status %d); it said:\n%s", rc, out);
	cr_log_info("RLIMIT_MEMLOCK 8 MiB, phases:\n%s", out);
}

/* ---------------------------------------------------------------- threads */

#define NT 128
#define TBLK 3

struct targ {
	int id;
	uint8_t *left[TBLK];
	size_t len[TBLK];
	char err[160];
};

static void *thread_main(void *ap)
{
	struct targ *a = ap;
	rdma_heap_t *h = rdma_heap_create(NULL);
	int have_heap = h != NULL;
	if (!h && errno != EAGAIN)
		snprintf(a->err, sizeof(a->err), "rdma_heap_create: %s", strerror(errno));
	for (int i = 0; i < TBLK; i++) {
		size_t n = i == 0 ? 256 * KiB : (size_t)(a->id * 37 + i * 1000) % 20000 + 16;
		uint8_t *mine = h ? rdma_heap_malloc(h, n) : NULL;
		a->left[i] = rdma_malloc(n);
		a->len[i] = n;
		if (!a->left[i] || (h && !mine)) {
			snprintf(a->err, sizeof(a->err), "allocation of %zu B: %s", n, strerror(errno));
			break;
		}
		if (rdma_malloc_keys(a->left[i], n, NULL, NULL, NULL) ||
		    (mine && rdma_malloc_keys(mine, n, NULL, NULL, NULL))) {
			snprintf(a->err, sizeof(a->err), "no keys for %zu B", n);
			break;
		}
		memset(a->left[i], a->id & 0xff, n);
		if (mine)
			memset(mine, 0xee, n);
	}
	/* Destroyed with its blocks live; the default-heap blocks outlive the thread. */
	if (have_heap && rdma_heap_destroy(h))
		snprintf(a->err, sizeof(a->err), "rdma_heap_destroy failed");
	return NULL;
}

E2E_TEST(many_threads_many_heaps, 300)
{
	static struct targ a[NT];
	static pthread_t t[NT];
	uint8_t *src = rdma_malloc(64 * KiB);
	cr_assert(src);
	e2e_fill(src, 64 * KiB, 1700);
	uint64_t t0 = now_ms();
	for (int round = 0; round < 1; round++) {
		memset(a, 0, sizeof(a));
		for (int i = 0; i < NT; i++) {
			a[i].id = round * NT + i;
			cr_assert_eq(pthread_create(&t[i], NULL, thread_main, &a[i]), 0);
		}
		for (int i = 0; i < NT; i++)
			pthread_join(t[i], NULL);
		for (int i = 0; i < NT; i++) {
			cr_assert(!a[i].err[0], "thread %d: %s", i, a[i].err);
			for (int k = 0; k < TBLK; k++) {
				uint8_t *p = a[i].left[k];
				cr_assert(p[0] == (a[i].id & 0xff) && p[a[i].len[k] - 1] == (a[i].id & 0xff),
					  "a block of exited thread %d changed", i);
				/* The NIC writes the blocks of threads that are gone. */
				if (k < 2) {
					size_t n = a[i].len[k] < 64 * KiB ? a[i].len[k] : 64 * KiB;
					E2E_ASSERT_WC_OK(e2e_write(&e2e, p, src, n),
							 "RDMA WRITE into a block of an exited thread");
					E2E_ASSERT_PATTERN(p, n, 1700, "RDMA WRITE into a block of an exited thread");
				}
				rdma_free(p);
			}
		}
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	stats_settled(&st);
	cr_assert_eq(st.heaps, 1, "heaps left: %llu", (unsigned long long)st.heaps);
	cr_assert_eq(st.mrs, st.chunks * st.pds, "regions %llu, chunks %llu", (unsigned long long)st.mrs,
		     (unsigned long long)st.chunks);
	cr_assert_eq(st.deregistration_failures, 0);
	cr_assert_eq(st.tcache_fallbacks, 0);
	rdma_free(src);
	printf("e2e threads: %d threads (%d at once) with a heap each, real registrations %llu, "
	       "deregistrations %llu, %llu ms\n",
	       NT, NT, (unsigned long long)st.registrations, (unsigned long long)st.deregistrations,
	       (unsigned long long)(now_ms() - t0));
}
