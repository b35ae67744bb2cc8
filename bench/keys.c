/* SPDX-License-Identifier: MIT */
/*
 * keys.c - nanoseconds per key lookup on random live pointers.
 *
 * N buffers of random sizes (16 B - 16 KiB, log-uniform) are allocated with
 * rdma_malloc(); every thread then looks up the keys of [p, p+len) for the
 * buffers in its own random order, with each method:
 *
 *   loop            the harness alone: read the next (p, len), fold it in
 *   load            one memory load: the first word of the buffer
 *   rdmalloc        rdma_malloc_keys(p, len, NULL, &lkey, &rkey)
 *   sorted-chunks   binary search in a sorted array of rdmalloc's regions
 *   tree-chunks     tfind(3) (glibc's red-black tree) over the same regions
 *   sorted-buffers  binary search, one region per buffer (a per-buffer
 *                   registration cache)
 *   tree-buffers    tfind(3), one region per buffer
 *   tree-buffers+rwlock  the same under a pthread rwlock read lock, as a
 *                   thread-safe cache must
 *   regmr           ibv_reg_mr + ibv_dereg_mr of the buffer (real device only)
 *   rdmalloc-table  (-fake build only, a diagnostic) the library's internal
 *                   table lookup (rdmalloc_addrmap_find) and the keys of PD
 *                   slot 0: rdma_malloc_keys without its checks and its
 *                   lookup counter
 *
 * Methods are interleaved within every repetition (A B C A B C ...).
 * ns_per_op is each thread's CPU time (CLOCK_THREAD_CPUTIME_ID) per lookup,
 * so that other jobs on a shared machine do not count; wall_ns_per_op is
 * the wall-clock time.
 * Output: CSV, one row per (rep, threads, method).
 *
 * Built twice: rdmalloc-bench-keys (the installed library, real verbs: run
 * it in the Soft-RoCE guest) and rdmalloc-bench-keys-fake (the test library
 * with the unit tests' fake registration backend, so the lookup runs on a
 * host without a device; the lookup code is the same).
 *
 *   rdmalloc-bench-keys[-fake] [--ptrs N] [--lookups M] [--reps R]
 *       [--threads 1,2] [--regmr-iters K] [--env LABEL]
 */
#include <infiniband/verbs.h>
#include <pthread.h>
#include <search.h>
#include <stdatomic.h>
#include <unistd.h>

#include "common.h"
#include "rdma_malloc.h"
#ifdef BENCH_FAKE_VERBS
#include "chunk.h"
#include "fake_verbs.h"
#include "addrmap.h"
#endif

#define PROG "bench-keys"

struct buf {
	uintptr_t p;
	size_t len;
};

struct region {
	uintptr_t start, end;
	uint32_t lkey, rkey;
};

enum method {
	M_LOOP,
	M_LOAD,
	M_RDMALLOC,
	M_SORTED_CHUNKS,
	M_TREE_CHUNKS,
	M_SORTED_BUFFERS,
	M_TREE_BUFFERS,
	M_TREE_BUFFERS_RW,
	M_REGMR,
	M_TABLE,
	M_COUNT
};

static const char *const method_name[M_COUNT] = {
	"loop", "load", "rdmalloc", "sorted-chunks", "tree-chunks",
	"sorted-buffers", "tree-buffers", "tree-buffers+rwlock", "regmr", "rdmalloc-table",
};

static struct buf *bufs;
static size_t nbufs;
static struct region *chunks, *bregs;
static size_t nchunks;
static void *chunk_tree, *buf_tree;
static pthread_rwlock_t tree_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct ibv_pd *pd;
static pthread_barrier_t barrier;
static volatile uint64_t sink;
static _Atomic int failures;

static int region_cmp(const void *a, const void *b)
{
	const struct region *k = a, *n = b;
	if (k->start < n->start)
		return -1;
	if (k->start >= n->end)
		return 1;
	return 0;
}

static int region_sort(const void *a, const void *b)
{
	const struct region *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* The last region starting at or below @p, if it covers [p, p+len). */
static inline const struct region *sorted_find(const struct region *r, size_t n, uintptr_t p,
					       size_t len)
{
	size_t lo = 0, hi = n; /* answer in [lo, hi) is the first start > p */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r[mid].start <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	const struct region *x = &r[lo - 1];
	return p + len <= x->end ? x : NULL;
}

static inline const struct region *tree_find(void *root, uintptr_t p, size_t len)
{
	struct region key = { .start = p, .end = p + len };
	void *node = tfind(&key, &root, region_cmp);
	if (!node)
		return NULL;
	const struct region *x = *(struct region **)node;
	return p + len <= x->end ? x : NULL;
}

struct job {
	enum method m;
	size_t lookups;
	const struct buf *order; /* this thread's random order of the buffers */
	double ns_per_op;        /* the thread's CPU time: time other jobs take is not ours */
	double wall_ns_per_op;
};

static void *run_job(void *arg)
{
	struct job *j = arg;
	const struct buf *o = j->order;
	size_t n = nbufs, k = 0;
	uint64_t acc = 0;
	int bad = 0;
	pthread_barrier_wait(&barrier);
	uint64_t t0 = bench_now_ns(), c0 = bench_thread_cpu_ns();
	for (size_t i = 0; i < j->lookups; i++, k = k + 1 == n ? 0 : k + 1) {
		uintptr_t p = o[k].p;
		size_t len = o[k].len;
		const struct region *r;
		uint32_t lkey = 0, rkey = 0;
		switch (j->m) {
		case M_LOOP:
			acc += p ^ len;
			break;
		case M_LOAD:
			acc += *(volatile uint64_t *)p;
			break;
		case M_RDMALLOC:
			bad |= rdma_malloc_keys((void *)p, len, NULL, &lkey, &rkey);
			acc += lkey ^ rkey;
			break;
		case M_SORTED_CHUNKS:
			r = sorted_find(chunks, nchunks, p, len);
			bad |= !r;
			acc += r ? r->lkey ^ r->rkey : 0;
			break;
		case M_TREE_CHUNKS:
			r = tree_find(chunk_tree, p, len);
			bad |= !r;
			acc += r ? r->lkey ^ r->rkey : 0;
			break;
		case M_SORTED_BUFFERS:
			r = sorted_find(bregs, nbufs, p, len);
			bad |= !r;
			acc += r ? r->lkey ^ r->rkey : 0;
			break;
		case M_TREE_BUFFERS:
			r = tree_find(buf_tree, p, len);
			bad |= !r;
			acc += r ? r->lkey ^ r->rkey : 0;
			break;
		case M_TREE_BUFFERS_RW:
			pthread_rwlock_rdlock(&tree_lock);
			r = tree_find(buf_tree, p, len);
			bad |= !r;
			acc += r ? r->lkey ^ r->rkey : 0;
			pthread_rwlock_unlock(&tree_lock);
			break;
		case M_REGMR: {
			struct ibv_mr *mr = ibv_reg_mr(pd, (void *)p, len,
						       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							       IBV_ACCESS_REMOTE_READ);
			if (!mr) {
				bad = 1;
				break;
			}
			acc += mr->lkey ^ mr->rkey;
			bad |= ibv_dereg_mr(mr) != 0;
			break;
		}
		case M_TABLE: {
#ifdef BENCH_FAKE_VERBS
			struct rdmalloc_chunk *c = rdmalloc_addrmap_find((void *)p);
			bad |= !c;
			if (c) {
				uint64_t k = atomic_load_explicit(&c->reg[0].keys, memory_order_relaxed);
				acc += rdmalloc_keys_lkey(k) ^ rdmalloc_keys_rkey(k);
			}
#endif
			break;
		}
		case M_COUNT:
			break;
		}
	}
	uint64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
	sink += acc;
	if (bad)
		atomic_fetch_add(&failures, 1);
	j->ns_per_op = (double)(c1 - c0) / (double)j->lookups;
	j->wall_ns_per_op = (double)(t1 - t0) / (double)j->lookups;
	return NULL;
}

/* One measurement: @threads threads, each @lookups lookups; the mean over
 * threads of each thread's nanoseconds per lookup (CPU time; *@wall gets the
 * same in wall-clock time). */
static double measure(enum method m, int threads, size_t lookups, struct buf **orders, double *wall)
{
	pthread_t tid[64];
	struct job jobs[64];
	pthread_barrier_init(&barrier, NULL, (unsigned)threads);
	for (int t = 0; t < threads; t++) {
		jobs[t] = (struct job){ .m = m, .lookups = lookups, .order = orders[t] };
		if (pthread_create(&tid[t], NULL, run_job, &jobs[t]))
			bench_die(PROG, "pthread_create failed");
	}
	double sum = 0, wsum = 0;
	for (int t = 0; t < threads; t++) {
		pthread_join(tid[t], NULL);
		sum += jobs[t].ns_per_op;
		wsum += jobs[t].wall_ns_per_op;
	}
	pthread_barrier_destroy(&barrier);
	*wall = wsum / threads;
	return sum / threads;
}

static void shuffle(struct buf *a, size_t n, uint64_t *seed)
{
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)(bench_rand(seed) % (i + 1));
		struct buf t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
}

int main(int argc, char **argv)
{
	const char *backend = bench_backend();
	nbufs = (size_t)bench_opt_long(argc, argv, "--ptrs", 16384);
	size_t lookups = (size_t)bench_opt_long(argc, argv, "--lookups", 1000000);
	int reps = (int)bench_opt_long(argc, argv, "--reps", 5);
	size_t regmr_iters = (size_t)bench_opt_long(argc, argv, "--regmr-iters", 200);
	const char *env = bench_opt(argc, argv, "--env", backend);
	size_t tlist[8];
	int nt = bench_parse_list(bench_opt(argc, argv, "--threads", "1,2"), tlist, 8);
	if (nt <= 0 || nbufs < 2 || lookups < 1 || reps < 1)
		bench_die(PROG, "bad options");
	for (int i = 0; i < nt; i++)
		if (tlist[i] < 1 || tlist[i] > 64)
			bench_die(PROG, "threads must be 1..64");

	/* The live buffers. */
	uint64_t seed = 0x9E3779B97F4A7C15ull;
	bufs = calloc(nbufs, sizeof(*bufs));
	bregs = calloc(nbufs, sizeof(*bregs));
	chunks = calloc(nbufs, sizeof(*chunks));
	if (!bufs || !bregs || !chunks)
		bench_die(PROG, "out of memory");
	for (size_t i = 0; i < nbufs; i++) {
		size_t len = bench_log_uniform(&seed, 16, 16384);
		void *p = rdma_malloc(len);
		if (!p)
			bench_die(PROG, "rdma_malloc(%zu) failed", len);
		memset(p, (int)i, len < 64 ? len : 64);
		bufs[i] = (struct buf){ (uintptr_t)p, len };
	}
	pd = rdma_malloc_default_pd();
	if (!pd) {
		bench_progress(PROG, "SKIP: no RDMA device (run it in the Soft-RoCE guest, or the -fake build)");
		return 0;
	}
	/* rdmalloc's regions (deduplicated) and one region per buffer, each with
	 * the keys rdmalloc gave: the caches return the same keys. */
	for (size_t i = 0; i < nbufs; i++) {
		struct ibv_mr *mr = rdma_malloc_mr((void *)bufs[i].p, bufs[i].len, NULL);
		if (!mr)
			bench_die(PROG, "rdma_malloc_mr: %s", strerror(errno));
		struct region r = { (uintptr_t)mr->addr, (uintptr_t)mr->addr + mr->length, mr->lkey,
				    mr->rkey };
		size_t k = 0;
		while (k < nchunks && chunks[k].start != r.start)
			k++;
		if (k == nchunks)
			chunks[nchunks++] = r;
		bregs[i] = (struct region){ bufs[i].p, bufs[i].p + bufs[i].len, mr->lkey, mr->rkey };
	}
	qsort(chunks, nchunks, sizeof(*chunks), region_sort);
	qsort(bregs, nbufs, sizeof(*bregs), region_sort);
	for (size_t i = 0; i < nchunks; i++)
		if (!tsearch(&chunks[i], &chunk_tree, region_cmp))
			bench_die(PROG, "tsearch failed");
	/* Inserted in allocation order, as a cache would fill. */
	for (size_t i = 0; i < nbufs; i++) {
		struct region *hit = (struct region *)sorted_find(bregs, nbufs, bufs[i].p, bufs[i].len);
		if (!hit || !tsearch(hit, &buf_tree, region_cmp))
			bench_die(PROG, "tsearch failed");
	}

	int maxt = 1;
	for (int i = 0; i < nt; i++)
		if ((int)tlist[i] > maxt)
			maxt = (int)tlist[i];
	struct buf *orders[64];
	for (int t = 0; t < maxt; t++) {
		orders[t] = malloc(nbufs * sizeof(struct buf));
		memcpy(orders[t], bufs, nbufs * sizeof(struct buf));
		shuffle(orders[t], nbufs, &seed);
	}
	bench_progress(PROG, "%s backend: %zu buffers in %zu regions, %zu lookups per thread, %d reps",
		       backend, nbufs, nchunks, lookups, reps);

	int have_regmr = 0, have_table = 0;
#ifndef BENCH_FAKE_VERBS
	have_regmr = regmr_iters > 0;
#else
	have_table = 1;
#endif
	if (bench_flag(argc, argv, "--header"))
		printf("env,backend,method,threads,rep,ns_per_op,wall_ns_per_op,lookups,buffers,regions\n");
	for (int rep = 1; rep <= reps; rep++) {
		for (int ti = 0; ti < nt; ti++) {
			int th = (int)tlist[ti];
			for (int m = 0; m < M_COUNT; m++) {
				if ((m == M_REGMR && !have_regmr) || (m == M_TABLE && !have_table))
					continue;
				size_t n = m == M_REGMR ? regmr_iters : lookups;
				double wall, ns = measure((enum method)m, th, n, orders, &wall);
				printf("%s,%s,%s,%d,%d,%.3f,%.3f,%zu,%zu,%zu\n", env, backend, method_name[m],
				       th, rep, ns, wall, n, nbufs, nchunks);
			}
			fflush(stdout);
		}
		bench_progress(PROG, "rep %d/%d done", rep, reps);
	}
	if (atomic_load(&failures)) {
		fprintf(stderr, "%s: error: %d measurements saw a failed lookup\n", PROG,
			atomic_load(&failures));
		return 1;
	}
	for (size_t i = 0; i < nbufs; i++)
		rdma_free((void *)bufs[i].p);
	return 0;
}
