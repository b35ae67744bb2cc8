/* SPDX-License-Identifier: MIT */
/*
 * test_hugepages.c - RDMA_HEAP_HUGEPAGES and RDMALLOC_HUGEPAGES: chunks on
 * explicit huge pages when the system has them, else THP on 2 MiB-aligned,
 * 2 MiB-rounded chunks, else 4 KiB pages; every fallback logged once and
 * counted; the registration covers the whole rounded mapping.
 * (Explicit huge pages are proven in the Soft-RoCE guest, which reserves
 * some: tests/e2e/test_modes.c.  This host has none.)
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "fake_verbs.h"
#include "stderr_said.h"
#include "reserve.h"
#include "hugepage.h"
#include "options.h"
#include "rdma_malloc.h"
#include "addrmap.h"

#define MiB ((size_t)1 << 20)

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static int thp_enabled(void)
{
	char buf[128] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}
	return buf[0] && !strstr(buf, "[never]");
}

/* The VmFlags line of the mapping holding @p has flag @flag ("hg" is
 * MADV_HUGEPAGE, "ht" a hugetlb mapping). */
static int vma_has_flag(const void *p, const char *flag)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	cr_assert(f);
	char line[512];
	int in = 0, found = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char c;
		if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3) {
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (in && !strncmp(line, "VmFlags:", 8)) {
			char pat[8];
			snprintf(pat, sizeof(pat), " %s", flag);
			found = strstr(line, pat) != NULL;
			break;
		}
	}
	fclose(f);
	return found;
}

/* Every chunk of the test: aligned, rounded, registered whole. */
static struct rdmalloc_chunk *check_chunk(void *p, int kind)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	cr_assert(c, "%p in no chunk", p);
	cr_assert_eq(c->page_kind, kind, "chunk %p: page kind %d, want %d", (void *)c->base, c->page_kind, kind);
	size_t page = kind == RDMALLOC_PAGES_4K ? 4096 : 2 * MiB;
	cr_assert_eq(c->base % (2 * MiB), 0, "chunk base %p not 2 MiB aligned", (void *)c->base);
	cr_assert_eq(c->map_size % page, 0, "mapping of %zu bytes not whole pages of %zu", c->map_size, page);
	cr_assert_geq(c->map_size, c->size);
	cr_assert_lt(c->map_size - c->size, page, "mapping rounded by more than a page");
	const struct fake_mr_info *m = fake_find(fake_pd(0), p);
	cr_assert(m);
	cr_assert_eq((uintptr_t)m->addr, c->base);
	cr_assert_eq(m->len, c->map_size, "registration covers %zu bytes of a %zu-byte mapping", m->len,
		     c->map_size);
	return c;
}

Test(hugepages, rounding)
{
	cr_assert_eq(rdmalloc_huge_round(5 * MiB / 2, RDMALLOC_PAGES_2M), 4 * MiB);
	cr_assert_eq(rdmalloc_huge_round(2 * MiB, RDMALLOC_PAGES_2M), 2 * MiB);
	cr_assert_eq(rdmalloc_huge_round(2 * MiB + 1, RDMALLOC_PAGES_THP), 4 * MiB);
	cr_assert_eq(rdmalloc_huge_round(((size_t)1 << 30) + 1, RDMALLOC_PAGES_1G), (size_t)2 << 30);
	cr_assert_eq(rdmalloc_huge_round(4097, RDMALLOC_PAGES_4K), 8192);
	cr_assert_eq(rdmalloc_huge_round(SIZE_MAX - 5, RDMALLOC_PAGES_2M), 0, "overflow must say 0");
}

Test(hugepages, option_parses)
{
	int v = 7;
	const char *on[] = { "1", "on", "YES", "true" }, *off[] = { "0", "off", "No", "FALSE" };
	for (size_t i = 0; i < 4; i++) {
		cr_assert_eq(rdmalloc_parse_bool(on[i], &v), 0, "%s", on[i]);
		cr_assert_eq(v, 1);
		cr_assert_eq(rdmalloc_parse_bool(off[i], &v), 0, "%s", off[i]);
		cr_assert_eq(v, 0);
	}
	const char *bad[] = { "", "2", "maybe", "1 ", "onn", "json" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 7;
		cr_assert_eq(rdmalloc_parse_bool(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
		cr_assert_eq(v, 7);
	}
	struct rdmalloc_options o;
	setenv("RDMALLOC_HUGEPAGES", "yes", 1);
	cr_assert_eq(rdmalloc_options_parse(&o, (rdmalloc_getenv_fn)getenv), 0);
	cr_assert_eq(o.hugepages, 1);
	unsetenv("RDMALLOC_HUGEPAGES");
	cr_assert_eq(rdmalloc_options_parse(&o, (rdmalloc_getenv_fn)getenv), 0);
	cr_assert_eq(o.hugepages, 0, "off by default");
}

Test(hugepages, bad_option_warns, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_HUGEPAGES", "lots", 1);
	struct rdmalloc_options o;
	cr_assert_eq(rdmalloc_options_parse(&o, (rdmalloc_getenv_fn)getenv), 1);
	cr_assert_eq(o.hugepages, 0);
	fflush(stderr);
	cr_assert_stderr_eq_str("rdmalloc: warning: RDMALLOC_HUGEPAGES=\"lots\" is not valid (default heap on "
				"huge pages (RDMA_HEAP_HUGEPAGES): 0 or 1); keeping the default \"0\"\n");
}

Test(hugepages, plain_heap_is_unchanged)
{
	fake_verbs_install(1);
	void *p = rdma_malloc(3 * MiB);
	struct rdmalloc_chunk *c = check_chunk(p, RDMALLOC_PAGES_4K);
	cr_assert_eq(c->map_size, c->size, "a plain chunk must not be rounded");
	cr_assert_eq(rdma_heap_flags(NULL), 0);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.hugepage_fallbacks + st.thp_chunks + st.hugetlb_chunks, 0);
	rdma_free(p);
}

/* No explicit huge pages (forced, whatever the host has): THP, logged once. */
Test(hugepages, falls_back_to_thp_once, .init = cr_redirect_stderr)
{
	if (!thp_enabled())
		cr_skip_test("transparent huge pages are disabled on this host");
	fake_verbs_install(1);
	rdmalloc_huge_test_disable(1, 0);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .flags = RDMA_HEAP_HUGEPAGES });
	cr_assert(h, "%s", strerror(errno));
	cr_assert_eq(rdma_heap_flags(h), RDMA_HEAP_HUGEPAGES);
	void *small = rdma_heap_malloc(h, 100);
	void *big[6];
	for (int i = 0; i < 6; i++) { /* chunks of jemalloc's series: 2, 2.5, 3 ... MiB */
		big[i] = rdma_heap_malloc(h, (size_t)(i + 1) * MiB + 12345);
		cr_assert(big[i]);
		memset(big[i], i, (size_t)(i + 1) * MiB + 12345);
	}
	check_chunk(small, RDMALLOC_PAGES_THP);
	cr_assert(vma_has_flag(small, "hg"), "THP chunk not madvised MADV_HUGEPAGE");
	for (int i = 0; i < 6; i++)
		check_chunk(big[i], RDMALLOC_PAGES_THP);
	struct rdma_malloc_stats st = stats();
	uint64_t heap_chunks = st.thp_chunks;
	cr_assert_geq(heap_chunks, 2);
	/* Reserve chunks mispredicted and released were made with a fallback too. */
	cr_assert_eq(st.hugepage_fallbacks, heap_chunks + st.reserve_discards, "one fallback counted per chunk");
	cr_assert_geq(st.fallbacks, heap_chunks);
	cr_assert_eq(st.registered_bytes, st.chunk_bytes, "registrations cover the rounded mappings");
	for (int i = 0; i < 6; i++)
		rdma_free(big[i]);
	rdma_free(small);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	st = stats();
	cr_assert_eq(st.thp_chunks, 0, "gauge after destroy");
	char buf[4096];
	stderr_said(buf, sizeof(buf));
	const char *first = strstr(buf, "no explicit huge pages");
	cr_assert(first, "fallback not logged: \"%s\"", buf);
	cr_assert(strstr(first, "transparent huge pages"), "log does not say what it fell back to: %s", buf);
	cr_assert_null(strstr(first + 1, "no explicit huge pages"), "fallback logged twice: %s", buf);
}

/* Neither explicit nor transparent huge pages: 4 KiB pages, not rounded. */
Test(hugepages, falls_back_to_small_pages, .init = cr_redirect_stderr)
{
	fake_verbs_install(1);
	rdmalloc_huge_test_disable(1, 1);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .flags = RDMA_HEAP_HUGEPAGES });
	void *p = rdma_heap_malloc(h, 3 * MiB);
	struct rdmalloc_chunk *c = check_chunk(p, RDMALLOC_PAGES_4K);
	cr_assert_eq(c->map_size, rdmalloc_huge_round(c->size, RDMALLOC_PAGES_4K));
	cr_assert(!vma_has_flag(p, "hg"));
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.thp_chunks, 0);
	cr_assert_geq(st.hugepage_fallbacks, 1);
	char buf[4096];
	stderr_said(buf, sizeof(buf));
	cr_assert(strstr(buf, "using 4 KiB pages"), "4 KiB fallback not said: \"%s\"", buf);
	rdma_free(p);
}

Test(hugepages, default_heap_from_the_option)
{
	if (!thp_enabled())
		cr_skip_test("transparent huge pages are disabled on this host");
	setenv("RDMALLOC_HUGEPAGES", "1", 1);
	setenv("RDMALLOC_LOG_LEVEL", "error", 1);
	fake_verbs_install(1);
	rdmalloc_huge_test_disable(1, 0);
	cr_assert_eq(rdma_heap_flags(NULL), RDMA_HEAP_HUGEPAGES);
	void *p = rdma_malloc(5 * MiB / 2);
	check_chunk(p, RDMALLOC_PAGES_THP);
	rdma_free(p);
}

/* With explicit 2 MiB pages reserved (not on this host; the guest suite
 * reserves some), chunks come from them. */
Test(hugepages, explicit_pages_when_reserved)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long free_pages = 0, size_kb = 0;
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Free: %ld", &free_pages);
		sscanf(line, "Hugepagesize: %ld", &size_kb);
	}
	if (f)
		fclose(f);
	if (free_pages < 8 || size_kb != 2048)
		cr_skip_test("fewer than 8 free 2 MiB huge pages (HugePages_Free %ld)", free_pages);
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .flags = RDMA_HEAP_HUGEPAGES });
	void *p = rdma_heap_malloc(h, 3 * MiB);
	check_chunk(p, RDMALLOC_PAGES_2M);
	cr_assert(vma_has_flag(p, "ht"), "not a hugetlb mapping");
	cr_assert_geq(stats().hugetlb_chunks, 1);
	rdma_free(p);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().hugetlb_chunks, 0);
}

/* RDMALLOC_MAX_REGISTERED counts the rounded mapping. */
Test(hugepages, limit_counts_the_mapping, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_MAX_REGISTERED", "40M", 1);
	fake_verbs_install(1);
	rdmalloc_huge_test_disable(1, 0);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .flags = RDMA_HEAP_HUGEPAGES });
	for (int i = 0; i < 40; i++)
		if (!rdma_heap_malloc(h, 5 * MiB / 2))
			break;
	struct rdma_malloc_stats st = stats();
	cr_assert_leq(st.chunk_bytes, 40 * MiB, "held %lu bytes past the limit", (unsigned long)st.chunk_bytes);
	cr_assert_gt(st.limit_refusals, 0);
}

/* 1 GiB pages, reserved for the test where it may (root): restored after. */
#define GIB_PAGES "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
static long gib_pages_before = -1;

/* The pool's size, after setting it to @set first unless @set < 0. */
static long gib_pages(long set)
{
	FILE *f;
	if (set >= 0) {
		if (!(f = fopen(GIB_PAGES, "w")))
			return -1;
		int ok = fprintf(f, "%ld\n", set) > 0;
		if (fclose(f) != 0 || !ok)
			return -1;
	}
	long n = -1;
	if (!(f = fopen(GIB_PAGES, "r")))
		return -1;
	if (fscanf(f, "%ld", &n) != 1)
		n = -1;
	fclose(f);
	return n;
}

static void gib_pages_restore(void)
{
	if (gib_pages_before >= 0)
		gib_pages(gib_pages_before);
}

/* RDMALLOC_MAX_REGISTERED counts a chunk on 1 GiB pages whole: one that
 * would pass it goes on 2 MiB pages (or their fallbacks) instead. */
Test(hugepages, limit_counts_a_1g_mapping, .init = cr_redirect_stderr, .fini = gib_pages_restore)
{
	gib_pages_before = gib_pages(-1);
	if (gib_pages_before < 0 || gib_pages(gib_pages_before + 2) < gib_pages_before + 2) {
		gib_pages_restore();
		cr_skip_test("cannot reserve two 1 GiB huge pages (%s)", GIB_PAGES);
	}
	setenv("RDMALLOC_MAX_REGISTERED", "1536M", 1);
	fake_verbs_install(1);
	/* Within the limit: a chunk of 1 GiB on one 1 GiB page. */
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .flags = RDMA_HEAP_HUGEPAGES });
	void *p = rdma_heap_malloc(h, 1024 * MiB);
	cr_assert(p, "rdma_heap_malloc: %s", strerror(errno));
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	cr_assert(c && c->page_kind == RDMALLOC_PAGES_1G && c->map_size == 1024 * MiB, "not on a 1 GiB page");
	cr_assert_eq(stats().chunk_bytes, 1024 * MiB);
	rdma_free(p);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().chunk_bytes, 0);
	/* 1 GiB + 64 MiB: two 1 GiB pages would pass the limit. */
	h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE, .flags = RDMA_HEAP_HUGEPAGES });
	p = rdma_heap_malloc(h, 1088 * MiB);
	cr_assert(p, "rdma_heap_malloc: %s", strerror(errno));
	struct rdma_malloc_stats st = stats();
	cr_assert_leq(st.chunk_bytes, 1536 * MiB, "held %lu bytes past the limit", (unsigned long)st.chunk_bytes);
	c = rdmalloc_addrmap_find(p);
	cr_assert(c && c->page_kind != RDMALLOC_PAGES_1G && c->map_size == 1088 * MiB, "kind %d, %zu bytes mapped",
		  c ? c->page_kind : -1, c ? c->map_size : 0);
	rdma_free(p);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}
