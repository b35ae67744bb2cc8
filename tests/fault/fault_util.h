/* SPDX-License-Identifier: MIT */
/*
 * fault_util.h - checks shared by the fault-injection tests.  Every check
 * compares the library's view (stats, lookups) with the fake verbs backend's
 * (which regions are really registered), so that a lie of either shows.
 */
#ifndef RDMALLOC_FAULT_UTIL_H
#define RDMALLOC_FAULT_UTIL_H

#include <criterion/criterion.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock_now.h"
#include "fake_verbs.h"
#include "reserve.h"
#include "fault.h"
#include "rdma_malloc.h"

/* Once the reserve's thread is done: counts that hold still. */
static inline struct rdma_malloc_stats fu_stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

/* Number and bytes of the regions the backend holds live (of @pd, or all
 * for NULL). */
static inline size_t fu_backend(struct ibv_pd *pd, size_t *bytes)
{
	static struct fake_mr_info mrs[FAKE_MAX_MRS];
	size_t n = fake_snapshot(mrs, FAKE_MAX_MRS), k = 0, b = 0;
	for (size_t i = 0; i < n; i++) {
		if (pd && mrs[i].pd != pd)
			continue;
		k++;
		b += mrs[i].len;
	}
	if (bytes)
		*bytes = b;
	return k;
}

/* The library's counters agree with what the backend really holds. */
static inline void fu_check_accounting(const char *when)
{
	struct rdma_malloc_stats st = fu_stats();
	size_t bytes, n = fu_backend(NULL, &bytes);
	cr_assert_eq(st.mrs, n, "%s: stats say %llu regions, the backend holds %zu", when,
		     (unsigned long long)st.mrs, n);
	cr_assert_eq(st.registered_bytes, bytes, "%s: stats say %llu registered bytes, the backend holds %zu",
		     when, (unsigned long long)st.registered_bytes, bytes);
}

/*
 * Honest lookup: if the library gives a key for [p, p+len) under @pd, that
 * key is of a region the backend holds live for that PD, covering the range.
 * Otherwise the answer is one of the documented errors.  Returns the lookup's
 * result.
 */
static struct fake_mr_info fu_mrs[FAKE_MAX_MRS];
static size_t fu_nmrs;

/* Take a copy of the backend's live regions for fu_check_lookup_cached(). */
static inline void fu_refresh(void)
{
	fu_nmrs = fake_snapshot(fu_mrs, FAKE_MAX_MRS);
}

static inline int fu_check_lookup_cached(const void *p, size_t len, struct ibv_pd *pd, const char *when)
{
	uint32_t lk = 0, rk = 0;
	int e = rdma_malloc_keys(p, len, pd, &lk, &rk);
	errno = 0;
	struct ibv_mr *mr = rdma_malloc_mr(p, len, pd);
	int me = mr ? 0 : errno;
	cr_assert_eq(e, me, "%s: rdma_malloc_keys(%p) says %d, rdma_malloc_mr says %d", when, p, e, me);
	if (e) {
		cr_assert(e == ENOENT || e == ERANGE || e == ENODEV, "%s: lookup of %p: unexpected error %d",
			  when, p, e);
		return e;
	}
	/* The region must be live in the backend, of that PD, and cover the
	 * range.  (Another live region of the PD may cover it too: one whose
	 * deregistration failed.) */
	const struct fake_mr_info *f = NULL;
	for (size_t i = 0; i < fu_nmrs && !f; i++)
		if (fu_mrs[i].mr == mr)
			f = &fu_mrs[i];
	cr_assert(f, "%s: lookup of %p under pd %p gave region %p, which the backend does not hold live",
		  when, p, (void *)pd, (void *)mr);
	cr_assert(f->pd == (pd ? pd : fake_pd(0)), "%s: lookup of %p under pd %p gave a region of pd %p", when,
		  p, (void *)pd, (void *)f->pd);
	cr_assert(mr->lkey == lk && mr->rkey == rk, "%s: keys of %p differ between keys() and mr()", when, p);
	cr_assert((const char *)p >= (const char *)f->addr &&
			  (const char *)p + (len ? len : 1) <= (const char *)f->addr + f->len,
		  "%s: [%p, +%zu) is not inside its region [%p, +%zu)", when, p, len, f->addr, f->len);
	return 0;
}

static inline int fu_check_lookup(const void *p, size_t len, struct ibv_pd *pd, const char *when)
{
	fu_refresh();
	return fu_check_lookup_cached(p, len, pd, when);
}

/* Every page of every region the backend holds live is still mapped (a
 * registered chunk must never be unmapped, even when deregistration failed). */
static inline void fu_check_registered_mapped(const char *when)
{
	static struct fake_mr_info mrs[FAKE_MAX_MRS];
	size_t n = fake_snapshot(mrs, FAKE_MAX_MRS);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t i = 0; i < n; i++) {
		size_t pages = (mrs[i].len + page - 1) / page;
		unsigned char *vec = malloc(pages);
		int r = mincore(mrs[i].addr, mrs[i].len, vec);
		free(vec);
		cr_assert_eq(r, 0, "%s: registered region [%p, +%zu) is not mapped any more (%s)", when,
			     mrs[i].addr, mrs[i].len, strerror(errno));
	}
}

/* VmSize of this process, in bytes. */
static inline size_t fu_vmsize(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb << 10;
}

static const char *const fu_site_names[] = { "ibv_reg_mr", "ibv_dereg_mr", "mmap", "hugepage",
							     "thread", "populate", "metadata mapping" };

#endif
