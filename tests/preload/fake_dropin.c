/* SPDX-License-Identifier: MIT */
/*
 * fake_dropin.c - the drop-in over the fake backend (tests/unit/fake_verbs.c):
 * installed before the drop-in's constructor (priority 101) initialises the
 * library, so that a host without a device registers, and allocates inside
 * registration as libibverbs does (more, so that the allocator must often
 * grow while a hook runs).  For the fork tests (issue 10, item 1).
 */
#include "fake_verbs.h"

/* 100 is below every priority a program may use, and above none we need. */
#pragma GCC diagnostic ignored "-Wprio-ctor-dtor"
__attribute__((constructor(100))) static void fake_dropin_init(void)
{
	fake_verbs_install(1);
	fake_reg_mallocs((size_t)4 << 20);
}
