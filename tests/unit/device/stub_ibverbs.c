/* SPDX-License-Identifier: MIT */
/*
 * stub_ibverbs.c - a libibverbs.so.1 of made-up devices, for the tests of
 * the default PD's device (device_select.c, and rdmalloc-info's report of
 * it): only the calls the library binds (src/sys/verbs.c) and rdmalloc-info
 * makes, under their versions.  STUB_IBV_DEVICES lists
 * the devices in order, "name:state" each, comma-separated; state 1 is an
 * active port, 0 a port that is down, x a device that cannot be opened, p
 * an active port on a device that refuses a PD.  STUB_IBV_DEVICES=! fails
 * the listing itself (EPERM; ENOSYS is the real library's word for a kernel
 * without RDMA).
 * Its regions register nothing: logic only, never proof of registration.
 * Its device list is the one thing it allocates (freed by the caller).
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#define STUB_MAX 8
static struct ibv_device devs[STUB_MAX];
static char states[STUB_MAX];
/* Static, so that LeakSanitizer sees what the library keeps for its life
 * (the default PD's context, regions) as reachable. */
static struct ibv_context ctxs[STUB_MAX];
static struct ibv_pd pds[STUB_MAX];
static struct ibv_mr mrs[4096];
static char mr_used[4096];

#define STUB_API __attribute__((visibility("default")))

STUB_API struct ibv_device **ibv_get_device_list(int *n)
{
	struct ibv_device **list = calloc(STUB_MAX + 1, sizeof(*list));
	const char *s = getenv("STUB_IBV_DEVICES");
	int k = 0;
	if (!list)
		return NULL;
	if (s && !strcmp(s, "!")) {
		free(list);
		errno = EPERM;
		return NULL;
	}
	while (s && *s && k < STUB_MAX) {
		const char *colon = strchr(s, ':');
		if (!colon || (size_t)(colon - s) >= sizeof(devs[k].name))
			break;
		memset(&devs[k], 0, sizeof(devs[k]));
		memcpy(devs[k].name, s, (size_t)(colon - s));
		states[k] = colon[1];
		list[k] = &devs[k];
		k++;
		s = strchr(colon, ',');
		s = s ? s + 1 : NULL;
	}
	if (n)
		*n = k;
	return list;
}

STUB_API void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

STUB_API const char *ibv_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

STUB_API struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	if (states[dev - devs] == 'x') {
		errno = EACCES;
		return NULL;
	}
	struct ibv_context *ctx = &ctxs[dev - devs];
	*ctx = (struct ibv_context){ .device = dev };
	return ctx;
}

STUB_API int ibv_close_device(struct ibv_context *ctx)
{
	(void)ctx;
	return 0;
}

STUB_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	if (states[ctx - ctxs] == 'p') {
		errno = ENOSPC;
		return NULL;
	}
	struct ibv_pd *pd = &pds[ctx - ctxs];
	*pd = (struct ibv_pd){ .context = ctx };
	return pd;
}

STUB_API int ibv_dealloc_pd(struct ibv_pd *pd)
{
	(void)pd;
	return 0;
}

STUB_API int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	(void)ctx;
	memset(attr, 0, sizeof(*attr));
	attr->phys_port_cnt = 1;
	return 0;
}

/* IBVERBS_1.1's ibv_query_port takes the older struct, a prefix of
 * today's (verbs.h makes the name a macro for its inline wrapper). */
#undef ibv_query_port
STUB_API int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *compat)
{
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;
	if (port != 1)
		return EINVAL;
	char st = states[ctx->device - devs];
	attr->state = st == '1' || st == 'p' ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	return 0;
}

STUB_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
					 unsigned int access)
{
	(void)iova;
	(void)access;
	for (uint32_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++) {
		if (__atomic_exchange_n(&mr_used[i], 1, __ATOMIC_ACQUIRE))
			continue;
		mrs[i] = (struct ibv_mr){ .context = pd->context, .pd = pd, .addr = addr,
					  .length = len, .lkey = 0x100 + i, .rkey = 0x100 + i };
		return &mrs[i];
	}
	errno = ENOMEM;
	return NULL;
}

STUB_API int ibv_dereg_mr(struct ibv_mr *mr)
{
	__atomic_store_n(&mr_used[mr - mrs], 0, __ATOMIC_RELEASE);
	return 0;
}

STUB_API int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
			  int access)
{
	(void)mr, (void)flags, (void)pd, (void)addr, (void)len, (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

STUB_API int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	(void)ctx, (void)port, (void)index;
	memset(gid, 0, sizeof(*gid));
	return 0;
}

STUB_API const char *ibv_port_state_str(enum ibv_port_state state)
{
	return state == IBV_PORT_ACTIVE ? "PORT_ACTIVE" : "PORT_DOWN";
}
