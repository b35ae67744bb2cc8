/* SPDX-License-Identifier: MIT */
/*
 * msg.c - a fresh buffer per message.
 *
 * Each message: allocate a buffer, get its key, post one RDMA WRITE of it to
 * a peer QP, wait for the completion, free the buffer.  Two ways:
 *
 *   rdmalloc     rdma_malloc + rdma_malloc_keys ... rdma_free
 *   malloc+reg   malloc + ibv_reg_mr(LOCAL_WRITE) ... ibv_dereg_mr + free
 *
 * The peer's target is one rdmalloc buffer (its rkey from the lookup); the
 * QPs come from the end-to-end suite's helpers (tests/e2e/rdma_env.c).
 * Buffers are not filled: what differs is allocation + registration.  A
 * message larger than the port's largest (8 MiB here) goes as several WRITEs,
 * all in flight at once.
 * Per (rep, size, method): messages are sent until --min-ms have passed and
 * at least --min-msgs were sent; the row has the mean nanoseconds per message
 * and its three parts.  The two methods alternate which goes first.
 *
 *   rdmalloc-bench-msg [--sizes 64,4K,64K,...] [--min-ms 100] [--min-msgs 5]
 *       [--reps 5] [--env LABEL]
 */
#include <infiniband/verbs.h>

#include "common.h"
#include "rdma_env.h"
#include "rdma_malloc.h"

#define PROG "bench-msg"

struct result {
	double total, alloc_key, xfer, release;
	size_t msgs;
};

static struct e2e_pair pair;
static char *target;
static uint32_t target_rkey;

static int one_message(int use_rdmalloc, size_t size, uint64_t *t)
{
	void *p;
	struct ibv_mr *mr = NULL;
	uint32_t lkey;
	t[0] = bench_now_ns();
	if (use_rdmalloc) {
		p = rdma_malloc(size);
		if (!p || rdma_malloc_keys(p, size, NULL, &lkey, NULL) != 0)
			return -1;
	} else {
		p = malloc(size);
		if (!p)
			return -1;
		mr = ibv_reg_mr(pair.pd, p, size, IBV_ACCESS_LOCAL_WRITE);
		if (!mr) {
			free(p);
			return -1;
		}
		lkey = mr->lkey;
	}
	t[1] = bench_now_ns();
	/* One WRITE, or pieces of the port's largest message, all in flight. */
	int st = 0;
	size_t pieces = 0;
	for (size_t off = 0; off < size && !st; off += pair.max_msg, pieces++) {
		size_t n = size - off < pair.max_msg ? size - off : pair.max_msg;
		st = e2e_post_write(&pair, (char *)p + off, n, lkey, (uintptr_t)target + off,
				    target_rkey, pieces);
	}
	for (size_t i = 0; i < pieces && !st; i++)
		st = e2e_wait(&pair, 0, NULL, E2E_WC_TIMEOUT_MS);
	t[2] = bench_now_ns();
	if (use_rdmalloc) {
		rdma_free(p);
	} else {
		if (ibv_dereg_mr(mr))
			st = -1;
		free(p);
	}
	t[3] = bench_now_ns();
	if (st) {
		fprintf(stderr, "%s: message of %zu bytes: %s (%s)\n", PROG, size, e2e_status_str(st),
			pair.err);
		return -1;
	}
	return 0;
}

static int batch(int use_rdmalloc, size_t size, double min_ms, size_t min_msgs, struct result *r)
{
	memset(r, 0, sizeof(*r));
	uint64_t start = bench_now_ns(), t[4];
	uint64_t sum[3] = { 0, 0, 0 };
	while (r->msgs < min_msgs || (double)(bench_now_ns() - start) < min_ms * 1e6) {
		if (one_message(use_rdmalloc, size, t))
			return -1;
		for (int i = 0; i < 3; i++)
			sum[i] += t[i + 1] - t[i];
		r->msgs++;
	}
	r->alloc_key = (double)sum[0] / (double)r->msgs;
	r->xfer = (double)sum[1] / (double)r->msgs;
	r->release = (double)sum[2] / (double)r->msgs;
	r->total = r->alloc_key + r->xfer + r->release;
	return 0;
}

int main(int argc, char **argv)
{
	size_t sizes[32];
	int nsizes = bench_parse_list(
		bench_opt(argc, argv, "--sizes", "64,256,1K,4K,16K,64K,256K,1M,4M,16M"), sizes, 32);
	double min_ms = bench_opt_double(argc, argv, "--min-ms", 100);
	size_t min_msgs = (size_t)bench_opt_long(argc, argv, "--min-msgs", 5);
	int reps = (int)bench_opt_long(argc, argv, "--reps", 5);
	const char *env = bench_opt(argc, argv, "--env", "guest");
	if (nsizes <= 0 || reps < 1)
		bench_die(PROG, "bad options");

	int err = e2e_pair_open(&pair, NULL);
	if (err == ENODEV) {
		bench_progress(PROG, "SKIP: %s", E2E_SKIP_MSG);
		return 0;
	}
	if (err)
		bench_die(PROG, "cannot open the QP pair: %s", pair.err);
	size_t maxsize = 0;
	for (int i = 0; i < nsizes; i++) {
		if (sizes[i] < 1 || sizes[i] / pair.max_msg > 64)
			bench_die(PROG, "size %zu outside 1..64 x %u (the port's largest message)",
				  sizes[i], pair.max_msg);
		if (sizes[i] > maxsize)
			maxsize = sizes[i];
	}
	target = rdma_malloc(maxsize);
	if (!target || rdma_malloc_keys(target, maxsize, NULL, NULL, &target_rkey))
		bench_die(PROG, "no registered target of %zu bytes", maxsize);
	bench_progress(PROG, "%d sizes, %d reps, >= %.0f ms and >= %zu messages per point", nsizes,
		       reps, min_ms, min_msgs);

	/* Warm-up, not recorded: the QP's first messages, every size class's
	 * first allocation, libibverbs' first registration. */
	for (int i = 0; i < nsizes; i++) {
		struct result r;
		for (int k = 0; k < 2; k++)
			if (batch(k, sizes[i], 0, 3, &r))
				return 1;
	}
	if (bench_flag(argc, argv, "--header"))
		printf("env,method,size,rep,ns_per_msg,ns_alloc_key,ns_xfer,ns_release,msgs\n");
	for (int rep = 1; rep <= reps; rep++) {
		for (int i = 0; i < nsizes; i++) {
			for (int k = 0; k < 2; k++) {
				int use_rdmalloc = (k + rep + i) % 2;
				struct result r;
				if (batch(use_rdmalloc, sizes[i], min_ms, min_msgs, &r))
					return 1;
				printf("%s,%s,%zu,%d,%.0f,%.0f,%.0f,%.0f,%zu\n", env,
				       use_rdmalloc ? "rdmalloc" : "malloc+reg", sizes[i], rep, r.total,
				       r.alloc_key, r.xfer, r.release, r.msgs);
			}
			fflush(stdout);
		}
		bench_progress(PROG, "rep %d/%d done", rep, reps);
	}
	rdma_free(target);
	e2e_pair_close(&pair);
	return 0;
}
