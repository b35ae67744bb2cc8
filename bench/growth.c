/* SPDX-License-Identifier: MIT */
/*
 * growth.c - allocation latency while a heap grows steadily.
 *
 * A program that keeps allocating message buffers (log-uniform 4 KiB -
 * 64 KiB by default), keeps them all live so that the heap grows to
 * --total bytes, fills each buffer and does a little work (--work-us of
 * spinning) between allocations, as a real program would.  The latency of
 * each allocation, up to the point where the buffer can be used for RDMA,
 * is recorded:
 *
 *   reserve   rdma_malloc + rdma_malloc_keys, RDMALLOC_RESERVE=1 (the
 *             heap's next chunk registered ahead by a background thread)
 *   off       the same with RDMALLOC_RESERVE=0: the allocation that makes
 *             the heap grow registers the new chunk itself
 *   regmr     malloc + ibv_reg_mr(LOCAL_WRITE) per buffer (kept live)
 *   grown     the reserve's run on a heap that already holds every chunk it
 *             needs (grown, freed and kept with RDMALLOC_DECAY_MS=-1, then
 *             measured): no growth at all, the floor the others are held
 *             against (what the machine's own jitter costs)
 *
 * Latencies of the first --warmup bytes are left out (the heap's first
 * chunk is always made inline: that is start-up, not steady growth).
 * One CSV row per run: p50, p99, p99.9 and max in ns, and the chunks the
 * allocations waited for (inline_chunks) and took from the reserve.
 *
 *   rdmalloc-bench-growth --mode reserve|off|regmr [--total 256M]
 *       [--min 4K] [--max 64K] [--work-us 100] [--warmup 16M] [--rep N]
 *       [--env LABEL] [--header]
 */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "rdma_malloc.h"

#define PROG "bench-growth"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *sorted, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return sorted[i < n ? i : n - 1];
}

int main(int argc, char **argv)
{
	const char *mode = bench_opt(argc, argv, "--mode", "reserve");
	const char *env = bench_opt(argc, argv, "--env", "host");
	size_t total, lo, hi, warmup;
	if (bench_parse_size(bench_opt(argc, argv, "--total", "256M"), &total) ||
	    bench_parse_size(bench_opt(argc, argv, "--min", "4K"), &lo) ||
	    bench_parse_size(bench_opt(argc, argv, "--max", "64K"), &hi) ||
	    bench_parse_size(bench_opt(argc, argv, "--warmup", "16M"), &warmup) || lo == 0 || hi < lo)
		bench_die(PROG, "bad size");
	double work_us = bench_opt_double(argc, argv, "--work-us", 100);
	long rep = bench_opt_long(argc, argv, "--rep", 1);
	int regmr = strcmp(mode, "regmr") == 0, grown = strcmp(mode, "grown") == 0;
	if (!regmr && !grown && strcmp(mode, "reserve") != 0 && strcmp(mode, "off") != 0)
		bench_die(PROG, "--mode reserve|off|regmr|grown");
	/* Read once, at the library's first call. */
	setenv("RDMALLOC_RESERVE", strcmp(mode, "off") == 0 ? "0" : "1", 1);
	if (grown)
		setenv("RDMALLOC_DECAY_MS", "-1", 1);
	if (bench_flag(argc, argv, "--header"))
		printf("env,mode,rep,total_mib,allocs,measured,work_us,p50_ns,p99_ns,p999_ns,max_ns,inline_chunks,"
		       "reserve_hits,reserve_waits,reserve_discards,seconds\n");

	struct ibv_pd *pd = rdma_malloc_default_pd(); /* without a device, rdmalloc's modes run unregistered */
	if (regmr && !pd)
		bench_die(PROG, "no default PD (no RDMA device?)");
	size_t cap = (total + total / 4) / lo + 16;
	void **bufs = calloc(cap, sizeof(*bufs));
	struct ibv_mr **mrs = regmr ? calloc(cap, sizeof(*mrs)) : NULL;
	uint64_t *lat = calloc(cap, sizeof(*lat));
	if (!bufs || !lat || (regmr && !mrs))
		bench_die(PROG, "out of memory");
	uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)rep;
	if (grown) { /* the same buffers once, freed: their chunks stay */
		uint64_t s0 = seed;
		size_t k = 0;
		for (size_t b = 0; b < total + total / 4 && k < cap; ) {
			size_t s = bench_log_uniform(&s0, lo, hi);
			if (!(bufs[k++] = rdma_malloc(s)))
				bench_die(PROG, "rdma_malloc of %zu bytes failed", s);
			b += s;
		}
		while (k)
			rdma_free(bufs[--k]);
	}
	struct rdma_malloc_stats st0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st0) };
	rdma_malloc_stats_get(&st0);
	uint64_t t_start = bench_now_ns();
	size_t n = 0, measured = 0, bytes = 0;
	while (bytes < total && n < cap) {
		size_t s = bench_log_uniform(&seed, lo, hi);
		uint64_t t0 = bench_now_ns();
		void *p;
		if (regmr) {
			p = malloc(s);
			if (!p || !(mrs[n] = ibv_reg_mr(pd, p, s, IBV_ACCESS_LOCAL_WRITE)))
				bench_die(PROG, "malloc + ibv_reg_mr of %zu bytes failed after %zu MiB", s, bytes >> 20);
		} else {
			uint32_t lkey;
			p = rdma_malloc(s);
			if (!p || (rdma_malloc_keys(p, s, NULL, &lkey, NULL) != 0 && pd))
				bench_die(PROG, "rdma_malloc of %zu bytes failed after %zu MiB", s, bytes >> 20);
		}
		uint64_t t1 = bench_now_ns();
		if (bytes >= warmup)
			lat[measured++] = t1 - t0;
		bufs[n++] = p;
		bytes += s;
		memset(p, (int)n, s); /* the message */
		for (uint64_t until = bench_now_ns() + (uint64_t)(work_us * 1000); bench_now_ns() < until;)
			;
	}
	double seconds = (double)(bench_now_ns() - t_start) / 1e9;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	if (!measured)
		bench_die(PROG, "nothing measured: --total not above --warmup");
	qsort(lat, measured, sizeof(*lat), cmp_u64);
	printf("%s,%s,%ld,%zu,%zu,%zu,%g,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.3f\n", env, mode, rep, bytes >> 20, n,
	       measured, work_us, (unsigned long long)pct(lat, measured, 0.50),
	       (unsigned long long)pct(lat, measured, 0.99), (unsigned long long)pct(lat, measured, 0.999),
	       (unsigned long long)lat[measured - 1],
	       (unsigned long long)(st.inline_chunks - st0.inline_chunks),
	       (unsigned long long)(st.reserve_hits - st0.reserve_hits),
	       (unsigned long long)(st.reserve_waits - st0.reserve_waits),
	       (unsigned long long)(st.reserve_discards - st0.reserve_discards), seconds);
	for (size_t i = 0; i < n; i++) {
		if (regmr) {
			ibv_dereg_mr(mrs[i]);
			free(bufs[i]);
		} else {
			rdma_free(bufs[i]);
		}
	}
	return 0;
}
