/* SPDX-License-Identifier: MIT */
/* verbs.c - the verbs backend: the one place that calls libibverbs. */
#include "verbs.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "job.h"
#include "lock.h"
#include "log.h"
#include "nocancel.h"
#include "os.h"
#include "counters.h"

/*
 * libibverbs, loaded on first need (rdmalloc_verbs_init, from the first
 * call that needs RDMA): a program under the drop-in that never uses RDMA
 * never maps it, nor libnl, nor a provider, and pays none of their
 * start-up (about 0.9 MiB of RSS).  Every call of ours into it goes through
 * this table, bound in libibverbs itself: under the drop-in a call by name
 * would reach the drop-in's wrappers (preload/elide.c), which exist for the
 * program's calls, not ours.  Until bound, or if libibverbs cannot be
 * loaded (logged and counted), the calls fail with ENOSYS.
 */
static struct {
	struct ibv_device **(*get_device_list)(int *n);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*query_dev)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	int (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access);
} lib;
static int lib_opens_files; /* set when the table is bound: real_opens_files */
static char lib_why[128]; /* why libibverbs is not bound */

void *rdmalloc_verbs_real(const char *name, const char *version)
{
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *f = h ? dlvsym(h, name, version) : NULL;
	if (h)
		dlclose(h); /* NOLOAD: only drops the reference just taken */
	return f;
}

void rdmalloc_verbs_init(void)
{
	if (lib.reg_mr_iova2)
		return;
	/* Never closed: the PDs and regions it makes live as long as we do. */
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(lib_why, sizeof(lib_why), "cannot load libibverbs.so.1: %s", dlerror());
		return;
	}
#define BIND_(field, name, version) (lib.field = (__typeof__(lib.field))dlvsym(h, name, version))
	if (!BIND_(get_device_list, "ibv_get_device_list", "IBVERBS_1.1") ||
	    !BIND_(free_device_list, "ibv_free_device_list", "IBVERBS_1.1") ||
	    !BIND_(get_device_name, "ibv_get_device_name", "IBVERBS_1.1") ||
	    !BIND_(open_device, "ibv_open_device", "IBVERBS_1.1") ||
	    !BIND_(close_device, "ibv_close_device", "IBVERBS_1.1") ||
	    !BIND_(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1") ||
	    !BIND_(query_dev, "ibv_query_device", "IBVERBS_1.1") ||
	    /* IBVERBS_1.1's takes the older struct, a prefix of today's */
	    !BIND_(query_port, "ibv_query_port", "IBVERBS_1.1") ||
	    !BIND_(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1") ||
	    !BIND_(rereg_mr, "ibv_rereg_mr", "IBVERBS_1.1") ||
	    /* last: it says the table is complete */
	    !BIND_(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8")) {
#undef BIND_
		snprintf(lib_why, sizeof(lib_why), "libibverbs.so.1 lacks a function rdmalloc needs: %s",
			 dlerror());
		memset(&lib, 0, sizeof(lib));
		return;
	}
	lib_opens_files = getenv("RDMAV_HUGEPAGES_SAFE") != NULL;
}

static int bound(void)
{
	if (lib.reg_mr_iova2)
		return 1;
	errno = ENOSYS;
	return 0;
}

static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	/* What ibv_reg_mr() expands to for flags that are not a constant. */
	return bound() ? lib.reg_mr_iova2(pd, addr, len, (uintptr_t)addr, access) : NULL;
}

static int real_dereg_mr(struct ibv_mr *mr)
{
	return bound() ? lib.dereg_mr(mr) : ENOSYS;
}

static int port_active(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	if (lib.query_dev(ctx, &da))
		return 0;
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		memset(&pa, 0, sizeof(pa));
		if (lib.query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
			return 1;
	}
	return 0;
}

/* Devices passed over for the default PD (the first one's reason in
 * @skipped) though it went on a later one: the PD is not where the rule
 * says, which the program should know.  Said once per job. */
static void passed_over(const char *skipped, const char *chosen)
{
	STAT_INC(fallbacks);
	rdmalloc_log_job_once("device-passed-over", "%s: the default PD is on %s instead", skipped, chosen);
}

/* The first device's reason for being passed over, kept in @first. */
static void keep_first(char *first, size_t len, const char *why)
{
	if (!first[0])
		snprintf(first, len, "%s", why);
}

static struct ibv_pd *real_open_default_pd(const char *device, char *why, size_t whylen)
{
	if (!bound()) {
		snprintf(why, whylen, "%s", lib_why[0] ? lib_why : "libibverbs is not loaded");
		errno = ENODEV;
		return NULL;
	}
	int n = 0;
	struct ibv_device **list = lib.get_device_list(&n);
	if (!list) {
		if (errno == ENOSYS)
			snprintf(why, whylen, "no RDMA device (the kernel has no RDMA support)");
		else
			snprintf(why, whylen, "cannot list RDMA devices: %s", rdmalloc_strerror(errno));
		errno = ENODEV;
		return NULL;
	}
	struct ibv_pd *pd = NULL;
	int err = ENODEV;
	if (n == 0)
		snprintf(why, whylen, "no RDMA device found");
	else if (*device)
		snprintf(why, whylen, "RDMA device \"%s\" not found", device);
	else
		snprintf(why, whylen, "no RDMA device has an active port");
	char skipped[160] = "", chosen[64] = "";
	for (int i = 0; i < n && !pd; i++) {
		const char *name = lib.get_device_name(list[i]);
		if (*device && strcmp(name, device) != 0)
			continue;
		struct ibv_context *ctx = lib.open_device(list[i]);
		if (!ctx) {
			snprintf(why, whylen, "cannot open %s: %s", name, rdmalloc_strerror(errno));
			keep_first(skipped, sizeof(skipped), why);
			continue;
		}
		if (!*device && !port_active(ctx)) {
			lib.close_device(ctx);
			continue;
		}
		errno = 0; /* a provider may fail without setting it */
		pd = lib.alloc_pd(ctx);
		if (!pd) {
			err = errno ? errno : ENOMEM;
			snprintf(why, whylen, "ibv_alloc_pd on %s: %s", name, rdmalloc_strerror(err));
			keep_first(skipped, sizeof(skipped), why);
			lib.close_device(ctx);
		} else {
			snprintf(chosen, sizeof(chosen), "%s", name);
		}
		/* The context stays open for the life of the process. */
	}
	lib.free_device_list(list);
	if (!pd)
		errno = err;
	else if (skipped[0]) /* (a named device is the only one tried) */
		passed_over(skipped, chosen);
	return pd;
}

static int real_rereg_mr(struct ibv_mr *mr, unsigned int access, int *broken)
{
	*broken = 0;
	if (!bound())
		return ENOSYS;
	errno = 0;
	int rc = lib.rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, (int)access);
	if (rc == 0)
		return 0;
	if (rc > 0) /* some providers return an errno value */
		return rc;
	/* IBV_REREG_MR_ERR_INPUT and _DONT_FORK_NEW leave the old region valid;
	 * the command errors leave it unusable. */
	*broken = rc == IBV_REREG_MR_ERR_CMD || rc == IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW ||
		  rc == IBV_REREG_MR_ERR_DO_FORK_OLD;
	return errno ? errno : EINVAL;
}

static struct ibv_mw *real_alloc_mw(struct ibv_pd *pd, int type)
{
	return ibv_alloc_mw(pd, (enum ibv_mw_type)type);
}

static int real_dealloc_mw(struct ibv_mw *mw)
{
	return ibv_dealloc_mw(mw);
}

static int real_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr, size_t len,
			unsigned int access, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	struct ibv_mw_bind_info info = { .mr = mr, .addr = addr, .length = len, .mw_access_flags = access };
	if (mw->type == IBV_MW_TYPE_1) {
		struct ibv_mw_bind b = { .wr_id = wr_id, .send_flags = send_flags, .bind_info = info };
		return ibv_bind_mw(qp, mw, &b);
	}
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = send_flags,
		.bind_mw = { .mw = mw, .rkey = rkey, .bind_info = info },
	}, *bad = NULL;
	return ibv_post_send(qp, &wr, &bad);
}

static int real_local_inv(struct ibv_qp *qp, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .opcode = IBV_WR_LOCAL_INV, .send_flags = send_flags,
		.invalidate_rkey = rkey,
	}, *bad = NULL;
	return ibv_post_send(qp, &wr, &bad);
}

static int real_query_odp(struct ibv_pd *pd, uint32_t *general, uint32_t *rc)
{
	/* ibv_query_device_ex() without its fallback to ibv_query_device, which
	 * has no ODP capabilities to report (and would be a call by name). */
	struct verbs_context *vctx = verbs_get_ctx_op(pd->context, query_device_ex);
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof(a));
	int err = vctx ? vctx->query_device_ex(pd->context, NULL, &a, sizeof(a)) : EOPNOTSUPP;
	if (err == EOPNOTSUPP || err == ENOSYS) { /* the legacy query: no ODP */
		memset(&a, 0, sizeof(a));
		err = 0;
	}
	if (err)
		return err;
	*general = (uint32_t)a.odp_caps.general_caps;
	*rc = a.odp_caps.per_transport_caps.rc_odp_caps;
	return 0;
}

static int real_advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, void *addr, size_t len, uint32_t lkey)
{
	if (len > UINT32_MAX) /* an ibv_sge carries 32 bits of length */
		return EINVAL;
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = (uint32_t)len, .lkey = lkey };
	return ibv_advise_mr(pd, (enum ibv_advise_mr_advice)advice, flags, &sge, 1);
}

/* libibverbs' fork protection (ibv_fork_init, RDMAV_FORK_SAFE) madvises
 * every registered range; with RDMAV_HUGEPAGES_SAFE it first finds the
 * range's page size in /proc/self/smaps, read with fopen (rdma-core's
 * memory.c).  Whether protection is on cannot be asked cheaply (rdma-core
 * before v51 turns it on whatever the kernel, and ibv_is_fork_initialized
 * asks the kernel over netlink, allocating): the variable alone decides,
 * as libibverbs read it, when we bound it (it reads it once). */
static int real_opens_files(void)
{
	return lib_opens_files;
}

/* The real table: a macro, so that the active table can start as a copy. */
#define REAL_OPS                                         \
	{                                                \
		.reg_mr = real_reg_mr,                   \
		.dereg_mr = real_dereg_mr,               \
		.open_default_pd = real_open_default_pd, \
		.rereg_mr = real_rereg_mr,               \
		.alloc_mw = real_alloc_mw,               \
		.dealloc_mw = real_dealloc_mw,           \
		.bind_mw = real_bind_mw,                 \
		.local_inv = real_local_inv,             \
		.query_odp = real_query_odp,             \
		.advise_mr = real_advise_mr,             \
		.opens_files = real_opens_files,         \
	}
static const struct rdmalloc_verbs_ops real_ops = REAL_OPS;

/* What a backend leaves out answers EOPNOTSUPP (rdma-core's dummy ops): the
 * calls below never test for NULL. */
static struct ibv_mr *unsupported_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	(void)pd, (void)addr, (void)len, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

static int unsupported_dereg_mr(struct ibv_mr *mr)
{
	(void)mr;
	return EOPNOTSUPP;
}

static struct ibv_pd *unsupported_open_default_pd(const char *device, char *why, size_t whylen)
{
	(void)device;
	snprintf(why, whylen, "the verbs backend opens no device");
	errno = ENODEV;
	return NULL;
}

static int unsupported_rereg_mr(struct ibv_mr *mr, unsigned int access, int *broken)
{
	(void)mr, (void)access;
	*broken = 0;
	return EOPNOTSUPP;
}

static struct ibv_mw *unsupported_alloc_mw(struct ibv_pd *pd, int type)
{
	(void)pd, (void)type;
	errno = EOPNOTSUPP;
	return NULL;
}

static int unsupported_dealloc_mw(struct ibv_mw *mw)
{
	(void)mw;
	return EOPNOTSUPP;
}

static int unsupported_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr, size_t len,
			       unsigned int access, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	(void)qp, (void)mw, (void)mr, (void)addr, (void)len, (void)access, (void)rkey, (void)wr_id,
		(void)send_flags;
	return EOPNOTSUPP;
}

static int unsupported_local_inv(struct ibv_qp *qp, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	(void)qp, (void)rkey, (void)wr_id, (void)send_flags;
	return EOPNOTSUPP;
}

static int unsupported_query_odp(struct ibv_pd *pd, uint32_t *general, uint32_t *rc)
{
	(void)pd, (void)general, (void)rc;
	return EOPNOTSUPP;
}

static int unsupported_advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, void *addr, size_t len,
				 uint32_t lkey)
{
	(void)pd, (void)advice, (void)flags, (void)addr, (void)len, (void)lkey;
	return EOPNOTSUPP;
}

static int unsupported_opens_files(void)
{
	return 0;
}

static struct rdmalloc_verbs_ops active = REAL_OPS;
static const struct rdmalloc_verbs_ops *const ops = &active;

#define FILL_(op) active.op = o->op ? o->op : unsupported_##op
void rdmalloc_verbs_set_ops(const struct rdmalloc_verbs_ops *o)
{
	if (!o)
		o = &real_ops;
	FILL_(reg_mr);
	FILL_(dereg_mr);
	FILL_(open_default_pd);
	FILL_(rereg_mr);
	FILL_(alloc_mw);
	FILL_(dealloc_mw);
	FILL_(bind_mw);
	FILL_(local_inv);
	FILL_(query_odp);
	FILL_(advise_mr);
	FILL_(opens_files);
}
#undef FILL_

int rdmalloc_verbs_open_files(void)
{
	return ops->opens_files();
}

/* What a region counts in registered_bytes: an implicit ODP region (NULL,
 * SIZE_MAX) stands for no bytes of its own; its chunks count as chunk_bytes. */
static size_t region_bytes(const void *addr, size_t len)
{
	return addr == NULL && len == SIZE_MAX ? 0 : len;
}

/* ---- calls under way, which fork() waits for (verbs.h) ---- */

static unsigned under_way; /* VERBS lock */
static int forking;        /* VERBS lock */
static unsigned parked;    /* VERBS lock: sections waiting for a fork to end */
/* This thread's depth of counted calls and sections, and whether it is in
 * under_way (set with it, under the lock: a fork from a signal handler
 * then knows its own share exactly). */
static RDMALLOC_TLS unsigned counted;
static RDMALLOC_TLS unsigned mine;

/* Count this thread under way, once, waiting first while a fork is coming
 * if @wait.  Cancellation is off meanwhile (a kernel command is a write(),
 * a cancellation point): a call cancelled there would stay counted and
 * every later fork would wait for it.  *@cancel keeps the thread's state. */
static void count_in(int wait, int *cancel)
{
	*cancel = PTHREAD_CANCEL_ENABLE; /* unused unless this is the outermost */
	if (counted++)
		return;
	*cancel = rdmalloc_cancel_off();
	rdmalloc_lock(RDMALLOC_LOCK_VERBS);
	if (wait && forking) {
		parked++;
		while (forking)
			rdmalloc_lock_wait(RDMALLOC_LOCK_VERBS);
		parked--;
	}
	under_way++;
	mine = 1;
	rdmalloc_unlock(RDMALLOC_LOCK_VERBS);
}

static void count_out(int cancel)
{
	if (--counted)
		return;
	rdmalloc_lock(RDMALLOC_LOCK_VERBS);
	mine = 0;
	if (!--under_way && forking)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_VERBS);
	rdmalloc_unlock(RDMALLOC_LOCK_VERBS);
	rdmalloc_cancel_on(cancel);
}

/* Around every call into the table but the posts on the program's queue
 * pairs: counted, never waiting (the caller may hold what a hook waits
 * for), and rdmalloc_tl_in_verbs raised. */
static void enter(int *cancel)
{
	count_in(0, cancel);
	rdmalloc_tl_in_verbs++;
}

static void leave(int cancel)
{
	rdmalloc_tl_in_verbs--;
	count_out(cancel);
}

void rdmalloc_verbs_section_begin(int *cancel)
{
	count_in(!rdmalloc_tl_in_verbs, cancel);
}

void rdmalloc_verbs_section_end(int cancel)
{
	count_out(cancel);
}

unsigned rdmalloc_verbs_fork_prepare(uint64_t deadline_ns)
{
	rdmalloc_lock(RDMALLOC_LOCK_VERBS);
	forking = 1;
	while (under_way > mine && rdmalloc_now_ns() < deadline_ns) /* mine: a fork from a signal handler */
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_VERBS, deadline_ns);
	unsigned left = under_way - mine;
	rdmalloc_unlock(RDMALLOC_LOCK_VERBS);
	return left;
}

void rdmalloc_verbs_fork_parent(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_VERBS);
	forking = 0;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_VERBS);
	rdmalloc_unlock(RDMALLOC_LOCK_VERBS);
}

void rdmalloc_verbs_fork_child(void)
{
	forking = 0;
	parked = 0;
	under_way = mine;
}

int rdmalloc_verbs_fork_coming(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_VERBS);
	int f = forking;
	rdmalloc_unlock(RDMALLOC_LOCK_VERBS);
	return f;
}

unsigned rdmalloc_verbs_parked(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_VERBS);
	unsigned n = parked;
	rdmalloc_unlock(RDMALLOC_LOCK_VERBS);
	return n;
}

/* ---- the calls ---- */

struct ibv_mr *rdmalloc_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	int ferr = rdmalloc_fault_hit(RDMALLOC_FAULT_REG, addr, len), cancel, saved = errno;
	enter(&cancel);
	uint64_t t0 = rdmalloc_now_ns(); /* after any wait for a fork */
	errno = 0;
	struct ibv_mr *mr = ferr ? (errno = ferr, NULL) : ops->reg_mr(pd, addr, len, access);
	leave(cancel);
	STAT_ADD(registration_ns, rdmalloc_now_ns() - t0);
	if (!mr) {
		if (!errno)
			errno = ENOMEM;
		STAT_INC(registration_failures);
		return NULL;
	}
	errno = saved; /* whatever the provider left there on success */
	STAT_INC(registrations);
	STAT_INC(mrs);
	STAT_ADD(registered_bytes, region_bytes(addr, len));
	return mr;
}

int rdmalloc_dereg_mr(struct ibv_mr *mr)
{
	size_t len = mr->length, bytes = region_bytes(mr->addr, len); /* mr is gone after */
	int err = rdmalloc_fault_hit(RDMALLOC_FAULT_DEREG, mr->addr, len);
	int cancel, saved = errno; /* the failure is the value returned */
	enter(&cancel);
	if (!err)
		err = ops->dereg_mr(mr);
	leave(cancel);
	errno = saved;
	if (err) {
		STAT_INC(deregistration_failures);
		rdmalloc_log(RDMALLOC_LOG_ERROR, "ibv_dereg_mr of %zu bytes failed: %s; the pages stay pinned",
			     len, rdmalloc_strerror(err));
		return err;
	}
	STAT_INC(deregistrations);
	STAT_SUB(mrs, 1);
	STAT_SUB(registered_bytes, bytes);
	return 0;
}

struct ibv_pd *rdmalloc_open_default_pd(const char *device, char *why, size_t whylen)
{
	int cancel;
	enter(&cancel);
	struct ibv_pd *pd = ops->open_default_pd(device, why, whylen);
	leave(cancel);
	return pd;
}

int rdmalloc_rereg_access(struct ibv_mr *mr, unsigned int access, int *broken)
{
	*broken = 0;
	int cancel;
	enter(&cancel);
	int err = ops->rereg_mr(mr, access, broken);
	leave(cancel);
	if (!err)
		STAT_INC(rereg_in_place);
	return err;
}

struct ibv_mw *rdmalloc_alloc_mw(struct ibv_pd *pd, int type)
{
	int cancel, saved = errno;
	errno = 0;
	enter(&cancel);
	struct ibv_mw *mw = ops->alloc_mw(pd, type);
	leave(cancel);
	if (!mw) {
		if (!errno)
			errno = ENOMEM;
		return NULL;
	}
	errno = saved;
	STAT_INC(mws);
	return mw;
}

int rdmalloc_dealloc_mw(struct ibv_mw *mw)
{
	int cancel;
	enter(&cancel);
	int err = ops->dealloc_mw(mw);
	leave(cancel);
	if (!err)
		STAT_SUB(mws, 1);
	return err;
}

int rdmalloc_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr, size_t len,
		     unsigned int access, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	rdmalloc_tl_in_verbs++; /* a post on the program's QP: not counted (verbs.h) */
	int err = ops->bind_mw(qp, mw, mr, addr, len, access, rkey, wr_id, send_flags);
	rdmalloc_tl_in_verbs--;
	return err;
}

int rdmalloc_local_inv(struct ibv_qp *qp, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	rdmalloc_tl_in_verbs++; /* a post on the program's QP: not counted (verbs.h) */
	int err = ops->local_inv(qp, rkey, wr_id, send_flags);
	rdmalloc_tl_in_verbs--;
	return err;
}

int rdmalloc_query_odp(struct ibv_pd *pd, uint32_t *general, uint32_t *rc)
{
	int cancel;
	enter(&cancel);
	int err = ops->query_odp(pd, general, rc);
	leave(cancel);
	return err;
}

int rdmalloc_advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, void *addr, size_t len, uint32_t lkey)
{
	int cancel;
	enter(&cancel);
	int err = ops->advise_mr(pd, advice, flags, addr, len, lkey);
	leave(cancel);
	return err;
}

void rdmalloc_mr_keys(const struct ibv_mr *mr, unsigned int *lkey, unsigned int *rkey)
{
	*lkey = mr->lkey;
	*rkey = mr->rkey;
}

struct ibv_pd *rdmalloc_mr_pd(const struct ibv_mr *mr)
{
	return mr->pd;
}

int rdmalloc_odp_supported(struct ibv_pd *pd, unsigned int access, int implicit)
{
	if (!pd)
		return 0;
	uint32_t general = 0, rc = 0;
	int err = rdmalloc_query_odp(pd, &general, &rc);
	if (err && err != EOPNOTSUPP && err != ENOSYS) /* (not a backend without the query) */
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "the device's on-demand paging could not be queried (%s): "
				  "ODP heaps are refused with EOPNOTSUPP", rdmalloc_strerror(err));
	if (err)
		return EOPNOTSUPP;
	uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
	if (access & IBV_ACCESS_REMOTE_WRITE)
		need |= IBV_ODP_SUPPORT_WRITE;
	if (access & IBV_ACCESS_REMOTE_READ)
		need |= IBV_ODP_SUPPORT_READ;
	if (access & IBV_ACCESS_REMOTE_ATOMIC)
		need |= IBV_ODP_SUPPORT_ATOMIC;
	if (!(general & IBV_ODP_SUPPORT) || (rc & need) != need)
		return EOPNOTSUPP;
	if (implicit && !(general & IBV_ODP_SUPPORT_IMPLICIT))
		return EOPNOTSUPP;
	return 0;
}

uint32_t rdmalloc_next_rkey(uint32_t rkey)
{
	return ibv_inc_rkey(rkey);
}
