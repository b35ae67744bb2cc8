/* SPDX-License-Identifier: MIT */
/*
 * test_locks.c - the lock table's order check (src/sys/lock.h): taking a lock
 * while holding one that comes later aborts with both names. A release build
 * (NDEBUG) compiles the check out; there the only test is that it is out.
 */
#include <criterion/criterion.h>
#include <signal.h>

#include "lock.h"

#ifdef NDEBUG
Test(locks, check_is_compiled_out)
{
	cr_assert(!rdmalloc_lock_checked());
}
#else

Test(locks, check_is_compiled_in)
{
	cr_assert(rdmalloc_lock_checked());
	cr_assert_str_eq(rdmalloc_lock_name(RDMALLOC_LOCK_PD), "PD");
}

Test(locks, documented_order_passes)
{
	for (int i = 0; i < RDMALLOC_LOCK_COUNT; i++)
		rdmalloc_lock((enum rdmalloc_lock_id)i);
	for (int i = RDMALLOC_LOCK_COUNT - 1; i >= 0; i--)
		rdmalloc_unlock((enum rdmalloc_lock_id)i);
}

/* The inversion of issue 10, item 5: the heap lock under the PD lock. */
Test(locks, inversion_aborts, .signal = SIGABRT)
{
	rdmalloc_lock(RDMALLOC_LOCK_PD);
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
}

Test(locks, leaf_then_outer_aborts, .signal = SIGABRT)
{
	rdmalloc_lock(RDMALLOC_LOCK_CHUNK);
	rdmalloc_lock(RDMALLOC_LOCK_INIT);
}

Test(locks, relock_aborts, .signal = SIGABRT)
{
	rdmalloc_lock(RDMALLOC_LOCK_ODP);
	rdmalloc_lock(RDMALLOC_LOCK_ODP);
}
#endif
