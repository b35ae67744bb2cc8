/* SPDX-License-Identifier: MIT */
/*
 * fault.h - test-only fault injection (-Dfault_injection=true).
 *
 * Each fault site counts its calls; a test arms a site to fail the n-th call
 * (and optionally the next ones, or one call in k at random) with an errno of
 * its choice.  Without -Dfault_injection=true (the default, and always in a
 * release build) rdmalloc_fault_hit() is the constant 0, the sites compile to
 * the plain call and this file declares nothing else.
 *
 * Sites:
 *  REG       ibv_reg_mr() in rdmalloc_reg_mr() (chunk creation, PD attach);
 *  DEREG     ibv_dereg_mr() in rdmalloc_dereg_mr() (heap destroy, PD detach);
 *            a failed deregistration leaves the region registered, exactly
 *            as when the real call fails;
 *  MMAP      the mmap of an ordinary chunk in rdmalloc_os_map_aligned() (os.c);
 *  HUGEPAGE  the mmap of an explicit huge-page chunk in hugetlb_map()
 *            (hugepage.c): a failure falls back as doc/modes.md says;
 *  THREAD    a new thread of ours moving to the scheduling, nice value
 *            and CPUs of the process at load (os.c, place_self), as when
 *            the kernel refuses them: it keeps its starter's;
 *  POPULATE  madvise(MADV_POPULATE_WRITE) of a slice of a big chunk the
 *            crew faults in (os.c): EINVAL is a kernel before 5.14.
 *  META      rdmalloc_os_map(), rdmalloc_os_reserve() and rdmalloc_os_remap()
 *            (os.c): the library's own tables (chunk descriptors, the
 *            address and auto maps' leaves, idle maps, counter slots, the
 *            window and key-change tables, the drop-in's nest and elided
 *            records), never a chunk.
 *
 * Pause points, where a test runs a function of its own in the library's
 * thread (to widen a race window), holding no lock of ours:
 *  RELIEVED  rdmalloc_relieve() (hold.c), after memory went back and
 *            before the caller's retry.
 *  THREAD_START  a new thread of ours (os.c), placed and not yet counted
 *            as running: fork() waits for it.
 *  FIRST_USE  a key lookup that found no registration (keys.c), after its
 *            lock-free look for the chunk and before the look under the
 *            PD lock.
 */
#ifndef RDMALLOC_FAULT_H
#define RDMALLOC_FAULT_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

enum rdmalloc_fault_site {
	RDMALLOC_FAULT_REG = 0,
	RDMALLOC_FAULT_DEREG,
	RDMALLOC_FAULT_MMAP,
	RDMALLOC_FAULT_HUGEPAGE,
	RDMALLOC_FAULT_THREAD,
	RDMALLOC_FAULT_POPULATE,
	RDMALLOC_FAULT_META,
	RDMALLOC_FAULT_SITES
};

/* RELIEVED: a registration's relief done, before its retry (reg/hold.c);
 * HEAPS_RELIEVED: an allocation's, before its retry (heap/heap.c);
 * THREAD_START: a new thread of ours before it runs its function (os.c);
 * FIRST_USE: a key lookup's second look, between its lock-free look and
 * the one under the PD lock (api/keys.c). */
enum rdmalloc_pause_point {
	RDMALLOC_PAUSE_RELIEVED = 0,
	RDMALLOC_PAUSE_HEAPS_RELIEVED,
	RDMALLOC_PAUSE_THREAD_START,
	RDMALLOC_PAUSE_FIRST_USE,
	RDMALLOC_PAUSE_POINTS
};

#ifdef RDMALLOC_FAULT_INJECTION

/* At a pause point: run the test's function, if one is set. */
void rdmalloc_fault_pause(enum rdmalloc_pause_point at);
/* Run @fn at @at from now on (NULL: nothing). */
RDMALLOC_TESTABLE void rdmalloc_fault_set_pause(enum rdmalloc_pause_point at, void (*fn)(void));
#define RDMALLOC_TEST_PAUSE(at) rdmalloc_fault_pause(at)

/* At a site: 0 to go on, or the errno value the call must fail with.
 * @addr/@len describe the call (recorded for the tests). */
int rdmalloc_fault_hit(enum rdmalloc_fault_site site, const void *addr, size_t len);

/* A record of one injected fault. */
struct rdmalloc_fault_rec {
	uintptr_t addr;
	size_t len;
	unsigned long call; /* its number, counted from the last arm (1 = first) */
};

/*
 * Fail calls number @first .. @first+@count-1 of @site, counted from now
 * (1 = the next call); @count 0 = every call from @first on.  @err is the
 * errno value (0 = EIO for DEREG, ENOMEM for the others).  Resets
 * the site's call and fault counts and its records.  @first 0 disarms.
 */
RDMALLOC_TESTABLE void rdmalloc_fault_arm(enum rdmalloc_fault_site site, unsigned long first,
					  unsigned long count, int err);
/* Fail each call of @site with probability 1/@one_in, decided by a hash of
 * (@seed, call number): reproducible for one interleaving.  Resets counts. */
RDMALLOC_TESTABLE void rdmalloc_fault_arm_random(enum rdmalloc_fault_site site, unsigned one_in,
						 uint64_t seed, int err);
/* Disarm every site (counts are kept). */
RDMALLOC_TESTABLE void rdmalloc_fault_disarm_all(void);
/* Calls of @site and faults injected at it since it was last armed. */
RDMALLOC_TESTABLE unsigned long rdmalloc_fault_calls(enum rdmalloc_fault_site site);
RDMALLOC_TESTABLE unsigned long rdmalloc_fault_injected(enum rdmalloc_fault_site site);
/* Faults injected at @site over the life of the process. */
RDMALLOC_TESTABLE unsigned long rdmalloc_fault_injected_total(enum rdmalloc_fault_site site);
/* Copy up to @max records of the most recent faults of @site since it was
 * last armed (at most RDMALLOC_FAULT_RECORDS kept); returns the count. */
#define RDMALLOC_FAULT_RECORDS 64
RDMALLOC_TESTABLE size_t rdmalloc_fault_records(enum rdmalloc_fault_site site,
						struct rdmalloc_fault_rec *out, size_t max);
/* 1: this library was built with fault injection. */
RDMALLOC_TESTABLE int rdmalloc_fault_enabled(void);

#else

#define rdmalloc_fault_hit(site, addr, len) 0
#define RDMALLOC_TEST_PAUSE(at) ((void)0)

#endif

#endif
