/* SPDX-License-Identifier: MIT */
/* verbs.c - the registration backend: the one place that calls ibv_reg_mr. */
#include "verbs.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fault.h"
#include "log.h"
#include "stats.h"

static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	return ibv_reg_mr(pd, addr, len, (int)access);
}

static int real_dereg_mr(struct ibv_mr *mr)
{
	return ibv_dereg_mr(mr);
}

static int port_active(struct ibv_context *ctx)
{
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		return 0;
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		if (ibv_query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
			return 1;
	}
	return 0;
}

static struct ibv_pd *real_open_default_pd(const char *device, char *why, size_t whylen)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		if (errno == ENOSYS)
			snprintf(why, whylen, "no RDMA device (the kernel has no RDMA support)");
		else
			snprintf(why, whylen, "cannot list RDMA devices: %s", strerror(errno));
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
	for (int i = 0; i < n && !pd; i++) {
		const char *name = ibv_get_device_name(list[i]);
		if (*device && strcmp(name, device) != 0)
			continue;
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx) {
			snprintf(why, whylen, "cannot open %s: %s", name, strerror(errno));
			continue;
		}
		if (!*device && !port_active(ctx)) {
			ibv_close_device(ctx);
			continue;
		}
		pd = ibv_alloc_pd(ctx);
		if (!pd) {
			err = errno ? errno : ENOMEM;
			snprintf(why, whylen, "ibv_alloc_pd on %s: %s", name, strerror(err));
			ibv_close_device(ctx);
		}
		/* The context stays open for the life of the process. */
	}
	ibv_free_device_list(list);
	if (!pd)
		errno = err;
	return pd;
}

static const struct rdmalloc_verbs_ops real_ops = {
	.reg_mr = real_reg_mr,
	.dereg_mr = real_dereg_mr,
	.open_default_pd = real_open_default_pd,
};

static const struct rdmalloc_verbs_ops *ops = &real_ops;

RDMALLOC_TLS int rdmalloc_tl_in_verbs;

void rdmalloc_verbs_set_ops(const struct rdmalloc_verbs_ops *o)
{
	ops = o ? o : &real_ops;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct ibv_mr *rdmalloc_reg(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	uint64_t t0 = now_ns();
	errno = 0;
	int ferr = rdmalloc_fault_hit(RDMALLOC_FAULT_REG, addr, len);
	rdmalloc_tl_in_verbs++;
	struct ibv_mr *mr = ferr ? (errno = ferr, NULL) : ops->reg_mr(pd, addr, len, access);
	rdmalloc_tl_in_verbs--;
	STAT_ADD(registration_ns, now_ns() - t0);
	if (!mr) {
		if (!errno)
			errno = ENOMEM;
		STAT_INC(registration_failures);
		return NULL;
	}
	STAT_INC(registrations);
	STAT_INC(mrs);
	STAT_ADD(registered_bytes, len);
	return mr;
}

int rdmalloc_dereg(struct ibv_mr *mr)
{
	size_t len = mr->length;
	int err = rdmalloc_fault_hit(RDMALLOC_FAULT_DEREG, mr->addr, len);
	rdmalloc_tl_in_verbs++;
	if (!err)
		err = ops->dereg_mr(mr);
	rdmalloc_tl_in_verbs--;
	if (err) {
		STAT_INC(deregistration_failures);
		rdmalloc_log(RDMALLOC_LOG_ERROR, "ibv_dereg_mr of %zu bytes failed: %s; the pages stay pinned",
			     len, strerror(err));
		return err;
	}
	STAT_INC(deregistrations);
	STAT_SUB(mrs, 1);
	STAT_SUB(registered_bytes, len);
	return 0;
}

struct ibv_pd *rdmalloc_open_default_pd(const char *device, char *why, size_t whylen)
{
	rdmalloc_tl_in_verbs++;
	struct ibv_pd *pd = ops->open_default_pd(device, why, whylen);
	rdmalloc_tl_in_verbs--;
	return pd;
}

void rdmalloc_mr_keys(const struct ibv_mr *mr, unsigned int *lkey, unsigned int *rkey)
{
	*lkey = mr->lkey;
	*rkey = mr->rkey;
}
