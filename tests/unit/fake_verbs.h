/* SPDX-License-Identifier: MIT */
/*
 * fake_verbs.h - a verbs backend for unit-testing the allocator's logic on a
 * host without a device.  It "pins" like the real thing (faults every page
 * in), records every live region, and fails the n-th registration on
 * request.  It proves bookkeeping, never that a NIC can use the keys: the
 * Soft-RoCE suite (tests/e2e) does that.
 */
#ifndef FAKE_VERBS_H
#define FAKE_VERBS_H

#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct ibv_mr;

#define FAKE_MAX_MRS 4096

struct fake_mr_info {
	struct ibv_mr *mr;
	struct ibv_pd *pd;
	void *addr;
	size_t len;
	unsigned access;
};

/* Install the fake (before the library initialises).  @with_device 0 makes
 * opening the default PD fail (no device). */
void fake_verbs_install(int with_device);
/* The fake PDs: 0 is the default, others are for attach tests. */
struct ibv_pd *fake_pd(int i);
/* Fail registrations number n, n+1, ... (counting from 1); 0 = never. */
void fake_fail_reg_from(unsigned long n);
/* Fail @count registrations from number n on, then succeed again. */
void fake_fail_reg(unsigned long n, unsigned long count);
/* Also allocate from the private jemalloc inside every registration, as
 * libibverbs does when rdmalloc is the process allocator. */
void fake_reenter_jemalloc(int on);
unsigned long fake_reg_calls(void);
size_t fake_live_mrs(void);
/* The live region of @pd containing @p, or NULL. */
const struct fake_mr_info *fake_find(struct ibv_pd *pd, const void *p);
/* Copy of every live region; returns the count. */
size_t fake_snapshot(struct fake_mr_info *out, size_t max);

#endif
