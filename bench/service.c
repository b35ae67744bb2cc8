/* SPDX-License-Identifier: MIT */
/*
 * service.c - a long-running service whose working set moves, and what it
 * holds pinned after each phase once the decay time has passed.
 *
 * A hot set of blocks of one size range is built, used and partly freed;
 * each phase moves it to another range (small objects, pages, message
 * buffers, large buffers) and another size, with a burst of short-lived
 * buffers on top and a shrink to a quarter every third phase: the oldest
 * blocks go, or with --scattered three in four across the hot set, which
 * leaves a live block on nearly every page of small blocks (no allocator
 * that keeps blocks in place gives such pages back: compare with plain
 * jemalloc's RSS).  After each
 * phase the program makes no call into the allocator for --settle
 * (default: twice the decay time plus a second) and then reads one row:
 * what it asked for and holds (live), rdmalloc's pinned_bytes and
 * chunk_bytes, RSS.  The pass mark of issue 22: pinned <= 1.5 x live +
 * 8 MiB after each phase's decay ("ok" column; the exit status is 0
 * anyway: a benchmark reports).
 *
 * --plain uses malloc/free under LD_PRELOAD (plain jemalloc beside it: give
 * it MALLOC_CONF=background_thread:true,dirty_decay_ms:D so that it decays
 * while the program sleeps, as rdmalloc's thread does).  The decay time is
 * rdmalloc's RDMALLOC_DECAY_MS (set it; --decay-ms only sizes the wait).
 *
 *   rdmalloc-bench-service[-fake] [--phases 12] [--scale 1] [--decay-ms 1000]
 *       [--scattered] [--env LABEL] [--alloc LABEL] [--plain] [--header]
 */
#include <time.h>

#include "held.h"

#define PROG "bench-service"
#define MiB ((size_t)1 << 20)

static const char *env_label, *alloc_label;
static uint64_t t0;



/* The hot set: blocks of one size range, replaced as the phases go. */
static void **hot;
static size_t *hot_len, nhot, maxhot;

/* A phase's shape: its hot set's size range and bytes, a burst on top. */
struct shape {
	const char *what;
	size_t lo, hi, bytes, burst;
};

static const struct shape shapes[] = {
	{ "objects", 32, 512, 48 * MiB, 32 * MiB },
	{ "pages", 2048, 16384, 96 * MiB, 64 * MiB },
	{ "messages", 4096, 256 << 10, 128 * MiB, 96 * MiB },
	{ "buffers", 256 << 10, 4 * MiB, 192 * MiB, 128 * MiB },
	{ "mixed", 64, 1 * MiB, 160 * MiB, 64 * MiB },
	{ "objects", 64, 1024, 24 * MiB, 16 * MiB },
};

static double scale = 1.0;

static size_t scaled(size_t b)
{
	return (size_t)((double)b * scale);
}

static void row(int phase, const char *step, const char *what)
{
	unsigned long long pinned = 0, held = 0;
	if (!bench_plain) {
		struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
		if (rdma_malloc_stats_get(&st))
			bench_die(PROG, "rdma_malloc_stats_get failed");
		pinned = st.pinned_bytes, held = st.chunk_bytes;
	}
	size_t rss = bench_rss_bytes();
	int ok = bench_plain || pinned <= bench_asked + bench_asked / 2 + 8 * MiB;
	printf("%s,%s,%.2f,%d,%s,%s,%zu,%llu,%llu,%zu,%s\n", env_label, alloc_label,
	       (double)(bench_now_ns() - t0) / 1e9, phase, step, what, bench_asked, pinned, held, rss,
	       bench_plain ? "" : ok ? "ok" : "over");
	fflush(stdout);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	const char *backend = bench_backend();
	int phases = (int)bench_opt_double(argc, argv, "--phases", 12);
	scale = bench_opt_double(argc, argv, "--scale", 1);
	long decay = (long)bench_opt_double(argc, argv, "--decay-ms", 1000);
	long settle = (long)bench_opt_double(argc, argv, "--settle-ms", 2 * (double)decay + 1000);
	bench_plain = bench_flag(argc, argv, "--plain");
	int scattered = bench_flag(argc, argv, "--scattered");
	env_label = bench_opt(argc, argv, "--env", backend);
	alloc_label = bench_opt(argc, argv, "--alloc", bench_plain ? "plain" : "rdmalloc");
	if (phases < 1 || scale <= 0 || decay < 0 || settle < 0)
		bench_die(PROG, "bad option");
	if (!bench_plain && !rdma_malloc_default_pd()) {
		bench_progress(PROG, "SKIP: no RDMA device (run it in the Soft-RoCE guest, or the -fake build)");
		return 0;
	}
	if (bench_flag(argc, argv, "--header"))
		printf("env,alloc,seconds,phase,step,shape,live_bytes,pinned_bytes,chunk_bytes,rss_bytes,pass\n");
	maxhot = scaled(192 * MiB) / 32 + 1024;
	hot = calloc(maxhot, sizeof(void *));
	hot_len = calloc(maxhot, sizeof(size_t));
	size_t nburst = scaled(128 * MiB) / 32 + 1024;
	void **bp = calloc(nburst, sizeof(void *));
	size_t *bl = calloc(nburst, sizeof(size_t));
	if (!hot || !hot_len || !bp || !bl)
		bench_die(PROG, "out of memory");
	uint64_t seed = 0x5E41CEull;
	t0 = bench_now_ns();
	row(0, "start", "-");
	for (int ph = 1; ph <= phases; ph++) {
		const struct shape *s = &shapes[(size_t)(ph - 1) % (sizeof(shapes) / sizeof(shapes[0]))];
		/* The working set moves: the old hot set goes as the new one
		 * grows, block for block while both last. */
		size_t old = nhot, n = 0, bytes = 0, target = scaled(s->bytes);
		while (bytes < target && n < maxhot) {
			size_t len = bench_log_uniform(&seed, s->lo, s->hi);
			if (n < old)
				bench_put(hot[n], hot_len[n]);
			void *p = bench_get(PROG, len);
			hot[n] = p, hot_len[n] = len;
			bytes += len;
			n++;
		}
		for (size_t i = n; i < old; i++)
			bench_put(hot[i], hot_len[i]);
		nhot = n;
		/* A burst of short-lived buffers on top. */
		size_t nb = 0, bb = 0;
		while (bb < scaled(s->burst) && nb < nburst) {
			bl[nb] = bench_log_uniform(&seed, 64, 2 * MiB);
			bp[nb] = bench_get(PROG, bl[nb]);
			bb += bl[nb++];
		}
		row(ph, "burst", s->what);
		for (size_t i = 0; i < nb; i++)
			bench_put(bp[i], bl[i]);
		/* Every third phase the service shrinks to a quarter: it
		 * evicts the oldest three quarters of its hot set (a cache's
		 * LRU, a server shedding old sessions), or with --scattered
		 * three blocks in four across all of it. */
		if (ph % 3 == 0) {
			size_t keep = 0;
			for (size_t i = 0; i < nhot; i++) {
				if (scattered ? i % 4 != 0 : i < nhot - nhot / 4) {
					bench_put(hot[i], hot_len[i]);
				} else {
					hot[keep] = hot[i], hot_len[keep] = hot_len[i];
					keep++;
				}
			}
			nhot = keep;
		}
		sleep_ms(settle); /* quiet: whatever decays, decays now */
		row(ph, "settled", s->what);
	}
	for (size_t i = 0; i < nhot; i++)
		bench_put(hot[i], hot_len[i]);
	return 0;
}
