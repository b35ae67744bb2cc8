/* SPDX-License-Identifier: MIT */
/* verbs.h - the registration backend: the one place that calls ibv_reg_mr. */
#ifndef RDMALLOC_VERBS_H
#define RDMALLOC_VERBS_H

#include <stddef.h>

#include "compiler.h"

struct ibv_pd;
struct ibv_mr;

/*
 * What the allocator needs from verbs.  The real table calls libibverbs; the
 * unit tests install a fake one (rdmalloc_verbs_set_ops) to test the logic on
 * a host without a device.  The fake is never the proof that registration
 * works: the Soft-RoCE suite is.
 */
struct rdmalloc_verbs_ops {
	/* ibv_reg_mr(): the region, or NULL with errno. */
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, unsigned int access);
	/* ibv_dereg_mr(): 0 or an errno value. */
	int (*dereg_mr)(struct ibv_mr *mr);
	/* Open the device named @device ("" = first with an active port) and
	 * allocate a PD on it; NULL with errno and a reason in @why. */
	struct ibv_pd *(*open_default_pd)(const char *device, char *why, size_t whylen);
};

/*
 * Non-zero while this thread is inside a verbs call made by rdmalloc.  The
 * LD_PRELOAD drop-in then serves the thread's mallocs (libibverbs allocates
 * inside ibv_reg_mr) from jemalloc's own arenas, never from a heap whose
 * growth would re-enter the registration code, and passes its own
 * ibv_reg_mr calls straight to libibverbs.
 */
extern RDMALLOC_TLS int rdmalloc_tl_in_verbs;

/* Must be called before the library initialises (before any allocation). */
RDMALLOC_TESTABLE void rdmalloc_verbs_set_ops(const struct rdmalloc_verbs_ops *ops);

/* Register [addr, addr+len) with @pd, timing and counting it. */
struct ibv_mr *rdmalloc_reg(struct ibv_pd *pd, void *addr, size_t len, unsigned int access);
/* Deregister, counting it; 0 or an errno value. */
int rdmalloc_dereg(struct ibv_mr *mr);
struct ibv_pd *rdmalloc_open_default_pd(const char *device, char *why, size_t whylen);

/* lkey/rkey of a region (keeps struct ibv_mr out of the other files). */
void rdmalloc_mr_keys(const struct ibv_mr *mr, unsigned int *lkey, unsigned int *rkey);

#endif
