/* SPDX-License-Identifier: MIT */
/*
 * test_limits.c - resource limits on the host (fake verbs backend):
 * an address-space limit (RLIMIT_AS) that runs out while heaps grow, the
 * registered-bytes limit (RDMALLOC_MAX_REGISTERED) swept over many values,
 * and every heap slot in use at once with allocations live.  RLIMIT_MEMLOCK
 * only matters to a real registration: tests/e2e/test_limits.c tries it at
 * 64 KiB, 8 MiB and unlimited in the Soft-RoCE guest.  Hundreds of threads:
 * tests/limits/threads.c (a plain program, so it also runs under TSan).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "rdma_malloc.h"
#include "reserve.h"

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static size_t vmsize(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb << 10;
}

/*
 * RLIMIT_AS at the current size + 160 MiB: a heap grows until mmap fails.
 * Every failure is NULL + ENOMEM, every success has keys, nothing crashes;
 * after the limit is lifted, everything is freed and the heap destroyed,
 * nothing is left; allocation works again.
 */
#define AS_HEADROOM ((size_t)160 << 20)
#define AS_MAX 400

Test(limits, address_space_limit, .timeout = 60, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	/* The fake backend calloc()s each region with glibc: give glibc's main
	 * heap room first, so that it needs no new mapping under the limit. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 64 << 20);
	free(malloc(4 << 20));
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *warm = rdma_heap_malloc(h, 64);
	cr_assert(warm);
	struct rlimit old;
	cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
	size_t base = vmsize();
	struct rlimit rl = { base + AS_HEADROOM, old.rlim_max };
	cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);

	/* Under the limit: no assertion (it would allocate), only records. */
	static void *p[AS_MAX];
	static size_t sz[AS_MAX];
	int n = 0, failures = 0, bad_errno = 0, no_keys = 0, heaps_made = 0, heap_eagain = 0;
	for (int i = 0; i < AS_MAX && failures < 20; i++) {
		size_t s = (i % 3 == 0) ? ((size_t)(i % 7) + 1) << 20 : (size_t)(i % 5 + 1) * 70000;
		errno = 0;
		void *q = (i & 1) ? rdma_heap_malloc(h, s) : rdma_heap_calloc(h, 1, s);
		if (!q) {
			failures++;
			bad_errno += errno != ENOMEM;
			continue;
		}
		no_keys += rdma_malloc_keys(q, s, NULL, NULL, NULL) != 0;
		memset(q, 0x5a, s);
		p[n] = q, sz[n] = s, n++;
	}
	rdma_heap_t *extra[4];
	for (int i = 0; i < 4; i++) {
		errno = 0;
		extra[i] = rdma_heap_create(NULL);
		if (extra[i])
			heaps_made++, rdma_free(rdma_heap_malloc(extra[i], 100));
		else
			heap_eagain += errno == EAGAIN;
	}
	size_t peak = vmsize();
	cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);

	cr_assert_gt(failures, 0, "the limit was never reached (%d allocations)", n);
	cr_assert_eq(bad_errno, 0, "%d failures with an errno other than ENOMEM", bad_errno);
	cr_assert_eq(no_keys, 0, "%d allocations had no keys", no_keys);
	cr_assert_eq(heaps_made + heap_eagain, 4, "rdma_heap_create failed with something else than EAGAIN");
	cr_assert_leq(peak, base + AS_HEADROOM);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.mrs, st.chunks);
	for (int i = 0; i < n; i++) {
		const unsigned char *b = p[i];
		cr_assert(b[0] == 0x5a && b[sz[i] - 1] == 0x5a, "block %d changed", i);
		rdma_free(p[i]);
	}
	rdma_free(warm);
	for (int i = 0; i < 4; i++)
		if (extra[i])
			cr_assert_eq(rdma_heap_destroy(extra[i]), 0);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	st = stats();
	cr_assert_eq(st.chunks, 0, "%llu chunks left", (unsigned long long)st.chunks);
	cr_assert_eq(st.mrs, 0);
	cr_assert_eq(st.registered_bytes, 0);
	cr_assert_eq(fake_live_mrs(), 0);
	void *again = rdma_malloc((size_t)100 << 20);
	cr_assert(again, "allocation after the limit was lifted");
	rdma_free(again);
	printf("limits RLIMIT_AS (+%zu MiB): %d allocations, then %d clean ENOMEM; %d heaps created, %d EAGAIN\n",
	       AS_HEADROOM >> 20, n, failures, heaps_made, heap_eagain);
}

/*
 * RDMALLOC_MAX_REGISTERED swept from 0 (no limit) over 1..40 MiB: in a child
 * process per value (the option is read once), a heap is filled until
 * refused.  Held chunk bytes never pass the limit, refusals are NULL +
 * ENOMEM counted in limit_refusals, and the heap's destruction gives
 * everything back.
 */
static int max_registered_child(size_t limit)
{
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(NULL);
	if (!h)
		return 10;
	void *p[300];
	int n = 0, refused = 0;
	for (int i = 0; i < 300 && refused < 5; i++) {
		errno = 0;
		void *q = rdma_heap_malloc(h, (size_t)(i % 4 + 1) * 300000);
		if (!q) {
			if (errno != ENOMEM)
				return 11;
			refused++;
			continue;
		}
		if (rdma_malloc_keys(q, 1, NULL, NULL, NULL))
			return 12;
		p[n++] = q;
	}
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	if (limit && st.chunk_bytes > limit)
		return 13;
	if (limit && (!refused || !st.limit_refusals))
		return 14;
	if (st.mrs != fake_live_mrs() || st.mrs != st.chunks)
		return 15;
	for (int i = 0; i < n; i++)
		rdma_free(p[i]);
	if (rdma_heap_destroy(h))
		return 16;
	rdma_malloc_stats_get(&st);
	if (st.chunks || st.mrs || st.registered_bytes || fake_live_mrs())
		return 17;
	return 0;
}

Test(limits, max_registered_sweep, .timeout = 120, .init = cr_redirect_stderr)
{
	int values = 0;
	for (size_t mib = 0; mib <= 40; mib += (mib < 8 ? 1 : 4)) {
		pid_t pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			char v[32];
			snprintf(v, sizeof(v), "%zuM", mib);
			setenv("RDMALLOC_MAX_REGISTERED", v, 1);
			_exit(max_registered_child(mib << 20));
		}
		int status;
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFEXITED(status), "RDMALLOC_MAX_REGISTERED=%zuM: the child died of signal %d", mib,
			  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
		cr_assert_eq(WEXITSTATUS(status), 0, "RDMALLOC_MAX_REGISTERED=%zuM: check %d failed", mib,
			     WEXITSTATUS(status));
		values++;
	}
	printf("limits RDMALLOC_MAX_REGISTERED: %d values swept (0..40 MiB), each a fresh process\n", values);
}

/*
 * Every heap slot in use at once, each heap with live allocations of three
 * size classes; destroyed in a shuffled order with others still allocating,
 * five rounds.  Chunks, regions and heaps come back to where they were.
 */
Test(limits, all_heap_slots_with_live_allocations, .timeout = 120)
{
	fake_verbs_install(1);
	void *keep = rdma_malloc(100);
	struct rdma_malloc_stats base = stats();
	enum { H = RDMA_MALLOC_MAX_HEAPS - 1 };
	static rdma_heap_t *h[H];
	static void *p[H][3];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	unsigned long created = 0;
	for (int round = 0; round < 5; round++) {
		for (int i = 0; i < H; i++) {
			h[i] = rdma_heap_create(NULL);
			cr_assert(h[i], "round %d: heap %d: %s", round, i, strerror(errno));
			created++;
			p[i][0] = rdma_heap_malloc(h[i], 24);
			p[i][1] = rdma_heap_malloc(h[i], 40000);
			p[i][2] = rdma_heap_malloc(h[i], (size_t)3 << 20);
			for (int k = 0; k < 3; k++) {
				cr_assert(p[i][k]);
				cr_assert_eq(rdma_malloc_keys(p[i][k], 1, NULL, NULL, NULL), 0);
			}
		}
		errno = 0;
		cr_assert_null(rdma_heap_create(NULL), "a heap past RDMA_MALLOC_MAX_HEAPS");
		cr_assert_eq(errno, EAGAIN);
		cr_assert_eq(stats().heaps, RDMA_MALLOC_MAX_HEAPS);
		int order[H];
		for (int i = 0; i < H; i++)
			order[i] = i;
		for (int i = H - 1; i > 0; i--) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			int j = (int)(x % (uint64_t)(i + 1)), t = order[i];
			order[i] = order[j], order[j] = t;
		}
		for (int k = 0; k < H; k++) {
			int i = order[k];
			if (k & 1)
				rdma_free(p[i][k % 3]); /* some freed first, most not */
			cr_assert_eq(rdma_heap_destroy(h[i]), 0);
			/* The heaps still alive are untouched. */
			int j = order[(k + 1) % H];
			if (k + 1 < H)
				cr_assert_eq(rdma_malloc_keys(p[j][2], (size_t)3 << 20, NULL, NULL, NULL), 0);
		}
		struct rdma_malloc_stats st = stats();
		cr_assert_eq(st.heaps, base.heaps);
		cr_assert_eq(st.chunks, base.chunks, "round %d: %llu chunks, %llu before", round,
			     (unsigned long long)st.chunks, (unsigned long long)base.chunks);
		cr_assert_eq(st.mrs, base.mrs);
		cr_assert_eq(fake_live_mrs(), base.mrs);
	}
	rdma_free(keep);
	printf("limits heaps: %lu heaps created and destroyed, %d alive at once with live allocations\n", created,
	       RDMA_MALLOC_MAX_HEAPS);
}
