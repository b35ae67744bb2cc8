/* SPDX-License-Identifier: MIT */
/*
 * test_heaps.c - heaps: access flags, limits, invariant 5 (a heap's memory
 * never reaches another heap through thread caches) and invariant 3's
 * concurrency side (lookups while other threads allocate and free).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "chunk.h"
#include "fake_verbs.h"
#include "rdma_malloc.h"
#include "addrmap.h"
#include "heap.h"
#include "stderr_said.h"

static void with_device(void)
{
	fake_verbs_install(1);
}

TestSuite(heaps, .init = with_device);

static rdma_heap_t *heap_of(void *p)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	cr_assert(c, "%p is in no chunk", p);
	return (rdma_heap_t *)c->heap;
}

Test(heaps, attr_validation)
{
	errno = 0;
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_REMOTE_WRITE }));
	cr_assert_eq(errno, EINVAL, "remote write without local write");
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = 1u << 30 }));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = 0, .flags = 1 }));
	cr_assert_eq(errno, EINVAL);
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	cr_assert_eq(rdma_heap_access(h), rdma_heap_access(NULL));
	cr_assert_eq(rdma_heap_access(NULL), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
}

Test(heaps, memory_is_registered_with_the_heaps_access)
{
	unsigned acc[] = { 0, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	for (size_t i = 0; i < 4; i++) {
		rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = acc[i] });
		cr_assert(h);
		void *p = rdma_heap_malloc(h, 1000);
		cr_assert(p);
		cr_assert_eq(heap_of(p), h);
		const struct fake_mr_info *f = fake_find(fake_pd(0), p);
		cr_assert(f);
		cr_assert_eq(f->access, acc[i]);
		rdma_free(p);
	}
}

Test(heaps, all_allocators_honour_the_heap)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	void *a = rdma_heap_malloc(h, 10);
	void *b = rdma_heap_calloc(h, 10, 10);
	void *c = rdma_heap_aligned_alloc(h, 4096, 10);
	void *d = rdma_heap_realloc(h, NULL, 10);
	void *e = rdma_malloc(10);
	cr_assert(a && b && c && d && e);
	cr_assert(heap_of(a) == h && heap_of(b) == h && heap_of(c) == h && heap_of(d) == h);
	cr_assert_eq(heap_of(e), rdma_heap_default());
	/* realloc into another heap moves and copies. */
	strcpy(e, "moved");
	void *f = rdma_heap_realloc(h, e, 5000);
	cr_assert_eq(heap_of(f), h);
	cr_assert_str_eq(f, "moved");
	/* rdma_realloc keeps the heap of its pointer. */
	void *g = rdma_realloc(a, 100000);
	cr_assert_eq(heap_of(g), h);
	rdma_free(b), rdma_free(c), rdma_free(d), rdma_free(f), rdma_free(g);
}

Test(heaps, too_many_heaps_is_eagain_and_slots_recycle)
{
	rdma_heap_t *hs[RDMA_MALLOC_MAX_HEAPS];
	int n = 0;
	errno = 0;
	while (n < RDMA_MALLOC_MAX_HEAPS && (hs[n] = rdma_heap_create(NULL)))
		n++;
	cr_assert_eq(n, RDMA_MALLOC_MAX_HEAPS - 1, "the default heap holds one slot");
	cr_assert_eq(errno, EAGAIN);
	for (int i = 0; i < n; i++)
		cr_assert_eq(rdma_heap_destroy(hs[i]), 0);
	for (int round = 0; round < 300; round++) {
		rdma_heap_t *h = rdma_heap_create(NULL);
		cr_assert(h, "round %d: %s", round, strerror(errno));
		void *p = rdma_heap_malloc(h, 100);
		cr_assert_eq(heap_of(p), h);
		cr_assert_eq(rdma_heap_destroy(h), 0);
	}
}

/* Invariant 5: threads allocate from two heaps and free each other's
 * memory; every pointer must always come from the heap asked for. */
#define SEP_THREADS 4
#define SEP_ROUNDS 20000
static rdma_heap_t *heap_a, *heap_b;
static _Atomic(void *) mailbox[SEP_THREADS][64];
static atomic_int separation_errors;

static void *separation_worker(void *arg)
{
	int me = (int)(intptr_t)arg;
	uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
	for (int r = 0; r < SEP_ROUNDS; r++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rdma_heap_t *want = (x & 1) ? heap_a : heap_b;
		size_t size = 8 + (size_t)(x >> 8) % ((x & 16) ? 512 : 40000);
		void *p = rdma_heap_malloc(want, size);
		if (!p || heap_of(p) != want)
			atomic_fetch_add(&separation_errors, 1);
		/* Hand it to another thread's mailbox; free whatever was there. */
		int to = (int)((x >> 20) % SEP_THREADS);
		void *old = atomic_exchange(&mailbox[to][(x >> 32) % 64], p);
		rdma_free(old);
	}
	return NULL;
}

Test(heaps, invariant5_no_memory_crosses_heaps, .timeout = 120)
{
	heap_a = rdma_heap_create(NULL);
	heap_b = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(heap_a && heap_b);
	pthread_t t[SEP_THREADS];
	for (int i = 0; i < SEP_THREADS; i++)
		pthread_create(&t[i], NULL, separation_worker, (void *)(intptr_t)i);
	for (int i = 0; i < SEP_THREADS; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&separation_errors), 0, "%d allocations came from the wrong heap",
		     atomic_load(&separation_errors));
	for (int i = 0; i < SEP_THREADS; i++)
		for (int k = 0; k < 64; k++)
			rdma_free(atomic_load(&mailbox[i][k]));
	/* Threads have exited: their caches went with them, so the heaps can
	 * go without flushing anyone else's. */
	cr_assert_eq(rdma_heap_destroy(heap_a), 0);
	cr_assert_eq(rdma_heap_destroy(heap_b), 0);
}

/* Invariant 3 under concurrency: lookups of live pointers always succeed
 * with the keys of the region holding them while others allocate/free. */
static atomic_int stop, lookup_errors;
static void *churner(void *arg)
{
	(void)arg;
	void *keep[32] = { 0 };
	unsigned i = 0;
	while (!atomic_load(&stop)) {
		unsigned k = i++ % 32;
		rdma_free(keep[k]);
		keep[k] = rdma_malloc(16 + (i * 7919u) % (1u << (i % 22)));
	}
	for (int k = 0; k < 32; k++)
		rdma_free(keep[k]);
	return NULL;
}

Test(heaps, lookups_race_with_allocation, .timeout = 60)
{
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, churner, NULL);
	for (int round = 0; round < 2000; round++) {
		size_t size = 1 + ((size_t)round * 104729u) % (3u << 20);
		char *p = rdma_malloc(size);
		uint32_t lkey, rkey;
		for (int k = 0; k < 50; k++) {
			if (rdma_malloc_keys(p, size, NULL, &lkey, &rkey) != 0)
				atomic_fetch_add(&lookup_errors, 1);
		}
		struct ibv_mr *mr = rdma_malloc_mr(p, size, NULL);
		if (!mr || mr->lkey != lkey || mr->rkey != rkey)
			atomic_fetch_add(&lookup_errors, 1);
		rdma_free(p);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&lookup_errors), 0);
}

/* The drop-in's free() trusts the address map's auto marks (addrmap.h):
 * every granule of a chunk of an automatic-cache heap is marked, nothing
 * else is, however many chunks and heaps there are.  Such a chunk maps the
 * rest of its last granule too: a granule a mapping ends inside could be
 * anyone's past the end (issue 23, item 3) and was left unmarked, so that
 * frees there took the slow path (issue 25: a fifth of the frees of
 * mimalloc-bench's alloc-test). */
Test(heaps, auto_marks_cover_exactly_the_auto_heaps_chunks)
{
	int err = 0;
	struct rdmalloc_heap *h = rdmalloc_heap_create(IBV_ACCESS_LOCAL_WRITE, RDMALLOC_HEAP_AUTO_CACHE, -1, &err);
	cr_assert(h, "%s", strerror(err));
	rdma_heap_t *plain = rdma_heap_create(NULL);
	cr_assert(plain);
	enum { N = 24 };
	void *a[N], *b[N];
	for (int i = 0; i < N; i++) { /* several chunks each, interleaved in the address space */
		size_t n = (size_t)1 << (12 + i % 10);
		a[i] = rdma_heap_malloc((rdma_heap_t *)h, n);
		b[i] = rdma_heap_malloc(plain, n);
		cr_assert(a[i] && b[i]);
	}
	for (int i = 0; i < N; i++) {
		struct rdmalloc_chunk *c = rdmalloc_addrmap_find(a[i]);
		cr_assert(c && c->heap == h);
		/* Marked: every granule, the last one whole too. */
		for (uintptr_t g = c->base; g < c->base + c->size; g += RDMALLOC_GRANULE) {
			cr_assert(rdmalloc_addrmap_auto_find((void *)g), "granule at %#lx of [%#lx, +%#zx)",
				  (unsigned long)g, (unsigned long)c->base, c->size);
			cr_assert(rdmalloc_addrmap_auto_find((void *)(g + RDMALLOC_GRANULE - 1)),
				  "end of the granule at %#lx of [%#lx, +%#zx)", (unsigned long)g,
				  (unsigned long)c->base, c->size);
		}
		/* What the mark covers past the chunk is the chunk's mapping:
		 * nobody else can map there. */
		uintptr_t end = c->base + c->map_size, gend = (end + RDMALLOC_GRANULE - 1) & ~(RDMALLOC_GRANULE - 1);
		if (end < gend) {
			void *m = mmap((void *)end, 4096, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
			cr_assert_eq(m, MAP_FAILED, "a page past the chunk [%#lx, +%#zx) could be mapped",
				     (unsigned long)c->base, c->size);
		}
		cr_assert_eq(rdmalloc_addrmap_find((void *)(c->base + c->size - 1)), c);
		c = rdmalloc_addrmap_find(b[i]);
		cr_assert(c && c->heap != h);
		cr_assert_not(rdmalloc_addrmap_auto_find((void *)c->base));
		cr_assert_not(rdmalloc_addrmap_auto_find((void *)(c->base + c->size - 1)));
	}
	void *def = rdma_malloc(100);
	int local;
	cr_assert_not(rdmalloc_addrmap_auto_find(def));
	cr_assert_not(rdmalloc_addrmap_auto_find(&local));
	cr_assert_not(rdmalloc_addrmap_auto_find(NULL));
	cr_assert_not(rdmalloc_addrmap_auto_find((void *)UINTPTR_MAX));
	cr_assert_not(rdmalloc_addrmap_auto_find((void *)((uintptr_t)1 << 48)));
	rdma_free(def);
	for (int i = 0; i < N; i++) {
		rdma_free(a[i]);
		rdma_free(b[i]);
	}
	cr_assert_eq(rdma_heap_destroy(plain), 0);
	cr_assert_eq(rdma_heap_destroy((rdma_heap_t *)h), EINVAL, "an automatic-cache heap is never destroyed");
}

/* When jemalloc has no cache id left, a thread runs a heap uncached
 * (tcache_fallbacks) and keeps allocating; the crash report
 * (rdmalloc_heap_caches_dump) shows it uncached, with no id (there is
 * none).  THREADS x heaps caches are more than jemalloc's ~4093 ids. */
#define EXHAUST_HEAPS (RDMA_MALLOC_MAX_HEAPS - 1)
#define EXHAUST_THREADS 33
static rdma_heap_t *exhaust_heap[EXHAUST_HEAPS];
static pthread_barrier_t exhaust_made, exhaust_done;

/* Its result: 0, or 1 if an allocation failed (the barriers all the same,
 * so that the main thread fails the test rather than wait for ever). */
static void *exhaust_thread(void *arg)
{
	(void)arg;
	intptr_t failed = 0;
	for (int i = 0; i < EXHAUST_HEAPS && !failed; i++) {
		void *p = rdma_heap_malloc(exhaust_heap[i], 64);
		failed = !p;
		rdma_free(p);
	}
	pthread_barrier_wait(&exhaust_made);
	pthread_barrier_wait(&exhaust_done); /* holding its caches */
	return (void *)failed;
}

static void with_device_quiet(void)
{
	with_device();
	cr_redirect_stderr();
}

Test(heaps, a_thread_without_a_cache_id_runs_uncached_and_the_report_says_so, .init = with_device_quiet,
     .timeout = 120)
{
	for (int i = 0; i < EXHAUST_HEAPS; i++)
		cr_assert(exhaust_heap[i] = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE }),
			  "heap %d: %s", i, strerror(errno));
	struct rdma_malloc_stats s0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(s0) }, s1 = s0;
	cr_assert_eq(rdma_malloc_stats_get(&s0), 0);
	pthread_barrier_init(&exhaust_made, NULL, EXHAUST_THREADS + 1);
	pthread_barrier_init(&exhaust_done, NULL, EXHAUST_THREADS + 1);
	pthread_t t[EXHAUST_THREADS];
	for (int i = 0; i < EXHAUST_THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, exhaust_thread, NULL), 0);
	pthread_barrier_wait(&exhaust_made);
	/* Every id taken: this thread's use of a heap goes uncached (its
	 * first allocation ever is uncached anyway: heap.c, mallocx_first). */
	rdma_free(rdma_heap_malloc(exhaust_heap[0], 100));
	char *p = rdma_heap_malloc(exhaust_heap[0], 100);
	cr_assert(p, "an uncached allocation failed");
	memset(p, 0x5a, 100);
	cr_assert_eq(rdma_malloc_stats_get(&s1), 0);
	FILE *f = tmpfile();
	cr_assert(f);
	rdmalloc_heap_caches_dump(fileno(f));
	rdma_free(p);
	pthread_barrier_wait(&exhaust_done);
	for (int i = 0; i < EXHAUST_THREADS; i++) {
		void *r;
		cr_assert_eq(pthread_join(t[i], &r), 0);
		cr_assert_null(r, "thread %d: an allocation failed", i);
	}
	for (int i = 0; i < EXHAUST_HEAPS; i++)
		cr_assert_eq(rdma_heap_destroy(exhaust_heap[i]), 0);
	cr_assert_gt(s1.tcache_fallbacks, s0.tcache_fallbacks, "no thread ran uncached");
	char said[4096];
	cr_assert(strstr(stderr_said(said, sizeof(said)), "no jemalloc thread cache left"), "not logged: %s", said);
	char head[4096];
	rewind(f);
	cr_assert(fgets(head, sizeof(head), f), "an empty report");
	fclose(f);
	cr_assert(strstr(head, "this thread's: heap "), "no heap on the thread's line: %s", head);
	cr_assert(strstr(head, " uncached;") && !strstr(head, "uncached 4"),
		  "the heap is not shown uncached, or with an id: %s", head);
}
