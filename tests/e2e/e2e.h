/* SPDX-License-Identifier: MIT */
/* e2e.h - what every test file of the end-to-end suite shares. */
#ifndef RDMALLOC_E2E_H
#define RDMALLOC_E2E_H

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "rdma_env.h"
#include "rdma_malloc.h"

/* The pair of the default PD, opened by e2e_setup() for every test. */
extern struct e2e_pair e2e;

/* Fixture: skip the test when there is no device, else open e2e. */
void e2e_setup(void);
void e2e_teardown(void);

/* Every test: suite "rdma", the fixture, a bound on its run time (s). */
#define E2E_TEST(name, secs) \
	Test(rdma, name, .init = e2e_setup, .fini = e2e_teardown, .timeout = (secs))

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

/* The transfer status @st on @pair must be success; @what says which
 * transfer.  E2E_ASSERT_WC_OK: on the default pair, e2e. */
#define E2E_ASSERT_PAIR_OK(pair, st, what)                                           \
	do {                                                                         \
		int st_ = (st);                                                      \
		cr_assert(st_ == IBV_WC_SUCCESS, "%s: status %d (%s); last verbs note: %s", \
			  (what), st_, e2e_status_str(st_), (pair).err);             \
	} while (0)
#define E2E_ASSERT_WC_OK(st, what) E2E_ASSERT_PAIR_OK(e2e, st, what)

/* A transfer the device must refuse: a completion, but not a success. */
#define E2E_ASSERT_PAIR_REFUSED(pair, st, what)                                      \
	do {                                                                         \
		int st_ = (st);                                                      \
		cr_assert(st_ > IBV_WC_SUCCESS,                                      \
			  "%s: want an error completion, got %s (status %d); last verbs note: %s", \
			  (what), st_ == IBV_WC_SUCCESS ? "success" : e2e_status_str(st_), st_, \
			  (pair).err);                                               \
	} while (0)
#define E2E_ASSERT_WC_REFUSED(st, what) E2E_ASSERT_PAIR_REFUSED(e2e, st, what)

/* Every byte of [buf, buf+len) must be the pattern of @seed. */
#define E2E_ASSERT_PATTERN(buf, len, seed, what)                                     \
	do {                                                                         \
		const uint8_t *b_ = (const uint8_t *)(buf);                          \
		size_t len_ = (len), nd_ = 0;                                        \
		uint32_t seed_ = (seed);                                             \
		size_t at_ = e2e_check(b_, len_, seed_, &nd_);                       \
		cr_assert(at_ == E2E_NO_DIFF,                                        \
			  "%s: first differing byte at offset %zu of %zu (%p): got 0x%02x, " \
			  "want 0x%02x; %zu bytes differ",                           \
			  (what), at_, len_, (const void *)(b_ + (at_ == E2E_NO_DIFF ? 0 : at_)), \
			  at_ == E2E_NO_DIFF ? 0 : b_[at_],                          \
			  e2e_pattern_byte(at_ == E2E_NO_DIFF ? 0 : at_, seed_), nd_); \
	} while (0)

/* Every byte of [buf, buf+len) must equal that of [ref, ref+len). */
#define E2E_ASSERT_SAME(buf, ref, len, what)                                         \
	do {                                                                         \
		const uint8_t *b_ = (const uint8_t *)(buf), *r_ = (const uint8_t *)(ref); \
		size_t len_ = (len), nd_ = 0;                                        \
		size_t at_ = e2e_compare(b_, r_, len_, &nd_);                        \
		cr_assert(at_ == E2E_NO_DIFF,                                        \
			  "%s: first differing byte at offset %zu of %zu (%p): got 0x%02x, " \
			  "want 0x%02x; %zu bytes differ",                           \
			  (what), at_, len_, (const void *)(b_ + (at_ == E2E_NO_DIFF ? 0 : at_)), \
			  at_ == E2E_NO_DIFF ? 0 : b_[at_], at_ == E2E_NO_DIFF ? 0 : r_[at_], nd_); \
	} while (0)

/* Every byte of [buf, buf+len) must be @c. */
#define E2E_ASSERT_CONST(buf, len, c, what)                                          \
	do {                                                                         \
		const uint8_t *b_ = (const uint8_t *)(buf);                          \
		size_t len_ = (len), nd_ = 0;                                        \
		size_t at_ = e2e_check_const(b_, len_, (uint8_t)(c), &nd_);          \
		cr_assert(at_ == E2E_NO_DIFF,                                        \
			  "%s: first differing byte at offset %zu of %zu: got 0x%02x, want " \
			  "0x%02x; %zu bytes differ",                                \
			  (what), at_, len_, at_ == E2E_NO_DIFF ? 0 : b_[at_],       \
			  (unsigned)(uint8_t)(c), nd_);                              \
	} while (0)

/* Keys of [p, p+len) under @pd must be found. */
#define E2E_ASSERT_KEYS(p, len, pd, lkeyp, rkeyp, what)                              \
	do {                                                                         \
		int e_ = rdma_malloc_keys((p), (len), (pd), (lkeyp), (rkeyp));       \
		cr_assert(e_ == 0, "%s: rdma_malloc_keys(%p, %zu): %s", (what),      \
			  (const void *)(p), (size_t)(len), strerror(e_));           \
	} while (0)

#endif
