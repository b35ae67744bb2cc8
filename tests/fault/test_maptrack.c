/* SPDX-License-Identifier: MIT */
/*
 * test_maptrack.c - in a build with -Dfault_injection=true, an unmap, a
 * remap or a discard (MADV_DONTNEED) of memory the library did not map, or
 * has unmapped already, aborts on the spot, naming the call
 * (src/sys/maptrack.h): what a chunk released twice, or given back after
 * its release, would do to memory that is someone else's by then.  The
 * table follows a remap, and a call the kernel refuses leaves the range
 * the library's.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>

#include "../preload/in_child.h"
#include "../unit/stderr_said.h"
#include "os.h"
#include "rdma_malloc.h"

#define PG 4096

static uint64_t unmap_failures(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st.unmap_failures;
}

/* @fn(@arg), run in a child, aborts saying that @call's range is not the
 * library's. */
static void aborts_naming(void (*fn)(void *), void *arg, const char *call)
{
	char out[1024];
	int st = in_child(fn, arg, out, sizeof(out));
	cr_assert(aborted_saying(st, out, call, "is not the library's"),
		  "status %#x, said: %s", (unsigned)st, out);
}

static void unmap_foreign(void *unused)
{
	(void)unused;
	void *m = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m != MAP_FAILED)
		rdmalloc_os_unmap(m, PG); /* the program's, not the library's */
}

Test(maptrack, unmap_of_memory_the_library_did_not_map_aborts)
{
	aborts_naming(unmap_foreign, NULL, "munmap of ");
}

static void unmap_twice(void *unused)
{
	(void)unused;
	char *p = rdmalloc_os_map(3 * PG);
	if (!p)
		return;
	rdmalloc_os_unmap(p, 3 * PG);
	rdmalloc_os_unmap(p + PG, PG);
}

Test(maptrack, second_unmap_aborts)
{
	aborts_naming(unmap_twice, NULL, "munmap of ");
}

static void discard_after_unmap(void *unused)
{
	(void)unused;
	char *p = rdmalloc_os_map(2 * PG);
	if (!p)
		return;
	rdmalloc_os_unmap(p, 2 * PG);
	rdmalloc_os_dontneed(p, PG);
}

Test(maptrack, discard_after_unmap_aborts)
{
	aborts_naming(discard_after_unmap, NULL, "MADV_DONTNEED of ");
}

static void discard_past_the_end(void *unused)
{
	(void)unused;
	char *p = rdmalloc_os_map(2 * PG);
	if (p)
		rdmalloc_os_dontneed(p + PG, 2 * PG);
}

Test(maptrack, discard_past_the_end_of_a_mapping_aborts)
{
	aborts_naming(discard_past_the_end, NULL, "MADV_DONTNEED of ");
}

static void remap_foreign(void *unused)
{
	(void)unused;
	void *m = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m != MAP_FAILED)
		rdmalloc_os_remap(m, 2 * PG, 4 * PG);
}

Test(maptrack, remap_of_memory_the_library_did_not_map_aborts)
{
	aborts_naming(remap_foreign, NULL, "mremap of ");
}

/* After a remap the new range is the library's and the old one (@old)
 * is not. */
static void discard_the_old_range(void *old)
{
	rdmalloc_os_dontneed(old, PG);
}

Test(maptrack, a_remap_moves_the_range)
{
	char *p = rdmalloc_os_map(2 * PG);
	cr_assert(p);
	/* The page after it taken, so that growing must move. */
	void *block = mmap(p + 2 * PG, PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	char *q = rdmalloc_os_remap(p, 2 * PG, 8 * PG);
	cr_assert(q, "mremap: %s", strerror(errno));
	if (block == p + 2 * PG)
		cr_assert_neq(q, p, "grown in place over a mapped page");
	cr_assert_eq(rdmalloc_os_dontneed(q, 8 * PG), 0);
	if (q != p) {
		aborts_naming(discard_the_old_range, p, "MADV_DONTNEED of ");
	}
	rdmalloc_os_unmap(q, 8 * PG);
	if (block == p + 2 * PG)
		munmap(block, PG);
}

/* A remap or an unmap the kernel refuses leaves the range mapped, and the
 * library's: a later unmap of it is not taken for a stray one. */
Test(maptrack, refused_calls_leave_the_range_the_librarys, .init = cr_redirect_stderr)
{
	char *p = rdmalloc_os_map(3 * PG);
	cr_assert(p);
	errno = 0;
	cr_assert_null(rdmalloc_os_remap(p, 3 * PG, SIZE_MAX / 2), "a remap to half the address space");
	cr_assert(errno == ENOMEM || errno == EINVAL, "errno %d", errno);
	cr_assert_eq(rdmalloc_os_dontneed(p, 3 * PG), 0);
	/* munmap refuses an address that is not page-aligned (EINVAL). */
	uint64_t failures = unmap_failures();
	rdmalloc_os_unmap(p + 1, PG);
	char said[1024];
	cr_assert(strstr(stderr_said(said, sizeof(said)), "munmap("), "the refusal was not said: %s", said);
	cr_assert_eq(unmap_failures(), failures + 1, "the refusal was not counted");
	p[2 * PG] = 1; /* still mapped */
	rdmalloc_os_unmap(p, 3 * PG);
}

/* What is left of a mapping after a partial unmap stays the library's, the
 * rest does not. */
Test(maptrack, partial_unmaps_keep_the_rest, .init = cr_redirect_stderr)
{
	char *p = rdmalloc_os_map(4 * PG);
	cr_assert(p);
	rdmalloc_os_unmap(p + PG, PG);
	cr_assert_eq(rdmalloc_os_dontneed(p, PG), 0);
	cr_assert_eq(rdmalloc_os_dontneed(p + 2 * PG, 2 * PG), 0);
	rdmalloc_os_unmap(p, PG);
	rdmalloc_os_unmap(p + 2 * PG, 2 * PG);
}
