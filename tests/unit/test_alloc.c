/* SPDX-License-Identifier: MIT */
/* test_alloc.c - the C semantics of the allocation functions. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../preload/in_child.h"
#include "fake_verbs.h"
#include "heap.h"
#include "jemalloc.h"
#include "rdma_malloc.h"

/* Sizes the compiler must not see as constants (it rejects them). */
static volatile size_t huge = SIZE_MAX - 4096, half = SIZE_MAX / 2;
static void *volatile given_back_sink;

static void with_device(void)
{
	fake_verbs_install(1);
}

TestSuite(alloc, .init = with_device);

Test(alloc, malloc_zero_is_unique_and_freeable)
{
	void *a = rdma_malloc(0), *b = rdma_malloc(0);
	cr_assert(a && b && a != b);
	cr_assert_geq(rdma_malloc_usable_size(a), 1);
	rdma_free(a);
	rdma_free(b);
}

Test(alloc, free_null_is_noop)
{
	rdma_free(NULL);
	cr_assert_eq(rdma_malloc_usable_size(NULL), 0);
}

Test(alloc, calloc_zeroes_recycled_memory)
{
	for (int round = 0; round < 50; round++) {
		unsigned char *p = rdma_malloc(3000);
		cr_assert(p);
		memset(p, 0xee, 3000);
		rdma_free(p);
		unsigned char *q = rdma_calloc(3, 1000);
		cr_assert(q);
		for (size_t i = 0; i < 3000; i++)
			cr_assert_eq(q[i], 0, "byte %zu of calloc'ed memory is %#x", i, q[i]);
		rdma_free(q);
	}
}

Test(alloc, calloc_overflow_is_enomem)
{
	errno = 0;
	cr_assert_null(rdma_calloc(half, 3));
	cr_assert_eq(errno, ENOMEM);
}

Test(alloc, huge_size_is_enomem)
{
	errno = 0;
	cr_assert_null(rdma_malloc(huge));
	cr_assert_eq(errno, ENOMEM);
	errno = 0;
	cr_assert_null(rdma_aligned_alloc(64, half));
	cr_assert_eq(errno, ENOMEM);
}

Test(alloc, aligned_alloc_alignments)
{
	for (size_t a = 1; a <= (size_t)8 << 20; a <<= 1) {
		void *p = rdma_aligned_alloc(a, 100);
		cr_assert(p, "alignment %zu", a);
		cr_assert_eq((uintptr_t)p % a, 0, "%p not aligned to %zu", p, a);
		rdma_free(p);
	}
}

Test(alloc, bad_alignment_is_einval)
{
	size_t bad[] = { 0, 3, 24, 4097, SIZE_MAX };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		cr_assert_null(rdma_aligned_alloc(bad[i], 64));
		cr_assert_eq(errno, EINVAL, "alignment %zu", bad[i]);
		void *p = (void *)0x1;
		cr_assert_eq(rdma_posix_memalign(&p, bad[i], 64), EINVAL);
		cr_assert_eq(p, (void *)0x1, "memptr changed on failure");
	}
	void *p = (void *)0x1;
	cr_assert_eq(rdma_posix_memalign(&p, 4, 64), EINVAL, "4 is not a multiple of sizeof(void *)");
}

Test(alloc, posix_memalign_success_keeps_errno)
{
	void *p = NULL;
	errno = 1234;
	cr_assert_eq(rdma_posix_memalign(&p, 4096, 10000), 0);
	cr_assert_eq(errno, 1234);
	cr_assert_eq((uintptr_t)p % 4096, 0);
	rdma_free(p);
	cr_assert_eq(rdma_posix_memalign(&p, 64, SIZE_MAX / 2), ENOMEM);
}

Test(alloc, realloc_keeps_contents)
{
	unsigned char *p = rdma_realloc(NULL, 10);
	cr_assert(p);
	for (int i = 0; i < 10; i++)
		p[i] = (unsigned char)i;
	size_t sizes[] = { 100, 5000, 1 << 20, 20 << 20, 64, 3 };
	size_t kept = 10;
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		p = rdma_realloc(p, sizes[k]);
		cr_assert(p);
		if (sizes[k] < kept)
			kept = sizes[k];
		for (size_t i = 0; i < kept; i++)
			cr_assert_eq(p[i], (unsigned char)i, "byte %zu after realloc to %zu", i, sizes[k]);
	}
	void *q = rdma_realloc(p, 0);
	cr_assert(q, "realloc to 0 returns a minimal allocation");
	rdma_free(q);
}

Test(alloc, realloc_failure_keeps_pointer)
{
	char *p = rdma_malloc(100);
	strcpy(p, "still here");
	errno = 0;
	cr_assert_null(rdma_realloc(p, huge));
	cr_assert_eq(errno, ENOMEM);
	cr_assert_str_eq(p, "still here");
	rdma_free(p);
}

Test(alloc, usable_size_is_writable)
{
	for (size_t s = 1; s < (1u << 22); s = s * 3 + 1) {
		unsigned char *p = rdma_malloc(s);
		size_t u = rdma_malloc_usable_size(p);
		cr_assert_geq(u, s);
		memset(p, 0x5a, u);
		rdma_free(p);
	}
}

Test(alloc, usable_size_of_foreign_pointer_is_zero)
{
	int on_stack = 0;
	void *from_libc = malloc(32);
	cr_assert_eq(rdma_malloc_usable_size(&on_stack), 0);
	cr_assert_eq(rdma_malloc_usable_size(from_libc), 0);
	free(from_libc);
}

Test(alloc, free_of_foreign_pointer_aborts, .signal = SIGABRT)
{
	int on_stack = 0;
	rdma_free(&on_stack);
}

/* A block freed twice aborts (freed.h; issue 23, item 5: on c66f40e each
 * of these returned, and the block was handed out twice), from a heap's
 * thread cache and from its arena alike. */
Test(alloc, double_free_aborts, .signal = SIGABRT)
{
	void *p = rdma_malloc(48);
	rdma_free(p);
	rdma_free(p);
}

Test(alloc, double_free_with_others_between_aborts, .signal = SIGABRT)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 3000), *q = rdma_heap_malloc(h, 3000);
	rdma_free(p);
	rdma_free(q);
	for (size_t s = 8; s < 1000; s *= 2)
		cr_assert(rdma_heap_malloc(h, s));
	rdma_free(p);
}

Test(alloc, realloc_of_freed_block_aborts, .signal = SIGABRT)
{
	void *p = rdma_malloc(100);
	rdma_free(p);
	cr_assert(rdma_realloc(p, 200));
}

/* rdma_realloc of a freed block on a thread not watched yet moves it
 * (alloc_ended's rule), and the new block came first: from the arena, where
 * the freed block lay (the trim flushed it out of the cache), at its own
 * address.  Its key cleared, the realloc "moved" the block onto itself,
 * freed it and returned it: no abort, and a freed block in the caller's
 * hands (found in review; issue 23's "reads the old block first").  The
 * freed block is the first of a new heap's arena, where jemalloc's
 * first-fit hands it out again. */
static void *realloc_freed(void *p)
{
	return rdma_realloc(p, 100);
}

Test(alloc, realloc_of_a_freed_block_on_a_new_thread_aborts, .signal = SIGABRT)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 100), *keep = rdma_heap_malloc(h, 5000); /* the chunk stays */
	cr_assert(p && keep);
	rdma_free(p);
	rdma_malloc_trim(); /* this thread's cache flushed: p is the arena's */
	pthread_t t;
	void *q = NULL;
	cr_assert_eq(pthread_create(&t, NULL, realloc_freed, p), 0);
	pthread_join(t, &q);
	cr_log_error("rdma_realloc of a freed block returned %p (the block: %p)", q, p);
	rdma_free(keep);
}

/* A block freed, its memory given back (a trim: the chunk deregistered
 * and its pages returned), then freed or reallocated again: the key went
 * with the pages, and on 89c21d6 the abort said "not memory from
 * rdmalloc", the wrong diagnosis.  Also with the chunk taken back by
 * another block first: the block's page is still given back, its word 0
 * (on 89c21d6: the free went into jemalloc, SIGSEGV).  An ODP heap keeps
 * its chunks but its free pages go back to the kernel: on 4fab0a9 the
 * free after a trim went into jemalloc there (SIGSEGV).  In a child, to
 * read the message. */
struct given_back_case {
	size_t size;
	int realloc;
	int taken_back; /* another block made the chunk live again first */
	int odp;        /* in an RDMA_HEAP_ODP heap */
};

/* Whether the page of @p's first word lies in [@first, @end). */
static int page_in(const void *p, const char *first, const char *end)
{
	const char *page = (const char *)((uintptr_t)p & ~(uintptr_t)4095);
	return page >= first && page < end;
}

static void free_given_back(void *arg)
{
	const struct given_back_case *c = arg;
	/* Its chunk holds these blocks alone. */
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .flags = c->odp ? RDMA_HEAP_ODP : 0 });
	void *p = h ? rdma_heap_malloc(h, c->size) : NULL, *p2 = h ? rdma_heap_malloc(h, c->size) : NULL;
	if (!p || !p2)
		return;
	memset(p, 0x5a, c->size);
	memset(p2, 0x5a, c->size);
	rdma_free(p);
	rdma_free(p2);
	/* Nothing given back (an ODP heap's chunk stays, its pages go): no
	 * abort, the case fails. */
	if (!rdma_malloc_trim() && !(c->odp && *(volatile uint64_t *)p == 0 && *(volatile uint64_t *)p2 == 0))
		return;
	if (c->taken_back) {
		/* Its chunk live again, but the page of one of the two not in
		 * use: that one, whose word reads 0, is checked in the map of
		 * the chunk in hand. */
		char *q = rdma_heap_malloc(h, c->size);
		if (!q)
			return;
		char *q_first = (char *)((uintptr_t)q & ~(uintptr_t)4095), *q_end = q + c->size;
		if (page_in(p, q_first, q_end)) /* q's pages hold p's first word: p2 then */
			p = p2;
		if (page_in(p, q_first, q_end))
			return; /* both: the case cannot be made, and fails */
	}
	if (c->realloc)
		given_back_sink = rdma_realloc(p, c->size * 2);
	else
		rdma_free(p);
}

Test(alloc, free_after_the_memory_was_given_back_says_double_free)
{
	/* Taken back: large blocks, an extent each (small ones share a slab,
	 * which the new block's commit takes whole). */
	static const size_t sizes[] = { 48, 3000, 20000, 40000 };
	for (int odp = 0; odp < 2; odp++) /* the fake device has RC ODP by default */
		for (unsigned s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			for (int k = 0; k < (sizes[s] < 16384 ? 2 : 4); k++) {
				struct given_back_case c = { sizes[s], k & 1, k >> 1, odp };
				char out[512];
				int st = in_child(free_given_back, &c, out, sizeof(out));
				cr_expect(aborted_saying(st, out, c.realloc ? "rdma_realloc(0x" : "rdma_free(0x",
							 "the block is free already (a double free)"),
					  "%s%zu B, %s after the give-back%s: status %d, said: %s", odp ? "ODP heap, " : "",
					  c.size, c.realloc ? "rdma_realloc" : "rdma_free",
					  c.taken_back ? " and another block's take-back" : "", st, out);
			}
}

/* The old pointer freed after rdma_realloc moved its block: jemalloc's
 * rallocx freed it without the key, and this free went through (the
 * review of issue 23; two rdma_mallocs then returned one block). */
Test(alloc, free_after_a_moving_realloc_aborts, .signal = SIGABRT)
{
	void *p = rdma_malloc(24);
	void *q = rdma_realloc(p, 4000);
	cr_assert(q && q != p, "a block of 24 bytes grown to 4000 moves");
	rdma_free(p);
}

Test(alloc, realloc_in_place_and_moved_keep_the_bytes)
{
	for (size_t size = 8; size < (size_t)8 << 20; size = size * 3 + 5) {
		unsigned char *p = rdma_malloc(size);
		cr_assert(p);
		for (size_t i = 0; i < size; i++)
			p[i] = (unsigned char)(i * 7 + size);
		size_t to[] = { size + size / 8 + 1, size * 3, size / 2 + 1 };
		for (unsigned k = 0; k < 3; k++) {
			size_t keep = k < 2 ? size : to[k];
			unsigned char *q = rdma_realloc(p, to[k]);
			cr_assert(q);
			for (size_t i = 0; i < keep; i++)
				cr_assert_eq(q[i], (unsigned char)(i * 7 + size), "size %zu to %zu: byte %zu", size,
					     to[k], i);
			p = rdma_realloc(q, size);
			cr_assert(p);
			for (size_t i = keep; i < size; i++)
				p[i] = (unsigned char)(i * 7 + size);
		}
		rdma_free(p);
	}
}

/* ... and a block handed out again, by any call, is freed again without
 * one. */
Test(alloc, freed_block_handed_out_again_frees_again)
{
	for (int round = 0; round < 5000; round++) {
		size_t size = 8 + (size_t)(round * 37 % 3000);
		void *p = rdma_malloc(size), *q = NULL;
		cr_assert(p);
		memset(p, round, size);
		rdma_free(p);
		switch (round % 4) {
		case 0: q = rdma_malloc(size); break;
		case 1: q = rdma_calloc(1, size); break;
		case 2: q = rdma_aligned_alloc(64, size); break;
		default: q = rdma_realloc(rdma_malloc(size / 2 + 1), size); break;
		}
		cr_assert(q);
		rdma_free(q);
	}
}

/* Thread caches keep message-sized blocks (up to 1 MiB, not jemalloc's
 * 32 KiB): heap.c's compiled-in jemalloc options are in force. */
Test(alloc, thread_caches_keep_blocks_up_to_1_mib)
{
	cr_assert_eq(rdmalloc_heap_tcache_max(), (size_t)1 << 20);
}

/*
 * A pthread key destructor that runs after jemalloc's has cleaned the
 * thread up (a key made later: destructors run in the order of their
 * keys).  jemalloc would serve that thread from its arena 0, whatever
 * arena rdma_malloc names: memory of no chunk, without keys, which
 * rdma_free rejects.  Each allocation is checked as memory of a chunk
 * (usable size) with keys, and its bytes kept, before it is freed; the
 * first one as a big block of a page (so the destructor did run after
 * jemalloc's).
 */
struct late {
	unsigned char *early; /* rdma_malloc'ed while the thread lived */
	int failed;           /* the first step that failed (0: none) */
	int ran;              /* the destructor ran to its end */
};

static int registered(const void *p, size_t len)
{
	uint32_t l;
	return p && rdma_malloc_usable_size(p) >= len && rdma_malloc_keys(p, len, NULL, &l, NULL) == 0;
}

static void late_destructor(void *arg)
{
	struct late *r = arg;
	unsigned char *p = rdma_malloc(100);
	if (!registered(p, 100) || rdma_malloc_usable_size(p) != 4096) {
		r->failed = 1;
		return;
	}
	memset(p, 0x5a, 100);
	unsigned char *q = rdma_realloc(p, 3000);
	if (!registered(q, 3000) || q[99] != 0x5a) {
		r->failed = 2;
		return;
	}
	unsigned char *e = rdma_realloc(r->early, 200);
	if (!registered(e, 200) || e[63] != 0xa5) {
		r->failed = 3;
		return;
	}
	unsigned char *z = rdma_calloc(10, 10), *a = rdma_aligned_alloc(4096, 64);
	if (!registered(z, 100) || z[99] || !registered(a, 64) || (uintptr_t)a % 4096) {
		r->failed = 4;
		return;
	}
	rdma_free(q);
	rdma_free(e);
	rdma_free(z);
	rdma_free(a);
	r->ran = 1;
}

static pthread_key_t late_key;

static void *late_thread(void *arg)
{
	struct late *r = arg;
	r->early = rdma_malloc(64);
	memset(r->early, 0xa5, 64);
	if (pthread_setspecific(late_key, r))
		r->failed = -3;
	return NULL;
}

/* A thread whose only calls before its end touch jemalloc without
 * allocating or freeing: the stats, a usable size. */
static void *late_thread_no_alloc(void *arg)
{
	struct late *r = arg;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		r->failed = -1;
	if (rdma_malloc_usable_size(r->early) < 64)
		r->failed = -2;
	if (pthread_setspecific(late_key, r))
		r->failed = -3;
	return NULL;
}

Test(alloc, allocations_after_the_thread_is_cleaned_up_are_registered)
{
	rdma_free(rdma_malloc(1)); /* jemalloc and its key exist */
	cr_assert(rdmalloc_heap_ending_key_first());
	cr_assert_eq(pthread_key_create(&late_key, late_destructor), 0);
	for (int i = 0; i < 20; i++) {
		struct late r = { 0 };
		int alloc_first = i % 2 == 0;
		if (!alloc_first) {
			r.early = rdma_malloc(64);
			memset(r.early, 0xa5, 64);
		}
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, alloc_first ? late_thread : late_thread_no_alloc, &r), 0);
		cr_assert_eq(pthread_join(t, NULL), 0);
		cr_assert_eq(r.failed, 0, "thread %d (%s): step %d of its late destructor failed", i,
			     alloc_first ? "allocated first" : "allocated nothing", r.failed);
		cr_assert(r.ran, "thread %d: its late destructor did not run", i);
	}
}

/* An ODP heap has no big blocks to serve such an allocation from: it
 * answers ENOMEM, logged once and counted in fallbacks (the header), and
 * the allocations of the thread's life stay good. */
static rdma_heap_t *late_odp;
static pthread_key_t late_odp_key;

static void late_odp_destructor(void *arg)
{
	struct late *r = arg;
	errno = 0;
	void *p = rdma_heap_malloc(late_odp, 100);
	r->failed = p ? 1 : errno != ENOMEM ? 2 : 0;
	r->ran = 1;
}

static void *late_odp_thread(void *arg)
{
	struct late *r = arg;
	r->early = rdma_heap_malloc(late_odp, 64);
	if (!r->early || pthread_setspecific(late_odp_key, r))
		r->failed = -1;
	else
		memset(r->early, 0xa5, 64);
	return NULL;
}

Test(alloc, an_odp_heap_answers_enomem_after_the_thread_is_cleaned_up, .init = cr_redirect_stderr)
{
	with_device();
	rdma_free(rdma_malloc(1));
	cr_assert(rdmalloc_heap_ending_key_first());
	late_odp = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE, .flags = RDMA_HEAP_ODP });
	cr_assert(late_odp, "an ODP heap: %s", strerror(errno));
	cr_assert_eq(pthread_key_create(&late_odp_key, late_odp_destructor), 0);
	struct rdma_malloc_stats s0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(s0) }, s1 = s0;
	cr_assert_eq(rdma_malloc_stats_get(&s0), 0);
	struct late r = { 0 };
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, late_odp_thread, &r), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert(r.ran, "the late destructor did not run");
	cr_assert_eq(r.failed, 0, "%s", r.failed == 1 ? "an ODP heap served an allocation after its thread's end"
				  : r.failed == 2 ? "the refusal was not ENOMEM" : "the thread's allocation failed");
	cr_assert_eq(rdma_malloc_stats_get(&s1), 0);
	cr_assert_eq(s1.fallbacks, s0.fallbacks + 1, "not counted in fallbacks");
	for (int i = 0; i < 64; i++)
		cr_assert_eq(r.early[i], 0xa5, "byte %d of the thread's block changed", i);
	rdma_free(r.early);
	cr_assert_eq(rdma_heap_destroy(late_odp), 0);
}
