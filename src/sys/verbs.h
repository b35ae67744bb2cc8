/* SPDX-License-Identifier: MIT */
/* verbs.h - the verbs backend: the one place that calls libibverbs. */
#ifndef RDMALLOC_VERBS_H
#define RDMALLOC_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "tls.h" /* rdmalloc_tl_in_verbs, raised around every call */

struct ibv_pd;
struct ibv_mr;
struct ibv_mw;
struct ibv_qp;

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
	/*
	 * Any op may be left NULL: rdmalloc_verbs_set_ops fills it with one
	 * that fails with EOPNOTSUPP (ENODEV for open_default_pd), so callers
	 * never test for NULL.
	 */
	/* ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, ...): 0, or an errno
	 * value with *@broken set when the region must no longer be used
	 * (IBV_REREG_MR_ERR_CMD*), clear when the old region is intact. */
	int (*rereg_mr)(struct ibv_mr *mr, unsigned int access, int *broken);
	/* ibv_alloc_mw() / ibv_dealloc_mw(). */
	struct ibv_mw *(*alloc_mw)(struct ibv_pd *pd, int type);
	int (*dealloc_mw)(struct ibv_mw *mw);
	/* Post a bind of @mw to [@addr, @addr+@len) of @mr with @access: type 1
	 * through ibv_bind_mw() (@mr NULL and @len 0: unbind), type 2 as an
	 * IBV_WR_BIND_MW work request with the new key @rkey.  0 or errno. */
	int (*bind_mw)(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr, size_t len,
		       unsigned int access, uint32_t rkey, uint64_t wr_id, unsigned int send_flags);
	/* Post an IBV_WR_LOCAL_INV of @rkey.  0 or errno. */
	int (*local_inv)(struct ibv_qp *qp, uint32_t rkey, uint64_t wr_id, unsigned int send_flags);
	/* ibv_query_device_ex(@pd's context): odp_caps.general_caps and
	 * .per_transport_caps.rc_odp_caps.  0 or errno. */
	int (*query_odp)(struct ibv_pd *pd, uint32_t *general, uint32_t *rc);
	/* ibv_advise_mr(@pd, @advice, @flags, one SGE).  0 or errno. */
	int (*advise_mr)(struct ibv_pd *pd, int advice, uint32_t flags, void *addr, size_t len, uint32_t lkey);
	/* Whether registrations and deregistrations open FILEs (stdio's list
	 * lock: fork.c).  Left out: 0. */
	int (*opens_files)(void);
};

/* Must be called before the library initialises (before any allocation).
 * The table is copied; NULL is the real one. */
RDMALLOC_TESTABLE void rdmalloc_verbs_set_ops(const struct rdmalloc_verbs_ops *ops);
/* When RDMA is first needed (init.c), never inside a hook nor with a lock
 * of ours but INIT held (dlopen takes the loader's lock, and mallocs): load
 * libibverbs and bind the real backend's calls to its own functions (not
 * the drop-in's wrappers of them).  If it cannot, they fail with ENOSYS
 * and open_default_pd says why.  Idempotent. */
RDMALLOC_TESTABLE void rdmalloc_verbs_init(void);
/* libibverbs' own @name@@version (not an interposed one), or NULL. */
void *rdmalloc_verbs_real(const char *name, const char *version);

/* Whether our registrations and deregistrations may open FILEs, taking
 * stdio's list lock: libibverbs' fork protection with RDMAV_HUGEPAGES_SAFE
 * reads /proc/self/smaps in each (RDMAV_HUGEPAGES_SAFE set: maybe).  No
 * allocation, no system call (a fork handler).  INIT held (the table is
 * bound under it). */
RDMALLOC_TESTABLE int rdmalloc_verbs_open_files(void);

/* Register [addr, addr+len) with @pd, timing and counting it. */
struct ibv_mr *rdmalloc_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access);
/* Deregister, counting it; 0 or an errno value. */
int rdmalloc_dereg_mr(struct ibv_mr *mr);
struct ibv_pd *rdmalloc_open_default_pd(const char *device, char *why, size_t whylen);

/* Change @mr's access in place (counted); 0 or errno, *@broken as above. */
int rdmalloc_rereg_access(struct ibv_mr *mr, unsigned int access, int *broken);
/* Memory windows (counted); NULL/errno as the ops. */
struct ibv_mw *rdmalloc_alloc_mw(struct ibv_pd *pd, int type);
int rdmalloc_dealloc_mw(struct ibv_mw *mw);
int rdmalloc_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr, size_t len,
		     unsigned int access, uint32_t rkey, uint64_t wr_id, unsigned int send_flags);
/* The rkey a window gets at its next bind (ibv_inc_rkey). */
uint32_t rdmalloc_next_rkey(uint32_t rkey);
int rdmalloc_local_inv(struct ibv_qp *qp, uint32_t rkey, uint64_t wr_id, unsigned int send_flags);
int rdmalloc_query_odp(struct ibv_pd *pd, uint32_t *general, uint32_t *rc);
/* 0 when @pd's device can register an ODP heap with @access (RC ODP with
 * the operations @access allows; with @implicit, implicit ODP too),
 * EOPNOTSUPP or the query's errno else.  A NULL @pd (no device) is 0:
 * nothing will be registered. */
int rdmalloc_odp_supported(struct ibv_pd *pd, unsigned int access, int implicit);
int rdmalloc_advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, void *addr, size_t len, uint32_t lkey);

/*
 * fork() and our verbs calls: a child forked in the middle of one would
 * inherit the provider's and libibverbs' locks as that call held them,
 * with no thread to release them (its first registration would hang).
 * Each thread's outermost call into the table counts itself under way
 * (the posts on the program's queue pairs, which a child never uses, do
 * not), and fork's outer prepare handler, holding the outer locks and
 * before jemalloc's prepare (a call may allocate or free from jemalloc),
 * marks a fork as coming and waits until nothing is under way.  A call
 * never waits for the fork itself: its caller may hold what a hook under
 * a jemalloc lock waits for (a chunk being given back), and jemalloc's
 * prepare waits for that hook.  So a call that starts after the wait may
 * still be under way at the fork: work that must never be, a big block's
 * chunk made or released outside every lock, is a section.
 */
/* A section: counted under way from its start to its end, and at its start
 * waiting while a fork is coming (not inside a hook or a worker of ours,
 * which may hold a jemalloc lock).  Begin it holding nothing another
 * thread may wait for (no lock of ours, no mark on a chunk); sections and
 * calls nest.  *@cancel keeps the thread's cancellation state for the end
 * (off meanwhile). */
void rdmalloc_verbs_section_begin(int *cancel);
void rdmalloc_verbs_section_end(int cancel);
/* fork()'s wait for the calls under way: until @deadline_ns at most
 * (rdmalloc_now_ns()'s clock; api/fork.h says why a bound), then it
 * returns the calls still under way, which the caller says. */
unsigned rdmalloc_verbs_fork_prepare(uint64_t deadline_ns);
void rdmalloc_verbs_fork_parent(void);
/* No lock taken: the child has one thread (the VERBS lock is reset with
 * the others). */
void rdmalloc_verbs_fork_child(void);
/* For the tests: whether a fork is coming, and the sections waiting for it. */
RDMALLOC_TESTABLE int rdmalloc_verbs_fork_coming(void);
RDMALLOC_TESTABLE unsigned rdmalloc_verbs_parked(void);

/* lkey/rkey of a region. */
void rdmalloc_mr_keys(const struct ibv_mr *mr, unsigned int *lkey, unsigned int *rkey);
/* The PD @mr is registered with. */
struct ibv_pd *rdmalloc_mr_pd(const struct ibv_mr *mr);

#endif
