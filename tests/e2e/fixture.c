/* SPDX-License-Identifier: MIT */
/* fixture.c - the per-test fixture: skip without a device, open the pair. */
#include "e2e.h"

struct e2e_pair e2e;

void e2e_setup(void)
{
	int err = e2e_pair_open(&e2e, NULL);
	if (err == ENODEV && !e2e.pd)
		cr_skip_test(E2E_SKIP_MSG);
	cr_assert(err == 0, "cannot set up the loopback QP pair: %s", e2e.err);
}

void e2e_teardown(void)
{
	e2e_pair_close(&e2e);
}
