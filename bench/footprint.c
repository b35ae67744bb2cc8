/* SPDX-License-Identifier: MIT */
/*
 * footprint.c - registration footprint after a churn workload.
 *
 * Phases, each followed by one CSV row of rdmalloc's statistics and the
 * process's RSS:
 *   ramp     allocate random sizes (64 B - --max-size, log-uniform) until the
 *            requested live bytes reach --live
 *   steady   churn: free a random block and allocate a new random one, until
 *            --churn x --live more bytes were allocated (live stays ~--live)
 *   shrink   free three blocks in four
 *   shrink-trim  then rdma_malloc_trim(): chunks left with no live block are
 *            given back; a chunk with one live block stays registered
 * Chunk size and the rest come from the environment (RDMALLOC_CHUNK_MAX);
 * --chunk-max and --page-mode only label the rows.
 *
 * Built twice, like bench-keys: -fake (test library, fake registration
 * backend that pins like the real one: runs on the host) and the real one.
 *
 *   rdmalloc-bench-footprint[-fake] [--live 256M] [--max-size 1M]
 *       [--churn 4] [--env LABEL] [--chunk-max LABEL] [--page-mode LABEL]
 *       [--header]
 */

#include "common.h"
#include "rdma_malloc.h"

#define PROG "bench-footprint"

static const char *env_label, *chunk_label, *page_label;
static size_t live_req, alloc_total;

static void row(const char *phase)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		bench_die(PROG, "rdma_malloc_stats_get failed");
	printf("%s,%s,%s,%s,%zu,%llu,%llu,%llu,%zu,%llu,%llu,%llu,%zu\n", env_label, chunk_label,
	       page_label, phase, live_req, (unsigned long long)st.live_bytes,
	       (unsigned long long)st.registered_bytes, (unsigned long long)st.chunk_bytes,
	       bench_rss_bytes(), (unsigned long long)st.mrs, (unsigned long long)st.chunks,
	       (unsigned long long)st.registrations, alloc_total);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *backend = bench_backend();
	size_t live = 256u << 20, maxsize = 1u << 20;
	if (bench_parse_size(bench_opt(argc, argv, "--live", "256M"), &live) ||
	    bench_parse_size(bench_opt(argc, argv, "--max-size", "1M"), &maxsize) || maxsize < 64)
		bench_die(PROG, "bad size");
	double churn = bench_opt_double(argc, argv, "--churn", 4);
	env_label = bench_opt(argc, argv, "--env", backend);
	const char *cm = getenv("RDMALLOC_CHUNK_MAX");
	chunk_label = bench_opt(argc, argv, "--chunk-max", cm && *cm ? cm : "0");
	page_label = bench_opt(argc, argv, "--page-mode", "4k");

	if (!rdma_malloc_default_pd()) {
		bench_progress(PROG, "SKIP: no RDMA device (run it in the Soft-RoCE guest, or the -fake build)");
		return 0;
	}
	/* Enough slots for the live set of the smallest mean size. */
	size_t nslots = live / 4096 + 1024;
	void **slot = calloc(nslots, sizeof(void *));
	size_t *len = calloc(nslots, sizeof(size_t));
	if (!slot || !len)
		bench_die(PROG, "out of memory");
	uint64_t seed = 0xC0FFEEull;
	size_t used = 0;

	if (bench_flag(argc, argv, "--header"))
		printf("env,chunk_max,page_mode,phase,live_requested,live_bytes,registered_bytes,"
		       "chunk_bytes,rss_bytes,mrs,chunks,registrations,allocated_total\n");
	while (live_req < live && used < nslots) {
		size_t sz = bench_log_uniform(&seed, 64, maxsize);
		void *p = rdma_malloc(sz);
		if (!p)
			bench_die(PROG, "rdma_malloc(%zu) failed", sz);
		memset(p, 1, sz < 256 ? sz : 256);
		slot[used] = p;
		len[used++] = sz;
		live_req += sz;
		alloc_total += sz;
	}
	row("ramp");
	size_t target = alloc_total + (size_t)(churn * (double)live);
	while (alloc_total < target) {
		size_t k = (size_t)(bench_rand(&seed) % used);
		rdma_free(slot[k]);
		live_req -= len[k];
		size_t sz = bench_log_uniform(&seed, 64, maxsize);
		void *p = rdma_malloc(sz);
		if (!p)
			bench_die(PROG, "rdma_malloc(%zu) failed", sz);
		memset(p, 1, sz < 256 ? sz : 256);
		slot[k] = p;
		len[k] = sz;
		live_req += sz;
		alloc_total += sz;
	}
	row("steady");
	for (size_t k = 0; k < used; k++) {
		if (k % 4) {
			rdma_free(slot[k]);
			live_req -= len[k];
			slot[k] = NULL;
		}
	}
	row("shrink");
	rdma_malloc_trim(); /* what can go back at the grain of a chunk */
	row("shrink-trim");
	for (size_t k = 0; k < used; k++)
		rdma_free(slot[k]);
	free(slot);
	free(len);
	return 0;
}
