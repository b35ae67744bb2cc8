/* SPDX-License-Identifier: MIT */
/*
 * phases.c - what a server holds after bursts: long-lived state allocated
 * first, then phases that allocate a lot and free all of it.
 *
 * --long (64M) of long-lived blocks, then --phases (3) bursts of --burst
 * (384M) allocated and freed; after each burst the allocator gives back
 * what it can (rdmalloc: rdma_malloc_trim(); plain allocators under
 * LD_PRELOAD with --plain: jemalloc's arena.<all>.purge if the preloaded
 * allocator has mallctl, else malloc_trim()).  Then a steady state: blocks
 * freed and allocated again at the same live size, where registrations
 * must not move.  One CSV row per step: live bytes (rdmalloc's count, or
 * what the program asked for with --plain), chunk bytes held (rdmalloc),
 * RSS, registrations so far.
 *
 * Built as the -fake (fake registration backend: host) and the real
 * program, like bench-footprint; --plain uses malloc/free and nothing of
 * rdmalloc.
 *
 *   rdmalloc-bench-phases[-fake] [--long 64M] [--burst 384M] [--phases 3]
 *       [--env LABEL] [--alloc LABEL] [--plain] [--header]
 */
#include <dlfcn.h>
#include <malloc.h>

#include "held.h"

#define PROG "bench-phases"

static const char *env_label, *alloc_label;



/* Give back what the allocator can, now. */
static void give_back(void)
{
	if (!bench_plain) {
		rdma_malloc_trim();
		return;
	}
	typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);
	mallctl_fn mallctl = (mallctl_fn)dlsym(RTLD_DEFAULT, "mallctl");
	if (mallctl) { /* jemalloc: MALLCTL_ARENAS_ALL */
		mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
		mallctl("arena.4096.purge", NULL, NULL, NULL, 0);
	} else {
		malloc_trim(0);
	}
}

static void row(const char *step)
{
	unsigned long long live = bench_asked, held = 0, regs = 0, back = 0;
	if (!bench_plain) {
		struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
		if (rdma_malloc_stats_get(&st))
			bench_die(PROG, "rdma_malloc_stats_get failed");
		live = st.live_bytes, held = st.chunk_bytes, regs = st.registrations;
		back = st.chunks_given_back;
	}
	printf("%s,%s,%s,%llu,%llu,%zu,%llu,%llu\n", env_label, alloc_label, step, live, held,
	       bench_rss_bytes(), regs, back);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *backend = bench_backend();
	size_t lng = 64u << 20, burst = 384u << 20;
	if (bench_parse_size(bench_opt(argc, argv, "--long", "64M"), &lng) ||
	    bench_parse_size(bench_opt(argc, argv, "--burst", "384M"), &burst))
		bench_die(PROG, "bad size");
	int phases = (int)bench_opt_double(argc, argv, "--phases", 3);
	bench_plain = bench_flag(argc, argv, "--plain");
	env_label = bench_opt(argc, argv, "--env", backend);
	alloc_label = bench_opt(argc, argv, "--alloc", bench_plain ? "plain" : "rdmalloc");
	if (!bench_plain && !rdma_malloc_default_pd()) {
		bench_progress(PROG, "SKIP: no RDMA device (run it in the Soft-RoCE guest, or the -fake build)");
		return 0;
	}
	if (bench_flag(argc, argv, "--header"))
		printf("env,alloc,step,live_bytes,chunk_bytes,rss_bytes,registrations,chunks_given_back\n");
	uint64_t seed = 0xFEEDull;
	size_t nl = lng / 1024 + 64, nb = burst / 1024 + 64;
	void **lp = calloc(nl, sizeof(void *)), **bp = calloc(nb, sizeof(void *));
	size_t *ll = calloc(nl, sizeof(size_t)), *bl = calloc(nb, sizeof(size_t));
	if (!lp || !bp || !ll || !bl)
		bench_die(PROG, "out of memory");
	size_t n = 0, bytes = 0;
	while (bytes < lng && n < nl) { /* a server's state: 64 B - 64 KiB */
		ll[n] = bench_log_uniform(&seed, 64, 64 << 10);
		lp[n] = bench_get(PROG, ll[n]);
		bytes += ll[n++];
	}
	nl = n;
	row("long-lived");
	char step[32];
	for (int ph = 0; ph < phases; ph++) {
		n = 0, bytes = 0;
		while (bytes < burst && n < nb) { /* requests' buffers: 64 B - 4 MiB */
			bl[n] = bench_log_uniform(&seed, 64, 4 << 20);
			bp[n] = bench_get(PROG, bl[n]);
			bytes += bl[n++];
		}
		snprintf(step, sizeof(step), "burst-%d", ph + 1);
		row(step);
		for (size_t i = 0; i < n; i++)
			bench_put(bp[i], bl[i]);
		snprintf(step, sizeof(step), "freed-%d", ph + 1);
		row(step);
		give_back();
		snprintf(step, sizeof(step), "given-back-%d", ph + 1);
		row(step);
	}
	/* Steady state: a quarter of the long-lived blocks freed and allocated
	 * again (same sizes: the live size holds still), over and over;
	 * registrations are counted from the warm-up's end (row "warm") to
	 * row "steady". */
	for (int r = 0; r < 14; r++) {
		for (size_t i = (size_t)r % 4; i < nl; i += 4) {
			bench_put(lp[i], ll[i]);
			lp[i] = bench_get(PROG, ll[i]);
		}
		if (r == 3)
			row("warm");
	}
	row("steady");
	for (size_t i = 0; i < nl; i++)
		bench_put(lp[i], ll[i]);
	return 0;
}
