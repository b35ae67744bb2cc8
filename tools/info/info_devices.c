/* SPDX-License-Identifier: MIT */
/*
 * info_devices.c - rdmalloc-info's devices: every RDMA device and port
 * (state, link layer, GID 0), what it offers rdmalloc (ODP for RC,
 * implicit ODP, memory windows), and the one the library would open for
 * its default PD: RDMALLOC_DEVICE, else the first with an active port that
 * gives a PD (the rule of src/sys/verbs.c: info allocates a PD on that
 * device and frees it).  A command of its own, like ibv_devinfo: it calls
 * libibverbs directly, not through the library.  Also the system's
 * side: huge pages and RLIMIT_MEMLOCK.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "info.h"
#include "out.h"

static int any_port_active(struct ibv_context *ctx, int ports)
{
	for (int p = 1; p <= ports; p++) {
		struct ibv_port_attr pa;
		if (!ibv_query_port(ctx, (uint8_t)p, &pa) && pa.state == IBV_PORT_ACTIVE)
			return 1;
	}
	return 0;
}

static const char *link_layer(uint8_t l)
{
	switch (l) {
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
	default: return "unspecified";
	}
}

static void ports(struct ibv_context *ctx, int n)
{
	out_list("ports");
	for (int p = 1; p <= n; p++) {
		struct ibv_port_attr pa;
		out_begin(NULL);
		out_u64("port", (uint64_t)p, NULL);
		if (ibv_query_port(ctx, (uint8_t)p, &pa)) {
			out_str("error", strerror(errno));
			out_end();
			continue;
		}
		out_str("state", ibv_port_state_str(pa.state));
		out_str("link_layer", link_layer(pa.link_layer));
		union ibv_gid gid;
		char g[48];
		if (!ibv_query_gid(ctx, (uint8_t)p, 0, &gid)) {
			const uint8_t *b = gid.raw;
			snprintf(g, sizeof(g), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
				 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
				 b[14], b[15]);
			out_str("gid0", g);
		} else {
			out_null("gid0", "(cannot be read)");
		}
		out_end();
	}
	out_list_end();
}

/* Whether @ctx gives a PD, as the library's default PD would take one
 * there (errno, else 0). */
static int pd_refused(struct ibv_context *ctx)
{
	errno = 0;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return errno ? errno : ENOMEM;
	ibv_dealloc_pd(pd);
	return 0;
}

void info_devices(const char *wanted)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	int list_err = list ? 0 : errno;
	int chosen = 0; /* the library's choice is made once, in list order */
	char why[160]; /* why none, in the library's words (src/sys/verbs.c) */
	if (!list && list_err == ENOSYS)
		snprintf(why, sizeof(why), "no RDMA device (the kernel has no RDMA support)");
	else if (!list)
		snprintf(why, sizeof(why), "cannot list RDMA devices: %s", strerror(list_err));
	else if (!n)
		snprintf(why, sizeof(why), "no RDMA device found");
	else if (*wanted)
		snprintf(why, sizeof(why), "RDMA device \"%s\" not found", wanted);
	else
		snprintf(why, sizeof(why), "no RDMA device has an active port");
	out_list("devices");
	for (int i = 0; list && i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		int named = *wanted && !strcmp(name, wanted);
		out_begin(NULL);
		out_str("name", name);
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx) {
			if (!chosen && (!*wanted || named))
				snprintf(why, sizeof(why), "cannot open %s: %s", name, strerror(errno));
			out_str("error", strerror(errno));
			out_bool("default_pd", 0);
			out_end();
			continue;
		}
		struct ibv_device_attr_ex ax;
		memset(&ax, 0, sizeof(ax));
		int q = ibv_query_device_ex(ctx, NULL, &ax);
		int nports = q ? 0 : ax.orig_attr.phys_port_cnt;
		int use = !chosen && (*wanted ? named : any_port_active(ctx, nports));
		int refused = use ? pd_refused(ctx) : 0;
		if (refused) {
			use = 0;
			snprintf(why, sizeof(why), "ibv_alloc_pd on %s: %s", name, strerror(refused));
			out_str("pd_error", strerror(refused));
		}
		chosen |= use;
		out_bool("default_pd", use);
		if (q) {
			out_str("error", strerror(q));
		} else {
			uint64_t caps = ax.orig_attr.device_cap_flags;
			out_bool("odp_rc", (ax.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
						   (ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_SEND));
			out_bool("odp_implicit", (ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) != 0);
			out_bool("memory_windows", (caps & IBV_DEVICE_MEM_WINDOW) != 0);
			out_bool("memory_windows_type_2b", (caps & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0);
			ports(ctx, nports);
		}
		ibv_close_device(ctx);
		out_end();
	}
	out_list_end();
	if (!list)
		out_str("devices_error", list_err == ENOSYS ? "the kernel has no RDMA support" : strerror(list_err));
	if (!chosen) {
		char none[168];
		snprintf(none, sizeof(none), "none: %s", why);
		out_str("default_pd", none);
	}
	if (list)
		ibv_free_device_list(list);
}

/* The first number in @path, or -1. */
static long long read_number(const char *path)
{
	FILE *f = fopen(path, "r");
	long long v = -1;
	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

void info_system(void)
{
	out_begin("hugepages");
	static const struct {
		const char *key, *path;
	} sizes[] = {
		{ "free_2m", "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages" },
		{ "free_1g", "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages" },
	};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		long long v = read_number(sizes[i].path);
		if (v < 0)
			out_null(sizes[i].key, "(no such page size)");
		else
			out_u64(sizes[i].key, (uint64_t)v, NULL);
	}
	char thp[128] = "", mode[32] = "unavailable";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	if (f) {
		if (fgets(thp, sizeof(thp), f)) {
			char *a = strchr(thp, '['), *b = a ? strchr(a, ']') : NULL;
			if (a && b && (size_t)(b - a - 1) < sizeof(mode)) {
				memcpy(mode, a + 1, (size_t)(b - a - 1));
				mode[b - a - 1] = '\0';
			}
		}
		fclose(f);
	}
	out_str("transparent", mode);
	out_end();

	struct rlimit rl;
	out_begin("memlock");
	if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
		out_str("error", strerror(errno));
	} else {
		char b[32];
		if (rl.rlim_cur == RLIM_INFINITY)
			out_null("soft", "unlimited");
		else
			out_u64("soft", (uint64_t)rl.rlim_cur, out_bytes(rl.rlim_cur, b, sizeof(b)));
		if (rl.rlim_max == RLIM_INFINITY)
			out_null("hard", "unlimited");
		else
			out_u64("hard", (uint64_t)rl.rlim_max, out_bytes(rl.rlim_max, b, sizeof(b)));
	}
	out_end();
}
