/* SPDX-License-Identifier: MIT */
/*
 * alloc.c - multi-threaded allocation workloads on plain malloc/free/realloc,
 * to be run under LD_PRELOAD of each allocator (bench/run does).
 *
 *   small     each thread replaces random slots of 1024 with 8-256 B blocks
 *   mixed     the same with 8 B - 64 KiB blocks (80% <= 256 B, 15% <= 4 KiB)
 *   prodcons  threads in pairs: one mallocs 16 B - 1 KiB blocks and passes
 *             them through a ring, the other frees them (cross-thread frees)
 *   realloc   two buffers per thread grow by realloc (x1.5) from 16 B to
 *             1 MiB, then are freed, again and again
 *   large     each thread replaces random slots of 8 with 256 KiB - 8 MiB
 *             blocks and writes one byte per 4 KiB page
 *   xthread   a server's threads freeing each other's objects (after
 *             larson): rounds of fresh threads, each taking over slots of
 *             1000 16-512 B blocks that a thread of the round before
 *             allocated, replacing them at random, then exiting
 *   xthread-sized  the same with C++ new and sized delete
 *             (operator delete(void *, size_t), alloc_cxx.cc)
 *   simple    glibc's bench-malloc-simple: each thread mallocs batches of
 *             25, 100, 400 and 1600 blocks of 32 B, writes every byte,
 *             frees the first half in order and the rest in reverse: one
 *             size class, the thread cache's hits and refills
 *   leak      after mimalloc-bench's mleak: rounds of fresh threads, each
 *             callocs one 128 B object, swaps it into a random slot of a
 *             table shared by all and frees what it found there, then
 *             exits: threads that live for one allocation, objects that
 *             outlive them (freed by later threads or at the end)
 *   falseshare  passive false sharing (after Hoard's cache-scratch): the
 *             main thread allocates one 8 B object per thread, each thread
 *             frees its own, then allocates 8 B, writes it 5000 times and
 *             frees it, again and again: an allocator that hands threads
 *             neighbouring bytes makes their writes share cache lines
 *
 * "small" with --threads 1 is the single-threaded small-object workload.
 *
 * Every block is written to (its first bytes, or every page for "large").
 * Prints one CSV row: workload, threads, operations, seconds (wall, from a
 * start barrier to the last thread done), CPU seconds (user + system of the
 * process over the same span: allocator start-up is left out), CPU ns per
 * operation, peak RSS, and which library malloc()
 * resolved to.
 *
 *   rdmalloc-bench-alloc WORKLOAD [--threads T] [--scale S] [--header]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common.h"

#define PROG "bench-alloc"

/* alloc_cxx.cc: ::operator new and the sized ::operator delete. */
void *bench_new(size_t n);
void bench_delete_sized(void *p, size_t n);

static double scale = 1.0;
static pthread_barrier_t barrier;
static volatile uint64_t sink;

struct worker {
	int id;
	uint64_t ops;
	void *ring; /* prodcons: the pair's ring */
	void *object; /* falseshare: the main thread's object for it */
	size_t round; /* leak: the round it runs in, part of its seed */
	pthread_t tid;
};

static inline size_t scaled(double n)
{
	double v = n * scale;
	return v < 1 ? 1 : (size_t)v;
}

static inline void touch(void *p, size_t n)
{
	memset(p, 0x5a, n < 64 ? n : 64);
}

static void *w_slots(struct worker *w, size_t nslots, int mixed)
{
	uint64_t s = 0x1234567ull * (uint64_t)(w->id + 1);
	void **slot = calloc(nslots, sizeof(void *));
	size_t ops = scaled(mixed ? 3000000 : 8000000);
	pthread_barrier_wait(&barrier);
	for (size_t i = 0; i < ops; i++) {
		uint64_t r = bench_rand(&s);
		size_t k = (size_t)(r % nslots), sz;
		if (!mixed) {
			sz = 8 + (size_t)((r >> 20) % 249);
		} else {
			unsigned c = (unsigned)((r >> 20) % 100);
			sz = c < 80 ? bench_log_uniform(&s, 8, 256)
				    : c < 95 ? bench_log_uniform(&s, 257, 4096)
					     : bench_log_uniform(&s, 4097, 65536);
		}
		free(slot[k]);
		slot[k] = malloc(sz);
		if (!slot[k])
			bench_die(PROG, "malloc(%zu) failed", sz);
		touch(slot[k], sz);
	}
	for (size_t k = 0; k < nslots; k++)
		free(slot[k]);
	free(slot);
	w->ops = ops;
	return NULL;
}

#define RING 4096
struct ring {
	_Alignas(64) _Atomic size_t head;
	_Alignas(64) _Atomic size_t tail;
	_Alignas(64) void *slot[RING];
};

static void *w_prodcons(struct worker *w)
{
	struct ring *q = w->ring;
	size_t ops = scaled(3000000);
	uint64_t s = 0x7654321ull * (uint64_t)(w->id + 1);
	pthread_barrier_wait(&barrier);
	if (w->id % 2 == 0) { /* producer */
		for (size_t i = 0; i < ops; i++) {
			size_t sz = bench_log_uniform(&s, 16, 1024);
			void *p = malloc(sz);
			if (!p)
				bench_die(PROG, "malloc(%zu) failed", sz);
			touch(p, sz);
			size_t h = atomic_load_explicit(&q->head, memory_order_relaxed);
			unsigned spins = 0;
			while (h - atomic_load_explicit(&q->tail, memory_order_acquire) == RING)
				if (++spins % 64 == 0)
					sched_yield();
			q->slot[h % RING] = p;
			atomic_store_explicit(&q->head, h + 1, memory_order_release);
		}
	} else { /* consumer */
		for (size_t i = 0; i < ops; i++) {
			size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed);
			unsigned spins = 0;
			while (atomic_load_explicit(&q->head, memory_order_acquire) == t)
				if (++spins % 64 == 0)
					sched_yield();
			void *p = q->slot[t % RING];
			atomic_store_explicit(&q->tail, t + 1, memory_order_release);
			sink += *(unsigned char *)p;
			free(p);
		}
	}
	w->ops = ops;
	return NULL;
}

static void *w_realloc(struct worker *w)
{
	size_t rounds = scaled(3000), ops = 0;
	pthread_barrier_wait(&barrier);
	for (size_t r = 0; r < rounds; r++) {
		char *a = NULL, *b = NULL;
		size_t na = 16, nb = 24;
		while (na <= (1u << 20) || nb <= (1u << 20)) {
			if (na <= (1u << 20)) {
				char *x = realloc(a, na);
				if (!x)
					bench_die(PROG, "realloc(%zu) failed", na);
				a = x;
				a[na - 1] = 1;
				na += na / 2;
				ops++;
			}
			if (nb <= (1u << 20)) {
				char *x = realloc(b, nb);
				if (!x)
					bench_die(PROG, "realloc(%zu) failed", nb);
				b = x;
				b[nb - 1] = 1;
				nb += nb / 2;
				ops++;
			}
		}
		free(a);
		free(b);
		ops += 2;
	}
	w->ops = ops;
	return NULL;
}

static void *w_large(struct worker *w)
{
	uint64_t s = 0xabcdefull * (uint64_t)(w->id + 1);
	enum { NSLOTS = 8 };
	void *slot[NSLOTS] = { 0 };
	size_t ops = scaled(1000);
	pthread_barrier_wait(&barrier);
	for (size_t i = 0; i < ops; i++) {
		size_t k = (size_t)(bench_rand(&s) % NSLOTS);
		size_t sz = bench_log_uniform(&s, 256 << 10, 8 << 20);
		free(slot[k]);
		char *p = malloc(sz);
		if (!p)
			bench_die(PROG, "malloc(%zu) failed", sz);
		for (size_t off = 0; off < sz; off += 4096)
			p[off] = 1;
		slot[k] = p;
	}
	for (int k = 0; k < NSLOTS; k++)
		free(slot[k]);
	w->ops = ops;
	return NULL;
}

/* xthread: a round's worker takes over one set of slots, allocated by a
 * thread of the round before (now gone), and replaces them at random. */
#define XT_SLOTS 1000
struct xt_set {
	void *p[XT_SLOTS];
	size_t size[XT_SLOTS];
	uint64_t seed;
};
static struct xt_set *xt_sets;
static int xt_sized;
static size_t xt_round_ops;

static void *xt_alloc(size_t n)
{
	void *p = xt_sized ? bench_new(n) : malloc(n);
	if (!p)
		bench_die(PROG, "malloc(%zu) failed", n);
	touch(p, n);
	return p;
}

static void xt_free(void *p, size_t n)
{
	if (xt_sized)
		bench_delete_sized(p, n);
	else
		free(p);
}

static void *w_xthread(struct worker *w)
{
	struct xt_set *set = &xt_sets[w->id];
	for (size_t i = 0; i < xt_round_ops; i++) {
		uint64_t r = bench_rand(&set->seed);
		size_t k = (size_t)(r % XT_SLOTS), sz = 16 + (size_t)((r >> 20) % 497);
		xt_free(set->p[k], set->size[k]);
		set->p[k] = xt_alloc(sz);
		set->size[k] = sz;
	}
	w->ops = xt_round_ops;
	return NULL;
}

static void *w_simple(struct worker *w)
{
	static const size_t batch[] = { 25, 100, 400, 1600 };
	char **arr = calloc(1600, sizeof(char *));
	if (!arr)
		bench_die(PROG, "out of memory");
	size_t per = scaled(8000000), ops = 0;
	pthread_barrier_wait(&barrier);
	for (size_t b = 0; b < sizeof(batch) / sizeof(batch[0]); b++) {
		size_t n = batch[b];
		for (size_t it = 0; it < per / n; it++) {
			for (size_t i = 0; i < n; i++) {
				if (!(arr[i] = malloc(32)))
					bench_die(PROG, "malloc(32) failed");
				for (size_t g = 0; g < 32; g++)
					arr[i][g] = (char)g;
			}
			for (size_t i = 0; i < n / 2; i++)
				free(arr[i]);
			for (size_t i = n; i-- > n / 2;)
				free(arr[i]);
			ops += n;
		}
	}
	free(arr);
	w->ops = ops;
	return NULL;
}

#define LEAK_SLOTS 1000
static _Atomic(void *) leak_slot[LEAK_SLOTS];

static void *w_leak(struct worker *w)
{
	uint64_t s = 0x1ce4e5b9ull * (uint64_t)(w->id + 1) + w->round;
	void *p = calloc(16, sizeof(void *));
	if (!p)
		bench_die(PROG, "calloc failed");
	free(atomic_exchange(&leak_slot[bench_rand(&s) % LEAK_SLOTS], p));
	w->ops = 1;
	return NULL;
}

static void *w_falseshare(struct worker *w)
{
	size_t ops = scaled(20000);
	pthread_barrier_wait(&barrier);
	free(w->object);
	for (size_t i = 0; i < ops; i++) {
		volatile char *p = malloc(8);
		if (!p)
			bench_die(PROG, "malloc(8) failed");
		for (int j = 0; j < 5000; j++)
			p[j % 8] = (char)(p[j % 8] + j);
		free((void *)p);
	}
	w->ops = ops;
	return NULL;
}

static const char *workload;

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	if (!strcmp(workload, "small"))
		return w_slots(w, 1024, 0);
	if (!strcmp(workload, "mixed"))
		return w_slots(w, 1024, 1);
	if (!strcmp(workload, "prodcons"))
		return w_prodcons(w);
	if (!strcmp(workload, "realloc"))
		return w_realloc(w);
	if (!strcmp(workload, "falseshare"))
		return w_falseshare(w);
	if (!strncmp(workload, "xthread", 7))
		return w_xthread(w);
	if (!strcmp(workload, "simple"))
		return w_simple(w);
	if (!strcmp(workload, "leak"))
		return w_leak(w);
	return w_large(w);
}

static const char *malloc_library(void)
{
	static char name[256];
	Dl_info info;
	void *f = dlsym(RTLD_DEFAULT, "malloc");
	if (!f || !dladdr(f, &info) || !info.dli_fname)
		return "unknown";
	const char *slash = strrchr(info.dli_fname, '/');
	snprintf(name, sizeof(name), "%s", slash ? slash + 1 : info.dli_fname);
	return name;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argv[1][0] == '-')
		bench_die(PROG, "usage: rdmalloc-bench-alloc small|mixed|prodcons|realloc|large|"
				"xthread|xthread-sized|falseshare|simple|leak [--threads T] [--scale S] [--header]");
	workload = argv[1];
	static const char *const known[] = { "small", "mixed", "prodcons", "realloc", "large",
					     "xthread", "xthread-sized", "falseshare", "simple", "leak" };
	size_t kw = 0;
	while (kw < sizeof(known) / sizeof(known[0]) && strcmp(workload, known[kw]))
		kw++;
	if (kw == sizeof(known) / sizeof(known[0]))
		bench_die(PROG, "unknown workload %s", workload);
	int xthread = !strncmp(workload, "xthread", 7) || !strcmp(workload, "leak");
	xt_sized = !strcmp(workload, "xthread-sized");
	int threads = (int)bench_opt_long(argc, argv, "--threads", sysconf(_SC_NPROCESSORS_ONLN));
	scale = bench_opt_double(argc, argv, "--scale", 1.0);
	if (threads < 1 || threads > 256 || scale <= 0)
		bench_die(PROG, "bad options");
	if (!strcmp(workload, "prodcons") && threads % 2)
		threads++; /* pairs */

	struct worker *w = calloc((size_t)threads, sizeof(*w));
	struct ring *rings = NULL;
	if (!strcmp(workload, "prodcons")) {
		rings = aligned_alloc(64, sizeof(struct ring) * (size_t)(threads / 2));
		memset(rings, 0, sizeof(struct ring) * (size_t)(threads / 2));
	}
	size_t rounds = 1;
	if (!strcmp(workload, "leak")) { /* mleak's shape: rounds of threads */
		rounds = scaled(2000);
	} else if (xthread) { /* the first owners of the slots: the main thread */
		xt_sets = calloc((size_t)threads, sizeof(*xt_sets));
		if (!xt_sets)
			bench_die(PROG, "out of memory");
		for (int t = 0; t < threads; t++) {
			xt_sets[t].seed = 0x5eed5ull * (uint64_t)(t + 1);
			for (size_t k = 0; k < XT_SLOTS; k++)
				xt_sets[t].p[k] = xt_alloc(xt_sets[t].size[k] = 16 + k % 497);
		}
		rounds = scaled(400);
		xt_round_ops = 20000;
	}
	pthread_barrier_init(&barrier, NULL, (unsigned)threads + 1);
	struct rusage ru0, ru;
	uint64_t t0 = 0, ops = 0;
	if (!xthread) {
		for (int t = 0; t < threads; t++) {
			w[t].id = t;
			w[t].ring = rings ? &rings[t / 2] : NULL;
			if (!strcmp(workload, "falseshare") && !(w[t].object = malloc(8)))
				bench_die(PROG, "malloc(8) failed");
			if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]))
				bench_die(PROG, "pthread_create failed");
		}
		/* The workers wait at the barrier: what was spent so far (loading
		 * and initialising the allocator, creating threads) is left out. */
		getrusage(RUSAGE_SELF, &ru0);
		pthread_barrier_wait(&barrier);
		t0 = bench_now_ns();
		for (int t = 0; t < threads; t++) {
			pthread_join(w[t].tid, NULL);
			ops += w[t].ops;
		}
	} else {
		/* Threads come and go, as a server's: their start and exit are
		 * part of the workload. */
		getrusage(RUSAGE_SELF, &ru0);
		t0 = bench_now_ns();
		for (size_t r = 0; r < rounds; r++) {
			for (int t = 0; t < threads; t++) {
				w[t].id = (int)((r + (size_t)t) % (size_t)threads); /* another set each round */
				w[t].round = r;
				if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]))
					bench_die(PROG, "pthread_create failed");
			}
			for (int t = 0; t < threads; t++) {
				pthread_join(w[t].tid, NULL);
				ops += w[t].ops;
			}
		}
	}
	double secs = (double)(bench_now_ns() - t0) / 1e9;
	getrusage(RUSAGE_SELF, &ru);
	/* CPU time of the process during the workload: on a shared machine,
	 * time spent waiting for a CPU is not the allocator's. */
	double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec - ru0.ru_utime.tv_sec -
			      ru0.ru_stime.tv_sec) +
		     (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec - ru0.ru_utime.tv_usec -
			      ru0.ru_stime.tv_usec) / 1e6;
	if (bench_flag(argc, argv, "--header"))
		printf("workload,threads,ops,seconds,cpu_seconds,ns_per_op,maxrss_kb,malloc_from\n");
	printf("%s,%d,%llu,%.6f,%.6f,%.2f,%ld,%s\n", workload, threads, (unsigned long long)ops, secs,
	       cpu, cpu * 1e9 / (double)ops, ru.ru_maxrss, malloc_library());
	if (!strcmp(workload, "leak")) {
		for (size_t k = 0; k < LEAK_SLOTS; k++)
			free(atomic_load(&leak_slot[k]));
	} else if (xthread) {
		for (int t = 0; t < threads; t++)
			for (size_t k = 0; k < XT_SLOTS; k++)
				xt_free(xt_sets[t].p[k], xt_sets[t].size[k]);
		free(xt_sets);
	}
	free(rings);
	free(w);
	return 0;
}
