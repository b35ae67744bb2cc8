/* SPDX-License-Identifier: MIT */
/*
 * test_maptrack.c - in a build with -Dfault_injection=true, an unmap or a
 * discard (MADV_DONTNEED) of memory the library did not map, or has
 * unmapped already, aborts on the spot (src/sys/maptrack.h): what a chunk
 * released twice, or given back after its release, would do to memory that
 * is someone else's by then.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <signal.h>
#include <sys/mman.h>

#include "os.h"

#define PG 4096

Test(maptrack, unmap_of_memory_the_library_did_not_map_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	void *m = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(m, MAP_FAILED);
	rdmalloc_os_unmap(m, PG); /* the program's, not the library's */
}

Test(maptrack, second_unmap_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	char *p = rdmalloc_os_map(3 * PG);
	cr_assert(p);
	rdmalloc_os_unmap(p, 3 * PG);
	rdmalloc_os_unmap(p + PG, PG);
}

Test(maptrack, discard_after_unmap_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	char *p = rdmalloc_os_map(2 * PG);
	cr_assert(p);
	rdmalloc_os_unmap(p, 2 * PG);
	rdmalloc_os_dontneed(p, PG);
}

Test(maptrack, discard_past_the_end_of_a_mapping_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	char *p = rdmalloc_os_map(2 * PG);
	cr_assert(p);
	rdmalloc_os_dontneed(p + PG, 2 * PG);
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
