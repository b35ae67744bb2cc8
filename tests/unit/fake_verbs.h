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

#include <pthread.h>
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
/* The errno of those failures (ENOMEM unless set; 0: back to ENOMEM). */
void fake_fail_reg_errno(int err);
/* Also allocate from the private jemalloc inside every registration, as
 * libibverbs does when rdmalloc is the process allocator. */
void fake_reenter_jemalloc(int on);
/* Also malloc() (the process allocator: the drop-in's) inside every
 * registration, buffers of 4 KiB up to @max bytes, the last 8 kept: what
 * libibverbs does, enlarged so that the allocator must often grow while a
 * hook runs.  0: off. */
void fake_reg_mallocs(size_t max);
unsigned long fake_reg_calls(void);
size_t fake_live_mrs(void);
/* The live region of @pd containing @p, or NULL. */
const struct fake_mr_info *fake_find(struct ibv_pd *pd, const void *p);
/* Copy of every live region; returns the count. */
size_t fake_snapshot(struct fake_mr_info *out, size_t max);

/* ---- re-registration and memory windows (optional backend ops) ---- */

enum fake_rereg_mode {
	FAKE_REREG_KEEP_KEYS = 0, /* in place, keys unchanged (rxe) */
	FAKE_REREG_NEW_KEYS,      /* in place, new keys (a driver may) */
	FAKE_REREG_REFUSE,        /* EOPNOTSUPP, old region intact */
	FAKE_REREG_BROKEN,        /* command error: the old region is unusable */
};
void fake_set_rereg(enum fake_rereg_mode mode);
unsigned long fake_rereg_calls(void);

struct fake_mw_info {
	struct ibv_mw *mw;
	struct ibv_qp *qp;    /* type 2: the QP it is bound on */
	struct ibv_mr *mr;
	uint64_t addr;
	size_t len;
	unsigned access;
	int bound;
};
/* The fake's record of @mw (NULL if not allocated). */
const struct fake_mw_info *fake_mw(const struct ibv_mw *mw);
size_t fake_live_mws(void);
/* Whether a peer's access of [addr, addr+len) with @rkey and @access would
 * pass the window checks (the rkey names a bound window covering it). */
int fake_mw_allows(uint32_t rkey, uint64_t addr, size_t len, unsigned access);
/* Make the next registration wait, inside the backend, until released:
 * to run something while a chunk is being registered. */
void fake_block_next_reg(void);
/* The same, for the next registration with @pd only. */
void fake_block_next_reg_on(struct ibv_pd *pd);
/* Until fake_release_held(), every registration made on a thread other
 * than @owner waits inside the backend, as one would for a lock @owner
 * holds (a provider's, taken by the program before it called malloc).
 * fake_release_held() returns how many waited. */
void fake_hold_regs_off(pthread_t owner);
/* The same, but the next @pass registrations of other threads go through;
 * fake_held_now(): how many wait at this moment. */
void fake_hold_regs_off_after(pthread_t owner, unsigned pass);
unsigned fake_held_now(void);
unsigned fake_release_held(void);
/* The same for the next deregistration (fake_wait_blocked, fake_release_reg). */
void fake_block_next_dereg(void);
/* Make every registration with @pd take @usec microseconds more (0: none):
 * a slow NIC, to outrun a walk. */
void fake_slow_reg_on(struct ibv_pd *pd, unsigned usec);
/* The PD the region with @lkey was registered with, alive or not (NULL:
 * never issued). */
struct ibv_pd *fake_pd_of_lkey(uint32_t lkey);
/* Registrations and deregistrations made so far with @pd. */
unsigned long fake_pd_calls(struct ibv_pd *pd);
void fake_wait_blocked(void);
/* rdma_malloc(@size) on a thread of its own, whose registration a test
 * holds up (fake_block_next_reg*) while it looks; fake_alloc_join waits
 * for it and returns the block.  Aborts if the thread cannot start. */
struct fake_alloc {
	size_t size;
	void *p;
	pthread_t thread;
};
void fake_alloc_start(struct fake_alloc *a, size_t size);
void *fake_alloc_join(struct fake_alloc *a);
/* Registrations and deregistrations inside the backend at this moment. */
unsigned fake_calls_under_way(void);
void fake_release_reg(void);

/* ODP capabilities the fake reports (default: RC ODP for everything), and the last
 * ibv_advise_mr it was given. */
void fake_set_odp(uint32_t general, uint32_t rc);
/* The device of @pd alone has no ODP at all (NULL: none such). */
void fake_set_no_odp_on(struct ibv_pd *pd);
/* Make the ODP capability query fail with @err (0: answer again). */
void fake_fail_odp_query(int err);
struct fake_advice {
	int calls, advice;
	uint32_t flags, lkey;
	void *addr;
	size_t len;
	size_t max_len, total_len; /* over every call */
};
struct fake_advice fake_last_advice(void);

/* Leave out the memory-window ops (a device without windows). */
void fake_without_mw(int on);
/* Make every registration and deregistration open a FILE, and say so
 * (the opens_files op), as libibverbs' fork protection does with
 * RDMAV_HUGEPAGES_SAFE. */
void fake_open_files(int on);

#endif
