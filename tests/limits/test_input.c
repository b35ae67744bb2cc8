/* SPDX-License-Identifier: MIT */
/*
 * test_input.c - bad input, each with its documented answer (include/
 * rdma_malloc.h): NULL, zero sizes, huge sizes, alignments that are not
 * powers of two, pointers that are not rdmalloc's, lengths past a region,
 * detached and foreign PDs, bad heap handles and attributes, bad stats
 * arguments, and malformed RDMALLOC_* values.  Each test prints how many
 * inputs it tried.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_verbs.h"
#include "reserve.h"
#include "options.h"
#include "rdma_malloc.h"

static void with_device(void)
{
	fake_verbs_install(1);
}

TestSuite(input, .init = with_device);

static unsigned long tried;
/* Sizes the compiler must not see as constants (it rejects them). */
static volatile size_t vmax = SIZE_MAX;

static void report(const char *what)
{
	printf("bad input %s: %lu inputs tried\n", what, tried);
	fflush(stdout);
}

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint64_t next(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

/* ------------------------------------------------------------------ NULL */

Test(input, null_everywhere)
{
	uint32_t l = 7, r = 7;
	rdma_free(NULL);
	cr_assert_eq(rdma_malloc_usable_size(NULL), 0);
	cr_assert_eq(rdma_malloc_keys(NULL, 1, NULL, &l, &r), ENOENT);
	cr_assert(l == 7 && r == 7, "keys written on failure");
	errno = 0;
	cr_assert_null(rdma_malloc_mr(NULL, 1, NULL));
	cr_assert_eq(errno, ENOENT);
	void *p = rdma_realloc(NULL, 10);
	cr_assert(p, "realloc(NULL) is malloc");
	cr_assert_eq(rdma_malloc_keys(p, 10, NULL, NULL, NULL), 0, "NULL lkey/rkey pointers are allowed");
	void *q = rdma_heap_realloc(NULL, NULL, 10);
	cr_assert(q);
	void *s = rdma_heap_malloc(NULL, 10), *c = rdma_heap_calloc(NULL, 1, 10),
	     *a = rdma_heap_aligned_alloc(NULL, 64, 10);
	cr_assert(s && c && a, "a NULL heap is the default heap");
	cr_assert_eq(rdma_heap_destroy(NULL), EINVAL);
	cr_assert_eq(rdma_heap_access(NULL), rdma_heap_access(rdma_heap_default()));
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	cr_assert_eq(rdma_heap_access(h), rdma_heap_access(NULL));
	cr_assert_eq(rdma_malloc_attach_pd(NULL), EINVAL);
	cr_assert_eq(rdma_malloc_detach_pd(NULL), ENODEV);
	cr_assert_eq(rdma_posix_memalign(NULL, 8, 8), EINVAL);
	cr_assert_eq(rdma_malloc_stats_get(NULL), EINVAL);
	cr_assert_eq(rdma_malloc_stats_print(NULL, RDMA_MALLOC_STATS_JSON), 0, "NULL stream is stderr");
	rdma_free(p), rdma_free(q), rdma_free(s), rdma_free(c), rdma_free(a);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	tried = 20;
	report("NULL");
}

/* ------------------------------------------------------------- zero sizes */

static void zero_ok(void *p, const char *what)
{
	cr_assert(p, "%s returned NULL", what);
	cr_assert_geq(rdma_malloc_usable_size(p), 1, "%s", what);
	cr_assert_eq(rdma_malloc_keys(p, 0, NULL, NULL, NULL), 0, "%s: keys of length 0 (treated as 1)", what);
	tried++;
}

Test(input, zero_sizes)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	void *ps[12];
	int n = 0;
	zero_ok(ps[n++] = rdma_malloc(0), "malloc(0)");
	zero_ok(ps[n++] = rdma_calloc(0, 5), "calloc(0, 5)");
	zero_ok(ps[n++] = rdma_calloc(5, 0), "calloc(5, 0)");
	zero_ok(ps[n++] = rdma_calloc(0, 0), "calloc(0, 0)");
	zero_ok(ps[n++] = rdma_calloc(0, vmax), "calloc(0, SIZE_MAX)");
	zero_ok(ps[n++] = rdma_aligned_alloc(4096, 0), "aligned_alloc(4096, 0)");
	void *m = NULL;
	cr_assert_eq(rdma_posix_memalign(&m, 64, 0), 0);
	zero_ok(ps[n++] = m, "posix_memalign(64, 0)");
	zero_ok(ps[n++] = rdma_heap_malloc(h, 0), "heap_malloc(0)");
	zero_ok(ps[n++] = rdma_heap_calloc(h, 0, 0), "heap_calloc(0, 0)");
	zero_ok(ps[n++] = rdma_heap_aligned_alloc(h, 8, 0), "heap_aligned_alloc(8, 0)");
	void *r = rdma_malloc(100);
	zero_ok(ps[n++] = rdma_realloc(r, 0), "realloc(p, 0)");
	void *r2 = rdma_heap_malloc(h, 100);
	zero_ok(ps[n++] = rdma_heap_realloc(h, r2, 0), "heap_realloc(p, 0)");
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			cr_assert_neq(ps[i], ps[j], "two zero-size allocations share %p", ps[i]);
	for (int i = 0; i < n; i++)
		rdma_free(ps[i]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	report("zero sizes");
}

/* ------------------------------------------------------------ huge sizes */

/* Sizes no machine can give (at least the whole 47-bit user address space)
 * and sizes whose arithmetic overflows inside an allocator. */
static const size_t huge_sizes[] = {
	SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4095, SIZE_MAX - ((size_t)2 << 20), SIZE_MAX / 2 + 1,
	SIZE_MAX / 2, (size_t)PTRDIFF_MAX, (size_t)1 << 63, (size_t)1 << 62, (size_t)1 << 56,
	(size_t)1 << 48, ((size_t)1 << 48) - 1, (size_t)1 << 47, ((size_t)1 << 47) + 4096,
};
#define NHUGE (sizeof(huge_sizes) / sizeof(huge_sizes[0]))

#define EXPECT_ENOMEM(call, what, ...)                                                  \
	do {                                                                            \
		errno = 0;                                                              \
		void *r_ = (call);                                                      \
		cr_assert_null(r_, what " succeeded", __VA_ARGS__);                     \
		cr_assert_eq(errno, ENOMEM, what ": errno %d, want ENOMEM", __VA_ARGS__, errno); \
		tried++;                                                                \
	} while (0)

/* Sizes from 2^47 to 2^55 cannot be had because the kernel refuses a mapping
 * larger than RAM + swap (vm.overcommit_memory 0 or 2).  With overcommit
 * "always" and 5-level page tables a 2^47 mapping could succeed and the fake
 * backend would then try to fault it all in: only sizes of 2^56 and more,
 * larger than any user address space, are tried there. */
static size_t smallest_impossible(void)
{
	FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
	int mode = 0;
	if (f) {
		if (fscanf(f, "%d", &mode) != 1)
			mode = 0;
		fclose(f);
	}
	return mode == 1 ? (size_t)1 << 56 : (size_t)1 << 47;
}

Test(input, huge_sizes_are_enomem, .timeout = 60)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	char *keep = rdma_malloc(100), *hkeep = rdma_heap_malloc(h, 100);
	strcpy(keep, "keep");
	strcpy(hkeep, "hkeep");
	const size_t floor = smallest_impossible();
	for (size_t i = 0; i < NHUGE; i++) {
		size_t s = huge_sizes[i];
		if (s < floor)
			continue;
		EXPECT_ENOMEM(rdma_malloc(s), "malloc(%zu)", s);
		EXPECT_ENOMEM(rdma_calloc(1, s), "calloc(1, %zu)", s);
		EXPECT_ENOMEM(rdma_calloc(s, 1), "calloc(%zu, 1)", s);
		EXPECT_ENOMEM(rdma_aligned_alloc(64, s), "aligned_alloc(64, %zu)", s);
		EXPECT_ENOMEM(rdma_aligned_alloc((size_t)4 << 20, s), "aligned_alloc(4M, %zu)", s);
		EXPECT_ENOMEM(rdma_heap_malloc(h, s), "heap_malloc(%zu)", s);
		EXPECT_ENOMEM(rdma_heap_calloc(h, s, 1), "heap_calloc(%zu, 1)", s);
		EXPECT_ENOMEM(rdma_realloc(keep, s), "realloc(p, %zu)", s);
		EXPECT_ENOMEM(rdma_heap_realloc(h, hkeep, s), "heap_realloc(p, %zu)", s);
		EXPECT_ENOMEM(rdma_heap_realloc(h, keep, s), "heap_realloc(p of another heap, %zu)", s);
		void *m = (void *)0x1;
		cr_assert_eq(rdma_posix_memalign(&m, 64, s), ENOMEM, "posix_memalign(64, %zu)", s);
		cr_assert_eq(m, (void *)0x1);
		tried++;
	}
	/* calloc products that overflow size_t. */
	static const size_t pairs[][2] = {
		{ SIZE_MAX, 2 }, { SIZE_MAX / 2 + 1, 2 }, { (size_t)1 << 32, (size_t)1 << 32 },
		{ SIZE_MAX / 3 + 1, 3 }, { SIZE_MAX, SIZE_MAX }, { 65537, SIZE_MAX / 65536 },
	};
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		EXPECT_ENOMEM(rdma_calloc(pairs[i][0], pairs[i][1]), "calloc(%zu, %zu)", pairs[i][0], pairs[i][1]);
		EXPECT_ENOMEM(rdma_heap_calloc(h, pairs[i][1], pairs[i][0]), "heap_calloc(%zu, %zu)", pairs[i][1],
			      pairs[i][0]);
	}
	/* Alignments that are powers of two but cannot be had. */
	for (int b = 47; b < 64; b++) {
		size_t a = (size_t)1 << b;
		if (a < floor)
			continue;
		EXPECT_ENOMEM(rdma_aligned_alloc(a, 1), "aligned_alloc(2^%d, 1)", b);
		EXPECT_ENOMEM(rdma_heap_aligned_alloc(h, a, a), "heap_aligned_alloc(2^%d, 2^%d)", b, b);
		void *m = (void *)0x1;
		cr_assert_eq(rdma_posix_memalign(&m, a, 16), ENOMEM, "posix_memalign(2^%d)", b);
		tried++;
	}
	cr_assert_str_eq(keep, "keep", "a failed realloc changed the block");
	cr_assert_str_eq(hkeep, "hkeep");
	cr_assert_eq(rdma_malloc_keys(keep, 5, NULL, NULL, NULL), 0);
	/* Nothing was left behind: the library still works and holds little. */
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_leq(st.chunk_bytes, (uint64_t)64 << 20, "%llu bytes of chunks held after failed huge requests",
		      (unsigned long long)st.chunk_bytes);
	cr_assert_eq(st.mrs, fake_live_mrs());
	rdma_free(keep);
	rdma_free(hkeep);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	report("huge sizes");
}

/* ------------------------------------------------------ bad alignments */

static void bad_alignment(rdma_heap_t *h, size_t a)
{
	errno = 0;
	cr_assert_null(rdma_aligned_alloc(a, 64), "aligned_alloc(%zu) accepted", a);
	cr_assert_eq(errno, EINVAL, "aligned_alloc(%zu): errno %d", a, errno);
	errno = 0;
	cr_assert_null(rdma_heap_aligned_alloc(h, a, 64), "heap_aligned_alloc(%zu) accepted", a);
	cr_assert_eq(errno, EINVAL);
	void *m = (void *)0x1;
	cr_assert_eq(rdma_posix_memalign(&m, a, 64), EINVAL, "posix_memalign(%zu)", a);
	cr_assert_eq(m, (void *)0x1);
	tried += 3;
}

Test(input, alignments_not_powers_of_two_are_einval)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	for (size_t a = 0; a <= 70000; a++)
		if (a & (a - 1) || a == 0)
			bad_alignment(h, a);
	static const size_t edge[] = { SIZE_MAX, SIZE_MAX - 1, ((size_t)1 << 63) + 1, ((size_t)1 << 63) - 1,
				       ((size_t)1 << 21) + 1, ((size_t)3 << 20), (size_t)PTRDIFF_MAX };
	for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); i++)
		bad_alignment(h, edge[i]);
	for (int i = 0; i < 20000; i++) {
		size_t a = (size_t)next();
		if (a & (a - 1))
			bad_alignment(h, a);
	}
	/* posix_memalign also wants a multiple of sizeof(void *). */
	for (size_t a = 1; a < sizeof(void *); a <<= 1) {
		void *m = (void *)0x1;
		cr_assert_eq(rdma_posix_memalign(&m, a, 64), EINVAL, "posix_memalign(%zu)", a);
		tried++;
	}
	/* Good alignments still work, up to 64 MiB. */
	for (size_t a = 1; a <= ((size_t)64 << 20); a <<= 1) {
		void *p = rdma_heap_aligned_alloc(h, a, 1);
		cr_assert(p && (uintptr_t)p % a == 0, "alignment %zu", a);
		rdma_free(p);
	}
	cr_assert_eq(rdma_heap_destroy(h), 0);
	report("alignments");
}

/* ------------------------------------------------------ foreign pointers */

static int static_var;

static void foreign(const void *p)
{
	uint32_t l = 0xabcd, r = 0xabcd;
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, &l, &r), ENOENT, "%p is not rdmalloc memory", p);
	cr_assert(l == 0xabcd && r == 0xabcd);
	cr_assert_eq(rdma_malloc_keys(p, SIZE_MAX, fake_pd(1), NULL, NULL), ENOENT);
	errno = 0;
	cr_assert_null(rdma_malloc_mr(p, 4096, NULL));
	cr_assert_eq(errno, ENOENT);
	cr_assert_eq(rdma_malloc_usable_size(p), 0);
	tried++;
}

/* @p is rdmalloc's: inside one of the backend's live regions (as of the
 * last snapshot()). */
static struct fake_mr_info mrs[FAKE_MAX_MRS];
static size_t nmrs;
/* The regions of published chunks: a reserve chunk is registered ahead
 * but nobody's memory yet, so lookups of it are ENOENT (reserve.h); its
 * regions are left out, and counted. */
static void snapshot(void)
{
	rdmalloc_reserves_settle();
	size_t n = fake_snapshot(mrs, FAKE_MAX_MRS), reserved = 0;
	nmrs = 0;
	for (size_t i = 0; i < n; i++) {
		if (rdma_malloc_keys(mrs[i].addr, 1, NULL, NULL, NULL) == 0)
			mrs[nmrs++] = mrs[i];
		else
			reserved++;
	}
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_leq(reserved, st.reserve_chunks * RDMA_MALLOC_MAX_PDS, "regions of no published chunk: %zu",
		      reserved);
}

static int ours(uintptr_t p)
{
	size_t n = nmrs;
	for (size_t i = 0; i < n; i++)
		if (p >= (uintptr_t)mrs[i].addr && p - (uintptr_t)mrs[i].addr < mrs[i].len)
			return 1;
	return 0;
}

Test(input, lookups_of_foreign_pointers_are_enoent, .timeout = 60)
{
	int on_stack = 0;
	void *from_libc = malloc(100);
	void *page = mmap(NULL, 1 << 21, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *mine = rdma_malloc((size_t)5 << 20);
	cr_assert(mine && page != MAP_FAILED && none != MAP_FAILED);
	const void *list[] = {
		&on_stack, &static_var, from_libc, page, none, (void *)(uintptr_t)foreign, (void *)1,
		(void *)4095, (void *)(uintptr_t)0x7fffffffffffull, (void *)(uintptr_t)0x800000000000ull,
		(void *)(uintptr_t)0x00ff000000000000ull, (void *)(uintptr_t)0xffff800000000000ull,
		(void *)(uintptr_t)0xffffffffff600000ull, (void *)UINTPTR_MAX, (void *)(UINTPTR_MAX - 4095),
	};
	for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
		foreign(list[i]);
	/* Just outside every region the backend holds. */
	snapshot();
	cr_assert_gt(nmrs, 0);
	for (size_t i = 0; i < nmrs; i++) {
		char *a = mrs[i].addr;
		if (!ours((uintptr_t)a - 1))
			foreign(a - 1);
		if (!ours((uintptr_t)a + mrs[i].len))
			foreign(a + mrs[i].len);
	}
	/* Random addresses over the whole 64-bit space and near our memory:
	 * ENOENT unless inside a region, never a crash. */
	unsigned long hits = 0;
	for (int i = 0; i < 400000; i++) {
		uintptr_t a = (uintptr_t)next();
		if (i & 1)
			a = (uintptr_t)mine + (a % ((size_t)1 << 34)) - ((size_t)1 << 33);
		else if (i & 2)
			a &= ((uintptr_t)1 << 47) - 1;
		if (ours(a)) {
			cr_assert_eq(rdma_malloc_keys((void *)a, 1, NULL, NULL, NULL), 0, "%p is in a region", (void *)a);
			hits++;
			continue;
		}
		cr_assert_eq(rdma_malloc_keys((void *)a, 1, NULL, NULL, NULL), ENOENT, "%p", (void *)a);
		tried++;
	}
	/* Memory of a destroyed heap. */
	rdma_heap_t *h = rdma_heap_create(NULL);
	void *gone = rdma_heap_malloc(h, 1000);
	cr_assert(gone);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	snapshot();
	if (!ours((uintptr_t)gone))
		foreign(gone);
	free(from_libc);
	munmap(page, 1 << 21);
	munmap(none, 4096);
	rdma_free(mine);
	printf("bad input foreign pointers: %lu inputs tried (%lu random addresses fell in our regions)\n", tried,
	       hits);
}

Test(input, free_of_a_foreign_pointer_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	static char not_ours[64];
	rdma_free(not_ours);
}

Test(input, realloc_of_a_foreign_pointer_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	static char not_ours[64];
	void *q = rdma_realloc(not_ours, 10);
	(void)q;
}

/* ---------------------------------------------------- lengths past the end */

Test(input, lengths_past_the_region_are_erange)
{
	static const size_t sizes[] = { 1, 100, 4096, 300000, (size_t)3 << 20, (size_t)9 << 20 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *p = rdma_malloc(sizes[i]);
		cr_assert(p);
		struct ibv_mr *mr = rdma_malloc_mr(p, sizes[i], NULL);
		cr_assert(mr);
		size_t to_end = (size_t)((char *)mr->addr + mr->length - p);
		size_t u = rdma_malloc_usable_size(p);
		/* Past the allocation but inside its region: the key does cover
		 * those bytes (a key covers a whole chunk, doc/security.md). */
		cr_assert_eq(rdma_malloc_keys(p, u + 1 <= to_end ? u + 1 : to_end, NULL, NULL, NULL), 0);
		cr_assert_eq(rdma_malloc_keys(p, to_end, NULL, NULL, NULL), 0);
		static const size_t extra[] = { 1, 2, 4096, (size_t)1 << 40 };
		for (size_t k = 0; k < 4; k++) {
			uint32_t l = 5, r = 5;
			cr_assert_eq(rdma_malloc_keys(p, to_end + extra[k], NULL, &l, &r), ERANGE,
				     "[%p, +%zu) runs %zu bytes past its region", p, to_end + extra[k], extra[k]);
			cr_assert(l == 5 && r == 5);
			errno = 0;
			cr_assert_null(rdma_malloc_mr(p, to_end + extra[k], NULL));
			cr_assert_eq(errno, ERANGE);
			tried += 2;
		}
		cr_assert_eq(rdma_malloc_keys(p, SIZE_MAX, NULL, NULL, NULL), ERANGE);
		cr_assert_eq(rdma_malloc_keys(p, SIZE_MAX - (uintptr_t)p + 1, NULL, NULL, NULL), ERANGE,
			     "a length that wraps the address space");
		char *last = (char *)mr->addr + mr->length - 1;
		cr_assert_eq(rdma_malloc_keys(last, 1, NULL, NULL, NULL), 0);
		cr_assert_eq(rdma_malloc_keys(last, 2, NULL, NULL, NULL), ERANGE);
		cr_assert_eq(rdma_malloc_keys(last, 0, NULL, NULL, NULL), 0, "length 0 is 1");
		tried += 5;
		rdma_free(p);
	}
	report("lengths");
}

/* ------------------------------------------------------------------- PDs */

Test(input, detached_and_foreign_pds)
{
	void *p = rdma_malloc(1000);
	cr_assert(p);
	struct ibv_pd fakes[RDMA_MALLOC_MAX_PDS + 2];
	memset(fakes, 0, sizeof(fakes));
	int on_stack;
	/* PDs never attached: looked up by pointer only, never dereferenced. */
	struct ibv_pd *strangers[] = { fake_pd(2), &fakes[0], (struct ibv_pd *)1, (struct ibv_pd *)&on_stack,
				       (struct ibv_pd *)UINTPTR_MAX, (struct ibv_pd *)(uintptr_t)0xdead0000 };
	for (size_t i = 0; i < sizeof(strangers) / sizeof(strangers[0]); i++) {
		cr_assert_eq(rdma_malloc_keys(p, 1, strangers[i], NULL, NULL), ENODEV, "pd %p", (void *)strangers[i]);
		errno = 0;
		cr_assert_null(rdma_malloc_mr(p, 1, strangers[i]));
		cr_assert_eq(errno, ENODEV);
		cr_assert_eq(rdma_malloc_detach_pd(strangers[i]), ENODEV);
		tried += 3;
	}
	/* Attach twice, detach twice. */
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), EEXIST);
	cr_assert_eq(rdma_malloc_keys(p, 1, fake_pd(1), NULL, NULL), 0);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), 0);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), ENODEV);
	cr_assert_eq(rdma_malloc_keys(p, 1, fake_pd(1), NULL, NULL), ENODEV, "key of a detached PD");
	/* More than RDMA_MALLOC_MAX_PDS. */
	int attached = 1; /* the default PD */
	for (int i = 0; i < RDMA_MALLOC_MAX_PDS + 2; i++) {
		int e = rdma_malloc_attach_pd(&fakes[i]);
		if (attached < RDMA_MALLOC_MAX_PDS) {
			cr_assert_eq(e, 0, "attach %d: %d", i, e);
			attached++;
		} else {
			cr_assert_eq(e, ENOSPC, "attach past the limit: %d", e);
		}
		tried++;
	}
	for (int i = 0; i < RDMA_MALLOC_MAX_PDS - 1; i++)
		cr_assert_eq(rdma_malloc_keys(p, 1, &fakes[i], NULL, NULL), 0);
	for (int i = 0; i < RDMA_MALLOC_MAX_PDS + 2; i++)
		rdma_malloc_detach_pd(&fakes[i]);
	/* The default PD detached: NULL lookups say ENODEV; attached again,
	 * it is the default again. */
	struct ibv_pd *def = rdma_malloc_default_pd();
	cr_assert(def);
	cr_assert_eq(rdma_malloc_detach_pd(def), 0);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, NULL, NULL), ENODEV);
	errno = 0;
	cr_assert_null(rdma_malloc_default_pd());
	cr_assert_eq(errno, ENODEV);
	void *q = rdma_malloc((size_t)8 << 20); /* a chunk with no PD at all */
	cr_assert(q);
	cr_assert_eq(rdma_malloc_keys(q, 1, NULL, NULL, NULL), ENODEV);
	cr_assert_eq(rdma_malloc_attach_pd(def), 0);
	cr_assert_eq(rdma_malloc_default_pd(), def);
	cr_assert_eq(rdma_malloc_keys(p, 1, NULL, NULL, NULL), 0);
	cr_assert_eq(rdma_malloc_keys(q, (size_t)8 << 20, NULL, NULL, NULL), 0, "registered on re-attach");
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.mrs, st.chunks);
	rdma_free(p);
	rdma_free(q);
	report("PDs");
}

/* ------------------------------------------------------- heap handles */

Test(input, bad_heap_handles_and_attributes)
{
	int on_stack;
	static char not_a_heap[256];
	cr_assert_eq(rdma_heap_destroy((rdma_heap_t *)&on_stack), EINVAL);
	cr_assert_eq(rdma_heap_destroy((rdma_heap_t *)not_a_heap), EINVAL);
	cr_assert_eq(rdma_heap_destroy((rdma_heap_t *)1), EINVAL);
	cr_assert_eq(rdma_heap_destroy((rdma_heap_t *)UINTPTR_MAX), EINVAL);
	cr_assert_eq(rdma_heap_destroy(rdma_heap_default()), EINVAL);
	rdma_heap_t *h = rdma_heap_create(NULL), *h2 = rdma_heap_create(NULL);
	cr_assert(h && h2);
	cr_assert_eq(rdma_heap_destroy(h2), 0);
	cr_assert_eq(rdma_heap_destroy(h2), EINVAL, "second destroy");
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(rdma_heap_destroy(h), EINVAL);
	tried = 9;
	/* Every access word: accepted exactly when valid, and used as given. */
	for (unsigned acc = 0; acc < 32; acc++) {
		int valid = !(acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) ||
			    (acc & IBV_ACCESS_LOCAL_WRITE);
		errno = 0;
		rdma_heap_t *x = rdma_heap_create(&(struct rdma_heap_attr){ .access = acc });
		tried++;
		if (!valid) {
			cr_assert_null(x, "access %#x accepted", acc);
			cr_assert_eq(errno, EINVAL);
			continue;
		}
		cr_assert(x, "access %#x refused: %s", acc, strerror(errno));
		cr_assert_eq(rdma_heap_access(x), acc);
		void *p = rdma_heap_malloc(x, 10);
		cr_assert(p);
		cr_assert_eq(fake_find(fake_pd(0), p)->access, acc, "registered with other flags");
		cr_assert_eq(rdma_heap_destroy(x), 0);
	}
	for (unsigned bit = 5; bit < 32; bit++) {
		errno = 0;
		cr_assert_null(rdma_heap_create(&(struct rdma_heap_attr){ .access = (1u << bit) | 1u }),
			       "unknown access bit %u accepted", bit);
		cr_assert_eq(errno, EINVAL);
		tried++;
	}
	/* Flags: bit 0 is reserved; the RDMA_HEAP_* bits this header defines
	 * may work or be refused (a mode the device lacks), and when they work
	 * the heap reports them; any other bit is refused.  (A new RDMA_HEAP_*
	 * flag must be added here.) */
	unsigned known = 0;
#ifdef RDMA_HEAP_HUGEPAGES
	known |= RDMA_HEAP_HUGEPAGES;
#endif
#ifdef RDMA_HEAP_MW_BIND
	known |= RDMA_HEAP_MW_BIND;
#endif
#ifdef RDMA_HEAP_ODP
	known |= RDMA_HEAP_ODP;
#endif
	for (unsigned f = 1; f; f <<= 1) {
		errno = 0;
		rdma_heap_t *x = rdma_heap_create(&(struct rdma_heap_attr){ .access = 0, .flags = f });
		tried++;
		if (f & known) {
			if (x) {
#ifdef RDMA_HEAP_HUGEPAGES
				cr_assert_eq(rdma_heap_flags(x) & f, f, "flag %#x accepted but not kept", f);
#endif
				cr_assert_eq(rdma_heap_destroy(x), 0);
			}
			continue;
		}
		cr_assert_null(x, "unknown flag %#x accepted", f);
		cr_assert_eq(errno, EINVAL, "flags %#x", f);
	}
	report("heap handles and attributes");
}

/* ------------------------------------------------------------------ stats */

Test(input, bad_stats_arguments)
{
	struct rdma_malloc_stats st;
	static const uint32_t versions[] = { 0, 2, 99, UINT32_MAX };
	for (size_t i = 0; i < 4; i++) {
		st.version = versions[i], st.size = sizeof(st);
		cr_assert_eq(rdma_malloc_stats_get(&st), EINVAL);
	}
	/* Smaller and larger structs of whole fields are served (older and
	 * newer headers: tests/abi); these are not. */
	static const uint32_t sizes[] = { 0, 8, 12, sizeof(st) - 4, UINT32_MAX };
	for (size_t i = 0; i < 5; i++) {
		st.version = RDMA_MALLOC_STATS_VERSION, st.size = sizes[i];
		cr_assert_eq(rdma_malloc_stats_get(&st), EINVAL);
	}
	cr_assert_eq(rdma_malloc_stats_print(stdout, (enum rdma_malloc_stats_format)2), EINVAL);
	cr_assert_eq(rdma_malloc_stats_print(stdout, (enum rdma_malloc_stats_format)-1), EINVAL);
	FILE *full = fopen("/dev/full", "w");
	if (full) {
		cr_assert_eq(rdma_malloc_stats_print(full, RDMA_MALLOC_STATS_TEXT), ENOSPC,
			     "a failed write is reported");
		fclose(full);
	}
	tried = 12;
	report("stats arguments");
}

/* --------------------------------------------------------- RDMALLOC_* */

/* Malformed values by parser kind; each must be refused (one warning, the
 * default kept).  Index 2 of each list is what the whole-library test sets.
 * The fuzz target (tests/fuzz) tries millions more. */
__attribute__((unused)) static const char *const bad_loglevel[] = { "", " ", "5", "-1", "10", "warn ", " warn", "w", "loud", "0x1",
					    "2.0", "info,debug", "none\n", "\x01", "\xff\xfe", "%s%n%x", NULL };
__attribute__((unused)) static const char *const bad_device[] = { "", " ", "mlx5 0", "a\tb", "\x7f", "\xc3\xa9", "rxe0\n",
					  "0123456789012345678901234567890123456789012345678901234567890123",
					  NULL };
__attribute__((unused)) static const char *const bad_access[] = { "", ",", "|+,", "REMOTE_WRITE", "REMOTE_ATOMIC", "LOCAL",
					  "LOCAL_WRITE,,bogus", "bogus", "LOCAL_WRITEX", "IBV_ACCESS_",
					  "IBV_ACCESS_REMOTE_WRITE", "ON_DEMAND", "0x1", "1", "REMOTE_READ,MW_BINDX",
					  "LOCAL_WRITE;REMOTE_READ", "local-write", "%s%s%s%n", NULL };
__attribute__((unused)) static const char *const bad_growth[] = { "", " ", "1", "4095", "1K", "1M", "2097151", "-2M", "2M ", "2 M",
					  "0x200000", "2MiBB", "2Q", "1.5G", "18446744073709551616",
					  "99999999999999999999T", "17179869184G", "+2M", NULL };
__attribute__((unused)) static const char *const bad_size[] = { "", " ", "-1", "k", "1KK", "1X", "0x10", "1e9", "18446744073709551616",
					"16777216T", "1 G", "1GiBb", "1iB", "\t1", NULL };
__attribute__((unused)) static const char *const bad_stats[] = { "", " ", "2", "-1", "yes!", "jsonx", "TRUE ", "on\n", "text,json",
					 NULL };
__attribute__((unused)) static const char *const bad_arenas[] = { "", " ", "17", "-1", "0016x", "1 ", "+2", "0x4", "1e1", "4294967297",
					  "0017", "two", NULL };
__attribute__((unused)) static const char *const bad_decay[] = { "", " ", "-2", "1000000001", "1e3", "0x10", "10 ", "+5",
					 "-0", "10ms", "99999999999999999999", "-1 ", NULL };
__attribute__((unused)) static const char *const bad_policy[] = { "", " ", "first_use", "eager ", "lazy", "0", "1",
					  "first-use\n", "eagerly", "FIRST-USE,EAGER", NULL };
__attribute__((unused)) static const char *const bad_big[] = { "", " ", "1", "4095", "1K", "2G", "1073741825", "-64K", "64K ",
				       "0x10000", "64KK", "18446744073709551616", NULL };
__attribute__((unused)) static const char *const bad_bool[] = { "", " ", "2", "-1", "yes!", "t", "y", "enable", "TRUE ", "on\n",
					"json", NULL };
/* A file name is any bytes but control characters, shorter than 256 (and
 * the 1 MiB value below). */
__attribute__((unused)) static const char *const bad_path[] = { "a\nb", "\n", "stats\t%p", "\x7f", "x\x01", NULL };

/* Every option of options.h with the bad values of its parser (a new
 * parser kind fails to compile here until it has its list). */
static const struct {
	const char *name;
	const char *const *bad;
} opts[] = {
#define OPT_(NAME, field, parser, def, doc) { "RDMALLOC_" #NAME, bad_##parser },
	RDMALLOC_OPTIONS(OPT_)
#undef OPT_
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))
static const char *env_name, *env_value;
static const char *one_var(const char *name)
{
	return !strcmp(name, env_name) ? env_value : NULL;
}

Test(input, malformed_option_values_keep_the_defaults, .init = cr_redirect_stderr)
{
	struct rdmalloc_options def, o;
	env_name = "none";
	cr_assert_eq(rdmalloc_options_parse(&def, one_var), 0);
	static char longv[1 << 20];
	memset(longv, 'A', sizeof(longv) - 1);
	for (size_t v = 0; v < NOPTS; v++) {
		env_name = opts[v].name;
		for (size_t i = 0; opts[v].bad[i]; i++) {
			env_value = opts[v].bad[i];
			/* DEVICE "" is the default (first active device), not an error. */
			if (!strcmp(env_name, "RDMALLOC_DEVICE") && !env_value[0])
				continue;
			cr_assert_eq(rdmalloc_options_parse(&o, one_var), 1, "%s=\"%s\" accepted", env_name, env_value);
			cr_assert_eq(memcmp(&o, &def, sizeof(o)), 0, "%s=\"%s\" changed the options", env_name,
				     env_value);
			tried++;
		}
		env_value = longv;
		cr_assert_eq(rdmalloc_options_parse(&o, one_var), 1, "%s=<1 MiB of A> accepted", env_name);
		cr_assert_eq(memcmp(&o, &def, sizeof(o)), 0);
		tried++;
	}
	/* Each refusal is one line naming the variable, at most 64 bytes of the
	 * value quoted. */
	fflush(stderr);
	printf("bad input RDMALLOC_* values: %lu inputs tried\n", tried);
}

/* Every option malformed at once, the library initialising for real: it starts,
 * warns once per variable, and allocates. */
Test(input, library_starts_with_every_option_malformed)
{
	for (size_t v = 0; v < NOPTS; v++)
		setenv(opts[v].name, opts[v].bad[2], 1);
	fake_verbs_install(1);
	FILE *log = tmpfile();
	cr_assert(log);
	fflush(stderr);
	int saved = dup(2);
	dup2(fileno(log), 2);
	void *p = rdma_malloc(1000);
	dup2(saved, 2);
	close(saved);
	cr_assert(p);
	cr_assert_eq(rdma_malloc_keys(p, 1000, NULL, NULL, NULL), 0);
	cr_assert_eq(rdma_heap_access(NULL), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	rdma_free(p);
	char out[4096] = "";
	rewind(log);
	size_t len = fread(out, 1, sizeof(out) - 1, log);
	out[len] = '\0';
	fclose(log);
	int lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += out[i] == '\n';
	cr_assert_eq(lines, (int)NOPTS, "want one warning per malformed variable, got:\n%s", out);
	for (size_t v = 0; v < NOPTS; v++)
		cr_assert(strstr(out, opts[v].name), "no warning names %s:\n%s", opts[v].name, out);
}
