/* SPDX-License-Identifier: MIT */
/*
 * stress.c - threads allocate, free, realloc and look up keys in several
 * heaps while PDs are attached and detached, a thread of its own creates,
 * fills and destroys heaps, and idle chunks come and go (a heap with a 1 ms
 * decay, a thread of bursts freed and trimmed), checking the invariants after
 * every step, for a bounded time, while another thread flushes every thread
 * cache it sees unused between two looks (heap.c's idle flush, on a clock
 * a second ahead each time).  A plain program (not Criterion) so that it also runs under
 * ThreadSanitizer.  Uses the fake verbs backend.
 *
 *   stress [SECONDS] [THREADS] [faults]      prints "N passed, M failed"
 *
 * "faults" (a -Dfault_injection=true build): ibv_reg_mr, chunk mmap and
 * ibv_dereg_mr fail at random (1 call in 20, 12 and 15) all the while; an
 * allocation may then fail, but only with ENOMEM and leaving a realloc'ed
 * block intact, and every other invariant still holds.
 */
#include <errno.h>
#include <execinfo.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunk.h"
#include "fake_verbs.h"
#include "heap.h"
#include "reserve.h"
#include "fault.h"
#include "rdma_malloc.h"
#include "addrmap.h"

#define HEAPS 3
#define SLOTS 64

static rdma_heap_t *heaps[HEAPS];
static atomic_long ops, violations, clean_failures, heap_cycles;
static int faults; /* random faults injected: allocations may fail with ENOMEM */

static void violation(const char *what, const void *p)
{
	if (atomic_fetch_add(&violations, 1) < 10)
		fprintf(stderr, "stress: invariant broken: %s (%p)\n", what, p);
}

/* An allocation returned NULL: a violation, unless faults are injected and
 * errno says ENOMEM. */
static void alloc_failed(const char *what)
{
	if (faults && errno == ENOMEM)
		atomic_fetch_add_explicit(&clean_failures, 1, memory_order_relaxed);
	else
		violation(what, NULL);
}

static void check(void *p, rdma_heap_t *h, size_t size, unsigned char fill)
{
	size_t u = rdma_malloc_usable_size(p);
	if (u < size)
		violation("usable size below the requested size", p);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	if (!c || (rdma_heap_t *)c->heap != h)
		violation("pointer is not in a chunk of its heap", p);
	uint32_t lkey, rkey;
	if (rdma_malloc_keys(p, u, NULL, &lkey, &rkey) != 0)
		violation("no default-PD key for the whole usable size", p);
	struct ibv_mr *mr = rdma_malloc_mr(p, u, NULL);
	if (!mr || (uintptr_t)p < (uintptr_t)mr->addr || (uintptr_t)p - (uintptr_t)mr->addr > mr->length ||
	    mr->length - ((uintptr_t)p - (uintptr_t)mr->addr) < u)
		violation("region does not cover the allocation", p);
	/* Attached-PD lookups may race with detach: only ENODEV is allowed. */
	int e = rdma_malloc_keys(p, u, fake_pd(1), NULL, NULL);
	if (e != 0 && e != ENODEV)
		violation("second-PD lookup failed with something other than ENODEV", p);
	for (size_t i = 0; i < size; i += 61)
		if (((unsigned char *)p)[i] != fill)
			violation("contents changed under us", p);
}

struct worker_arg {
	int id;
	atomic_int stop;
};

static void *worker(void *argp)
{
	struct worker_arg *arg = argp;
	uint64_t x = 0x2545F4914F6CDD1Dull * (uint64_t)(arg->id + 1);
	void *p[SLOTS] = { 0 };
	size_t sz[SLOTS] = { 0 };
	int hp[SLOTS] = { 0 };
	while (!atomic_load_explicit(&arg->stop, memory_order_relaxed)) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int i = (int)(x % SLOTS), h = (int)((x >> 8) % HEAPS);
		size_t size = 1 + (size_t)((x >> 16) % ((x & 0x100) ? 4000 : ((x & 0x200) ? 300000 : 5000000)));
		unsigned char fill = (unsigned char)(i * 7 + 1);
		if (p[i] && (x & 0x400)) {
			errno = 0;
			void *q = rdma_realloc(p[i], size);
			if (!q) {
				alloc_failed("realloc failed");
				check(p[i], heaps[hp[i]], sz[i], fill); /* left intact */
				continue;
			}
			size_t keep = sz[i] < size ? sz[i] : size;
			for (size_t k = 0; k < keep; k += 61)
				if (((unsigned char *)q)[k] != fill)
					violation("realloc lost contents", q);
			memset(q, fill, size);
			p[i] = q, sz[i] = size;
		} else {
			rdma_free(p[i]);
			errno = 0;
			p[i] = (x & 0x800) ? rdma_heap_calloc(heaps[h], 1, size)
					   : rdma_heap_aligned_alloc(heaps[h], (size_t)8 << ((x >> 40) % 10), size);
			if (!p[i]) {
				alloc_failed("allocation failed");
				continue;
			}
			memset(p[i], fill, size);
			sz[i] = size, hp[i] = h;
		}
		check(p[i], heaps[hp[i]], sz[i], fill);
		atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed);
	}
	for (int i = 0; i < SLOTS; i++)
		rdma_free(p[i]);
	return NULL;
}

/* Heap churn in a thread of its own: create a heap, fill it, check every
 * block, free some, destroy it with the rest live; again. */
static void *heap_churner(void *argp)
{
	atomic_int *stop = argp;
	uint64_t x = 0x9E3779B97F4A7C15ull;
	while (!atomic_load_explicit(stop, memory_order_relaxed)) {
		unsigned acc = (x & 1) ? IBV_ACCESS_LOCAL_WRITE : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		/* Every fourth heap an implicit ODP heap: chunks share one region
		 * per PD, taken and given back while PDs come and go. */
		unsigned flags = (x & 3) == 1 ? RDMA_HEAP_ODP | RDMA_HEAP_ODP_IMPLICIT : 0;
		rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = acc, .flags = flags });
		if (!h) {
			violation("rdma_heap_create failed", NULL);
			break;
		}
		void *b[16];
		size_t n[16];
		for (int i = 0; i < 16; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			n[i] = 1 + (size_t)(x >> 16) % ((i & 3) ? 5000 : 3000000);
			errno = 0;
			b[i] = rdma_heap_malloc(h, n[i]);
			if (!b[i]) {
				alloc_failed("allocation in a churned heap failed");
				continue;
			}
			memset(b[i], i + 1, n[i]);
		}
		for (int i = 0; i < 16; i++) {
			if (!b[i])
				continue;
			check(b[i], h, n[i], (unsigned char)(i + 1));
			if (i & 1)
				rdma_free(b[i]);
		}
		if (rdma_heap_destroy(h) != 0)
			violation("rdma_heap_destroy failed", h);
		atomic_fetch_add_explicit(&heap_cycles, 1, memory_order_relaxed);
	}
	return NULL;
}

/* Phases in a heap of its own (no other thread's free memory to reuse):
 * a burst of blocks, all freed, given back; the next burst takes chunks
 * back (registered again), while the workers look keys up in the other
 * heaps and the PDs come and go. */
static rdma_heap_t *phase_heap;

static void *phaser(void *argp)
{
	atomic_int *stop = argp;
	/* Blocks below the big-block threshold (64 KiB), 4.8 MB in all: they
	 * fill jemalloc's chunks, which the trim gives back and the next
	 * burst takes back.  (Big blocks are the workers'.) */
	enum { N = 120 };
	while (!atomic_load_explicit(stop, memory_order_relaxed)) {
		void *b[N];
		for (int i = 0; i < N; i++) {
			errno = 0;
			b[i] = rdma_heap_malloc(phase_heap, (size_t)(i % 3 + 1) * 20 * 1024);
			if (!b[i]) {
				alloc_failed("allocation in a phase failed");
				continue;
			}
			memset(b[i], 0x3c, 4096); /* only a page: TSan is slow */
		}
		for (int i = 0; i < N; i++) {
			if (!b[i])
				continue;
			uint32_t lkey;
			if (rdma_malloc_keys(b[i], (size_t)(i % 3 + 1) * 20 * 1024, NULL, &lkey, NULL) != 0)
				violation("no key for a block of a phase", b[i]);
			for (size_t k = 0; k < 4096; k += 61)
				if (((unsigned char *)b[i])[k] != 0x3c)
					violation("contents of a phase's block changed under us", b[i]);
			rdma_free(b[i]);
		}
		rdma_malloc_trim();
	}
	return NULL;
}

/* Buffers of 16 MiB and more, whose chunks the registration crew
 * populates and registers with every PD at once (crew.h), while PDs come
 * and go and chunks are given back. */
static atomic_ulong giants;

static void *giant(void *argp)
{
	atomic_int *stop = argp;
	for (size_t n = 0; !atomic_load_explicit(stop, memory_order_relaxed); n++) {
		size_t size = ((size_t)16 << 20) + (n % 8) * (1 << 20);
		errno = 0;
		unsigned char *p = rdma_heap_malloc(heaps[1], size);
		if (!p) {
			alloc_failed("a buffer of 16 MiB or more failed");
			continue;
		}
		p[0] = p[size - 1] = 0x5e; /* two pages: TSan is slow */
		uint32_t lkey;
		if (rdma_malloc_keys(p, size, NULL, &lkey, NULL) != 0 && !faults)
			violation("no key for the whole of a buffer of 16 MiB or more", p);
		if (p[0] != 0x5e || p[size - 1] != 0x5e)
			violation("contents of a big buffer changed under us", p);
		rdma_free(p);
		atomic_fetch_add(&giants, 1);
	}
	return NULL;
}

/* The idle-cache flush of the background tick, far more often. */
static void *flusher(void *arg)
{
	atomic_int *stop = arg;
	uint64_t clock = 0;
	while (!atomic_load(stop)) {
		rdmalloc_heap_flush_idle_caches(clock += 1000000000u);
		struct timespec d = { 0, 200 * 1000 };
		nanosleep(&d, NULL);
	}
	return NULL;
}

/* A crash says how the thread caches stood (the rare one this program
 * once met: a worker's jemalloc thread cache read as zeros) and where it
 * was, then dies of its signal as before.  Under a sanitizer, whose report
 * of a fault says more than ours, after its report (its death callback);
 * aborts, which it does not report, here. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifdef SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

static void dump_caches(const char *what)
{
	char m[160];
	int n = snprintf(m, sizeof(m), "stress: %s in thread %ld; the thread caches:\n", what, (long)gettid());
	(void)!write(2, m, (size_t)n);
	rdmalloc_heap_caches_dump(2);
}

static void crashed(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char what[64];
	if (sig == SIGSEGV || sig == SIGBUS)
		snprintf(what, sizeof(what), "signal %d (address %p)", sig, si->si_addr);
	else
		snprintf(what, sizeof(what), "signal %d", sig);
	dump_caches(what);
	void *bt[64];
	backtrace_symbols_fd(bt, backtrace(bt, 64), 2);
	raise(sig); /* SA_RESETHAND: the default action now */
}

#ifdef SANITIZED
static void sanitizer_died(void)
{
	dump_caches("the sanitizer's report above");
}
#endif

static void report_crashes(void)
{
	void *bt[1];
	backtrace(bt, 1); /* loads the unwinder now, not in the handler */
	struct sigaction sa = { .sa_sigaction = crashed, .sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGABRT, &sa, NULL);
#ifdef SANITIZED
	__sanitizer_set_death_callback(sanitizer_died);
#else
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
#endif
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	int nthreads = argc > 2 ? atoi(argv[2]) : 8;
	faults = argc > 3 && !strcmp(argv[3], "faults");
	report_crashes();
	setenv("RDMALLOC_REG_THREADS", "4", 0); /* the crew's workers, however few the CPUs */
	fake_verbs_install(1);
#ifdef RDMALLOC_FAULT_INJECTION
	if (faults) {
		rdmalloc_fault_arm_random(RDMALLOC_FAULT_REG, 20, 1, 0);
		rdmalloc_fault_arm_random(RDMALLOC_FAULT_MMAP, 12, 2, 0);
		rdmalloc_fault_arm_random(RDMALLOC_FAULT_DEREG, 15, 3, 0);
	}
#else
	if (faults) {
		fprintf(stderr, "stress: \"faults\" needs a -Dfault_injection=true build\n");
		return 2;
	}
#endif
	heaps[0] = rdma_heap_default();
	/* Its chunks are given back as soon as they are idle, and taken back. */
	heaps[1] = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE, .decay_ms = 1 });
	heaps[2] = rdma_heap_create(NULL);
	phase_heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE, .decay_ms = 1 });
	if (!heaps[1] || !heaps[2] || !phase_heap) {
		perror("rdma_heap_create");
		return 2;
	}
	pthread_t t[256];
	static struct worker_arg args[256];
	if (nthreads < 1 || nthreads > 256)
		nthreads = 8;
	for (int i = 0; i < nthreads; i++) {
		args[i].id = i;
		pthread_create(&t[i], NULL, worker, &args[i]);
	}
	static atomic_int churn_stop;
	pthread_t churn, phases, flush, big;
	pthread_create(&churn, NULL, heap_churner, &churn_stop);
	pthread_create(&phases, NULL, phaser, &churn_stop);
	pthread_create(&flush, NULL, flusher, &churn_stop);
	pthread_create(&big, NULL, giant, &churn_stop);
	long attaches = 0, threads_spawned = 0;
	double end = now() + seconds;
	while (now() < end) {
		/* PD churn and short-lived threads while the workers run. */
		if (rdma_malloc_attach_pd(fake_pd(1)) == 0)
			attaches++;
		pthread_t s;
		struct worker_arg sa = { .id = (int)(1000 + threads_spawned) };
		pthread_create(&s, NULL, worker, &sa);
		struct timespec d = { 0, 20 * 1000 * 1000 };
		nanosleep(&d, NULL);
		rdma_malloc_trim();
		rdma_malloc_detach_pd(fake_pd(1));
		atomic_store(&sa.stop, 1);
		pthread_join(s, NULL);
		threads_spawned++;
	}
	for (int i = 0; i < nthreads; i++)
		atomic_store(&args[i].stop, 1);
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	atomic_store(&churn_stop, 1);
	pthread_join(churn, NULL);
	pthread_join(phases, NULL);
	pthread_join(flush, NULL);
	pthread_join(big, NULL);
	unsigned long injected = 0;
#ifdef RDMALLOC_FAULT_INJECTION
	rdmalloc_fault_disarm_all();
	for (int s = 0; s < RDMALLOC_FAULT_SITES; s++)
		injected += rdmalloc_fault_injected((enum rdmalloc_fault_site)s);
#endif
	int failed = 0;
	for (int i = 1; i < HEAPS; i++)
		if (rdma_heap_destroy(heaps[i]) != 0)
			failed++;
	if (rdma_heap_destroy(phase_heap) != 0)
		failed++;
	rdmalloc_reserves_settle(); /* the reserve's thread done: counts hold still */
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	if (st.mrs != fake_live_mrs()) {
		fprintf(stderr, "stress: %llu regions counted, %zu live in the backend\n",
			(unsigned long long)st.mrs, fake_live_mrs());
		failed++;
	}
	long v = atomic_load(&violations);
	printf("stress: %.1f s, %d threads (+%ld short-lived, +1 heap churner), %ld operations, %ld PD "
	       "attach/detach cycles, %ld heaps created and destroyed, %llu chunks given back and %llu taken "
	       "back, %llu idle caches flushed, %lu faults injected, %ld allocations failed cleanly, %ld invariant "
	       "violations\n",
	       seconds, nthreads, threads_spawned, atomic_load(&ops), attaches, atomic_load(&heap_cycles),
	       (unsigned long long)st.chunks_given_back, (unsigned long long)st.chunks_taken_back,
	       (unsigned long long)st.idle_cache_flushes, injected,
	       atomic_load(&clean_failures), v);
	if (!atomic_load(&giants) || (!faults && !st.populated_chunks)) {
		fprintf(stderr, "stress: %lu buffers of 16 MiB or more, %llu chunks populated by the crew: that "
			"path went untried\n", atomic_load(&giants), (unsigned long long)st.populated_chunks);
		failed++;
	}
	if (!st.chunks_given_back || !st.chunks_taken_back || !st.idle_cache_flushes) {
		fprintf(stderr, "stress: no chunk was given back or taken back, or no cache flushed: those paths "
			"went untried\n");
		failed++;
	}
	if (v)
		failed++;
	printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
	return failed ? 1 : 0;
}
