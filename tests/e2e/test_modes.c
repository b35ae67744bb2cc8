/* SPDX-License-Identifier: MIT */
/*
 * test_modes.c - registration modes as the device enforces them
 * (doc/modes.md): huge-page chunks (explicit pages reserved in the guest,
 * then the THP fallback), memory windows of type 1 and 2B (a peer reaches
 * exactly the window, and nothing after revocation), re-registration
 * (revoking REMOTE_WRITE from a whole heap; replacing every key), and the
 * ODP capability checks, explicit and implicit (rxe has no ODP).
 */
#include <stdio.h>
#include <stdlib.h>

#include "e2e.h"

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert(rdma_malloc_stats_get(&st) == 0);
	return st;
}

/* RDMA READ of [raddr, raddr+len) with an explicit rkey into @dst. */
static int read_raw(void *dst, size_t len, uint64_t raddr, uint32_t rkey)
{
	uint32_t lkey;
	if (rdma_malloc_keys(dst, len, e2e.pd, &lkey, NULL))
		return E2E_ST_KEYS;
	if (e2e_post_read(&e2e, dst, len, lkey, raddr, rkey, 99))
		return E2E_ST_POST;
	return e2e_wait(&e2e, 0, NULL, E2E_WC_TIMEOUT_MS);
}

/* ------------------------------------------------------------ huge pages */

static long meminfo(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	long v = -1;
	size_t n = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':')
			v = strtol(line + n + 1, NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static int set_nr_hugepages(long n)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "w");
	if (!f)
		return errno;
	int ok = fprintf(f, "%ld\n", n) > 0;
	return fclose(f) == 0 && ok ? 0 : EIO;
}

/* The kernel page size of the mapping holding @p, in kB (smaps). */
static long kernel_page_kb(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0;
	long kb = -1;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char c;
		if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3) {
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (in && sscanf(line, "KernelPageSize: %ld kB", &kb) == 1)
			break;
	}
	if (f)
		fclose(f);
	return kb;
}

static void rdma_through(uint8_t *buf, size_t len, uint32_t seed, const char *what)
{
	uint8_t *src = rdma_malloc(len), *back = rdma_malloc(len);
	cr_assert(src && back, "allocation: %s", strerror(errno));
	e2e_fill(src, len, seed);
	memset(buf, 0, len);
	char w[160];
	snprintf(w, sizeof(w), "RDMA WRITE of %zu B into %s", len, what);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, buf, src, len), w);
	E2E_ASSERT_PATTERN(buf, len, seed, w);
	memset(back, 0, len);
	snprintf(w, sizeof(w), "RDMA READ of %zu B from %s", len, what);
	E2E_ASSERT_WC_OK(e2e_read(&e2e, back, buf, len), w);
	E2E_ASSERT_PATTERN(back, len, seed, w);
	rdma_free(src);
	rdma_free(back);
}

static void thp_fallback(void)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
		.flags = RDMA_HEAP_HUGEPAGES });
	cr_assert(h);
	uint64_t fb0 = stats().hugepage_fallbacks;
	const size_t len = 5 * MiB / 2;
	uint8_t *buf = rdma_heap_malloc(h, len);
	cr_assert(buf);
	struct rdma_malloc_stats st = stats();
	cr_assert(st.hugetlb_chunks == 0 && st.hugepage_fallbacks > fb0,
		  "without huge pages: hugetlb_chunks %lu, hugepage_fallbacks %lu",
		  (unsigned long)st.hugetlb_chunks, (unsigned long)st.hugepage_fallbacks);
	struct ibv_mr *mr = rdma_malloc_mr(buf, len, NULL);
	cr_assert(mr);
	if (st.thp_chunks)
		cr_assert(mr->length % (2 * MiB) == 0, "THP region of %zu bytes", mr->length);
	cr_log_info("THP fallback: thp_chunks %lu, region [%p, +%zu), AnonHugePages %ld kB",
		    (unsigned long)st.thp_chunks, mr->addr, mr->length, meminfo("AnonHugePages"));
	rdma_through(buf, len, 3002, "a buffer of a huge-page heap without huge pages");
	rdma_free(buf);
	cr_assert(rdma_heap_destroy(h) == 0);
}

/* One test, not two: nr_hugepages is global and tests run in parallel. */
E2E_TEST(hugepages, 180)
{
	long before = meminfo("HugePages_Total");
	int err = set_nr_hugepages(32);
	if (err)
		cr_skip_test("cannot reserve huge pages (/proc/sys/vm/nr_hugepages: %s)", strerror(err));
	long free_pages = meminfo("HugePages_Free");
	cr_assert(free_pages >= 8, "reserved 32 huge pages, %ld free", free_pages);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
		.flags = RDMA_HEAP_HUGEPAGES });
	cr_assert(h, "rdma_heap_create(HUGEPAGES): %s", strerror(errno));
	const size_t len = 3 * MiB + 4321; /* a chunk of jemalloc's odd sizes */
	uint8_t *buf = rdma_heap_malloc(h, len);
	cr_assert(buf, "rdma_heap_malloc: %s", strerror(errno));
	struct rdma_malloc_stats st = stats();
	cr_assert(st.hugetlb_chunks >= 1, "no chunk on explicit huge pages (hugetlb_chunks %lu, "
		  "fallbacks %lu)", (unsigned long)st.hugetlb_chunks, (unsigned long)st.hugepage_fallbacks);
	long kb = kernel_page_kb(buf);
	cr_assert(kb == 2048, "buffer's mapping has %ld kB pages, want 2048", kb);
	struct ibv_mr *mr = rdma_malloc_mr(buf, len, NULL);
	cr_assert(mr, "rdma_malloc_mr: %s", strerror(errno));
	cr_assert((uintptr_t)mr->addr % (2 * MiB) == 0 && mr->length % (2 * MiB) == 0,
		  "region [%p, +%zu) does not cover whole 2 MiB pages", mr->addr, mr->length);
	cr_log_info("hugetlb chunk: region [%p, +%zu), %ld huge pages left free", mr->addr, mr->length,
		    meminfo("HugePages_Free"));
	rdma_through(buf, len, 3001, "a buffer on explicit 2 MiB pages");
	rdma_free(buf);
	cr_assert(rdma_heap_destroy(h) == 0);
	cr_assert(stats().hugetlb_chunks == 0, "hugetlb gauge after destroy");
	/* Then without huge pages: the THP (or 4 KiB) fallback. */
	cr_assert(set_nr_hugepages(0) == 0 && meminfo("HugePages_Total") == 0, "releasing the huge pages");
	thp_fallback();
	set_nr_hugepages(before > 0 ? before : 0);
}

/* ------------------------------------------------------------ memory windows */

#include <time.h>
static double t0;
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
#define STEP(what) cr_log_info("%.2f s: %s", now_s() - t0, (what))

static struct ibv_mw *grant(uint8_t *p, size_t len, int type)
{
	STEP("grant");
	struct ibv_mw *mw = rdma_malloc_mw_grant(e2e.qp[1], p, len,
						 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE, type, 11,
						 IBV_SEND_SIGNALED);
	cr_assert(mw, "rdma_malloc_mw_grant(type %d): %s", type, strerror(errno));
	struct ibv_wc wc;
	int st = e2e_wait(&e2e, 1, &wc, E2E_WC_TIMEOUT_MS);
	E2E_ASSERT_WC_OK(st, "bind completion");
	cr_assert(wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 11, "bind completion has opcode %d, wr_id %lu",
		  wc.opcode, (unsigned long)wc.wr_id);
	return mw;
}

static void windows(int type)
{
	const size_t blen = 64 * KiB, off = 4096 + 100, wlen = 8000;
	t0 = now_s();
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .flags = RDMA_HEAP_MW_BIND });
	cr_assert(h, "rdma_heap_create(MW_BIND): %s", strerror(errno));
	uint8_t *buf = rdma_heap_malloc(h, blen);
	uint8_t *src = rdma_malloc(blen), *dst = rdma_malloc(blen), *ref = rdma_malloc(blen);
	cr_assert(buf && src && dst && ref);
	e2e_fill(buf, blen, 4000);
	memcpy(ref, buf, blen);

	struct ibv_mw *mw = grant(buf + off, wlen, type);
	uint32_t mr_rkey;
	E2E_ASSERT_KEYS(buf, blen, NULL, NULL, &mr_rkey, "chunk keys");
	cr_log_info("type %d window rkey 0x%x on [%p, +%zu); the chunk's rkey 0x%x", type, mw->rkey,
		    (void *)(buf + off), wlen, mr_rkey);

	/* Inside: write and read. */
	e2e_fill(src, wlen, 4001);
	E2E_ASSERT_WC_OK(e2e_write_raw(&e2e, src, wlen, (uintptr_t)(buf + off), mw->rkey),
			 "RDMA WRITE inside the window");
	E2E_ASSERT_PATTERN(buf + off, wlen, 4001, "window after RDMA WRITE");
	E2E_ASSERT_SAME(buf, ref, off, "bytes before the window");
	E2E_ASSERT_SAME(buf + off + wlen, ref + off + wlen, blen - off - wlen, "bytes after the window");
	memcpy(ref + off, buf + off, wlen);
	memset(dst, 0, wlen);
	E2E_ASSERT_WC_OK(read_raw(dst, wlen, (uintptr_t)(buf + off), mw->rkey), "RDMA READ inside the window");
	E2E_ASSERT_PATTERN(dst, wlen, 4001, "RDMA READ inside the window");

	STEP("One byte past the end");
	/* One byte past the end.  The IB spec (o10-36/37) wants it refused;
	 * Debian 6.1's rxe checks a window's access against the window but its
	 * range only against the underlying region (rxe_resp.c check_rkey:
	 * mr_check_range(mw->mr, ...)), so there the byte is written.  That is
	 * a device limitation, reported, and what rxe does enforce is checked:
	 * the window cannot reach past its region (the chunk). */
	int rxe = strncmp(ibv_get_device_name(e2e.ctx->device), "rxe", 3) == 0;
	e2e_fill(src, wlen + 1, 4002);
	int st = e2e_write_raw(&e2e, src, wlen + 1, (uintptr_t)(buf + off), mw->rkey);
	if (rxe && st == IBV_WC_SUCCESS) {
		cr_log_info("NOTE: rxe does not enforce memory-window bounds (only the region's): the RDMA WRITE "
			    "one byte past the type %d window was executed", type);
		memcpy(ref + off, buf + off, wlen + 1);
		struct ibv_mr *mr = rdma_malloc_mr(buf, 1, NULL);
		uintptr_t end = (uintptr_t)mr->addr + mr->length;
		st = e2e_write_raw(&e2e, src, 2, end - 1, mw->rkey);
		E2E_ASSERT_WC_REFUSED(st, "RDMA WRITE through the window running one byte past its region");
	} else {
		E2E_ASSERT_WC_REFUSED(st, "RDMA WRITE running one byte past the window");
	}
	E2E_ASSERT_SAME(buf, ref, blen, "buffer after the refused write");
	/* Free a type 2 window before destroying its QP: rxe waits ~50 s in
	 * QP destruction for a bound window's reference otherwise. */
	cr_assert(rdma_malloc_mw_free(mw) == 0);
	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);

	STEP("One byte before the start");
	/* One byte before the start. */
	mw = grant(buf + off, wlen, type);
	st = read_raw(dst, 1, (uintptr_t)(buf + off - 1), mw->rkey);
	if (rxe && st == IBV_WC_SUCCESS) {
		cr_log_info("NOTE: rxe does not enforce memory-window bounds: the RDMA READ of the byte before the "
			    "type %d window was executed", type);
		struct ibv_mr *mr = rdma_malloc_mr(buf, 1, NULL);
		st = read_raw(dst, 2, (uintptr_t)mr->addr - 1, mw->rkey);
		E2E_ASSERT_WC_REFUSED(st, "RDMA READ through the window of the byte before its region");
	} else {
		E2E_ASSERT_WC_REFUSED(st, "RDMA READ of the byte before the window");
	}
	cr_assert(rdma_malloc_mw_free(mw) == 0);
	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);

	STEP("Revoked");
	/* Revoked. */
	mw = grant(buf + off, wlen, type);
	uint32_t rkey = mw->rkey;
	E2E_ASSERT_WC_OK(read_raw(dst, 16, (uintptr_t)(buf + off), rkey), "RDMA READ before revocation");
	cr_assert(rdma_malloc_mw_revoke(e2e.qp[1], mw, 12, IBV_SEND_SIGNALED) == 0, "revoke");
	struct ibv_wc wc;
	E2E_ASSERT_WC_OK(e2e_wait(&e2e, 1, &wc, E2E_WC_TIMEOUT_MS), "revocation completion");
	int want_op = type == IBV_MW_TYPE_2 ? IBV_WC_LOCAL_INV : IBV_WC_BIND_MW;
	cr_assert(wc.wr_id == 12 && (int)wc.opcode == want_op, "revocation completion: wr_id %lu opcode %d, "
		  "want 12 and %d", (unsigned long)wc.wr_id, wc.opcode, want_op);
	e2e_fill(src, wlen, 4003);
	st = e2e_write_raw(&e2e, src, 16, (uintptr_t)(buf + off), rkey);
	E2E_ASSERT_WC_REFUSED(st, "RDMA WRITE with a revoked window's rkey");
	E2E_ASSERT_SAME(buf, ref, blen, "buffer after a write through a revoked window");
	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	if (type == IBV_MW_TYPE_1) { /* the unbound window's new rkey reaches nothing either */
		st = read_raw(dst, 16, (uintptr_t)(buf + off), mw->rkey);
		E2E_ASSERT_WC_REFUSED(st, "RDMA READ with an unbound type 1 window's new rkey");
		cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	}
	cr_assert(rdma_malloc_mw_free(mw) == 0);
	struct rdma_malloc_stats s = stats();
	cr_assert(s.mws == 0 && s.mw_binds == 3 && s.mw_revokes == 1, "mws %lu binds %lu revokes %lu",
		  (unsigned long)s.mws, (unsigned long)s.mw_binds, (unsigned long)s.mw_revokes);

	STEP("The chunk's own rkey gives no remote access (the heap has none)");
	/* The chunk's own rkey gives no remote access (the heap has none). */
	st = e2e_write_raw(&e2e, src, 16, (uintptr_t)(buf + off), mr_rkey);
	E2E_ASSERT_WC_REFUSED(st, "RDMA WRITE with the MW_BIND heap's own rkey");
	rdma_free(buf);
	rdma_free(src);
	rdma_free(dst);
	rdma_free(ref);
	cr_assert(rdma_heap_destroy(h) == 0);
}

E2E_TEST(mw_type2, 60)
{
	windows(IBV_MW_TYPE_2);
}

E2E_TEST(mw_type1, 60)
{
	windows(IBV_MW_TYPE_1);
}

/* ------------------------------------------------------------ re-registration */

struct report {
	int calls;
	uint32_t new_rkey;
};

static void on_change(void *ctx, struct ibv_pd *pd, void *addr, size_t len, uint32_t ol, uint32_t ok,
		      uint32_t nl, uint32_t nk)
{
	struct report *r = ctx;
	(void)pd, (void)addr, (void)len, (void)ol, (void)ok, (void)nl;
	r->calls++;
	r->new_rkey = nk;
}

E2E_TEST(rereg_revoke_remote_write, 120)
{
	const size_t len = 256 * KiB;
	const unsigned rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = rw });
	uint8_t *buf = rdma_heap_malloc(h, len), *src = rdma_malloc(len), *back = rdma_malloc(len);
	cr_assert(h && buf && src && back);
	e2e_fill(src, len, 5000);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, buf, src, len), "RDMA WRITE before the change");
	uint32_t lk0, rk0;
	E2E_ASSERT_KEYS(buf, len, NULL, &lk0, &rk0, "keys before");
	uint64_t gen0 = rdma_heap_key_generation(h);

	struct report r = { 0 };
	int err = rdma_heap_set_access(h, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0, on_change, &r);
	cr_assert(err == 0, "rdma_heap_set_access: %s", strerror(err));
	uint32_t lk1, rk1;
	E2E_ASSERT_KEYS(buf, len, NULL, &lk1, &rk1, "keys after");
	int changed = lk1 != lk0 || rk1 != rk0;
	struct rdma_malloc_stats st = stats();
	cr_log_info("revoking REMOTE_WRITE: %s (in place %lu, replaced %lu), keys %s (rkey 0x%x -> 0x%x)",
		    st.rereg_in_place ? "ibv_rereg_mr" : "re-registration", (unsigned long)st.rereg_in_place,
		    (unsigned long)st.rereg_replaced, changed ? "changed" : "kept", rk0, rk1);
	cr_assert((r.calls > 0) == changed, "keys %s but %d reported", changed ? "changed" : "kept", r.calls);
	cr_assert(rdma_heap_key_generation(h) == gen0 + (changed ? 1 : 0), "key generation");
	if (changed)
		cr_assert(r.new_rkey == rk1, "reported rkey 0x%x, lookup 0x%x", r.new_rkey, rk1);

	e2e_fill(src, len, 5001);
	int st1 = e2e_write(&e2e, buf, src, len);
	E2E_ASSERT_WC_REFUSED(st1, "RDMA WRITE after REMOTE_WRITE was revoked");
	E2E_ASSERT_PATTERN(buf, len, 5000, "buffer after the refused write");
	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	if (changed) { /* the old key must not write either */
		st1 = e2e_write_raw(&e2e, src, len, (uintptr_t)buf, rk0);
		E2E_ASSERT_WC_REFUSED(st1, "RDMA WRITE with the old rkey");
		cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	}
	memset(back, 0, len);
	E2E_ASSERT_WC_OK(e2e_read(&e2e, back, buf, len), "RDMA READ after REMOTE_WRITE was revoked");
	E2E_ASSERT_PATTERN(back, len, 5000, "RDMA READ after the change");

	/* Every key replaced: the old rkey stops working even for reads. */
	memset(&r, 0, sizeof(r));
	err = rdma_heap_set_access(h, rw, RDMA_HEAP_SET_ACCESS_NEW_KEYS, on_change, &r);
	cr_assert(err == 0, "rdma_heap_set_access(NEW_KEYS): %s", strerror(err));
	uint32_t rk2;
	E2E_ASSERT_KEYS(buf, len, NULL, NULL, &rk2, "keys after NEW_KEYS");
	cr_assert(rk2 != rk1, "NEW_KEYS kept the rkey 0x%x", rk1);
	cr_assert(r.calls >= 1 && r.new_rkey == rk2, "%d reports, last rkey 0x%x, lookup 0x%x", r.calls,
		  r.new_rkey, rk2);
	int st2 = read_raw(back, 64, (uintptr_t)buf, rk1);
	E2E_ASSERT_WC_REFUSED(st2, "RDMA READ with a replaced rkey");
	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, buf, src, len), "RDMA WRITE with the new keys (REMOTE_WRITE back)");
	E2E_ASSERT_PATTERN(buf, len, 5001, "buffer after RDMA WRITE with new keys");
	rdma_free(buf);
	rdma_free(src);
	rdma_free(back);
	cr_assert(rdma_heap_destroy(h) == 0);
}

/* ------------------------------------------------------------ ODP */

/* rxe has no ODP: an ODP heap is refused cleanly (EOPNOTSUPP) and nothing
 * else changes.  On a device with RC ODP the heap must work end to end. */
/* The device's extended attributes (odp_caps). */
static struct ibv_device_attr_ex device_ex(void)
{
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof(a));
	int err = ibv_query_device_ex(e2e.ctx, NULL, &a);
	cr_assert(err == 0, "ibv_query_device_ex: %s", strerror(err));
	return a;
}

E2E_TEST(odp_capability, 120)
{
	struct ibv_device_attr_ex a = device_ex();
	int err;
	uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			IBV_ODP_SUPPORT_READ;
	int has = (a.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
		  (a.odp_caps.per_transport_caps.rc_odp_caps & need) == need;
	cr_log_info("%s: odp general_caps 0x%lx, rc_odp_caps 0x%x: %s", ibv_get_device_name(e2e.ctx->device),
		    (unsigned long)a.odp_caps.general_caps, a.odp_caps.per_transport_caps.rc_odp_caps,
		    has ? "RC ODP" : "no RC ODP");
	const unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	errno = 0;
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = acc, .flags = RDMA_HEAP_ODP });
	uint8_t *plain = rdma_malloc(256 * KiB);
	cr_assert(plain);
	if (!has) {
		cr_assert(h == NULL && errno == EOPNOTSUPP, "ODP heap on a device without ODP: %s, want EOPNOTSUPP",
			  h ? "created" : strerror(errno));
		cr_assert(rdma_malloc_prefetch(plain, 4096, NULL, 0) == EINVAL, "prefetch of non-ODP memory");
		cr_assert(stats().heaps == 1, "a refused ODP heap left a heap behind");
		rdma_through(plain, 256 * KiB, 6000, "a default-heap buffer after a refused ODP heap");
	} else {
		cr_assert(h, "ODP heap on a device with RC ODP: %s", strerror(errno));
		uint8_t *buf = rdma_heap_malloc(h, 256 * KiB);
		cr_assert(buf);
		err = rdma_malloc_prefetch(buf, 256 * KiB, NULL, 1);
		cr_assert(err == 0, "rdma_malloc_prefetch: %s", strerror(err));
		rdma_through(buf, 256 * KiB, 6001, "an ODP heap buffer");
		rdma_free(buf);
		cr_assert(rdma_heap_destroy(h) == 0);
	}
	rdma_free(plain);
}

/* Implicit ODP: one region for the whole address space, local access only.
 * rxe has none: refused cleanly.  Where the device has it, a buffer of the
 * heap is the local side of an RDMA WRITE and READ (its lkey is the shared
 * region's), every byte checked. */
E2E_TEST(odp_implicit_capability, 120)
{
	struct ibv_device_attr_ex a = device_ex();
	uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
	int has = (a.odp_caps.general_caps & IBV_ODP_SUPPORT) && (a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) &&
		  (a.odp_caps.per_transport_caps.rc_odp_caps & need) == need;
	cr_log_info("%s: implicit ODP %s", ibv_get_device_name(e2e.ctx->device), has ? "supported" : "not supported");
	const unsigned flags = RDMA_HEAP_ODP | RDMA_HEAP_ODP_IMPLICIT;
	errno = 0;
	cr_assert(!rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
							     .flags = flags }) && errno == EPERM,
		  "implicit ODP heap with remote access: want EPERM");
	errno = 0;
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE, .flags = flags });
	uint8_t *peer = rdma_malloc(256 * KiB);
	cr_assert(peer);
	if (!has) {
		cr_assert(h == NULL && errno == EOPNOTSUPP, "implicit ODP heap on a device without it: %s, want EOPNOTSUPP",
			  h ? "created" : strerror(errno));
		cr_assert(stats().heaps == 1, "a refused implicit ODP heap left a heap behind");
		rdma_through(peer, 256 * KiB, 6002, "a default-heap buffer after a refused implicit ODP heap");
	} else {
		cr_assert(h, "implicit ODP heap on a device with implicit ODP: %s", strerror(errno));
		uint8_t *buf = rdma_heap_malloc(h, 256 * KiB);
		cr_assert(buf);
		e2e_fill(buf, 256 * KiB, 6003);
		E2E_ASSERT_WC_OK(e2e_write(&e2e, peer, buf, 256 * KiB), "RDMA WRITE from an implicit ODP buffer");
		E2E_ASSERT_PATTERN(peer, 256 * KiB, 6003, "RDMA WRITE from an implicit ODP buffer");
		memset(buf, 0, 256 * KiB);
		E2E_ASSERT_WC_OK(e2e_read(&e2e, buf, peer, 256 * KiB), "RDMA READ into an implicit ODP buffer");
		E2E_ASSERT_PATTERN(buf, 256 * KiB, 6003, "RDMA READ into an implicit ODP buffer");
		rdma_free(buf);
		cr_assert(rdma_heap_destroy(h) == 0);
	}
	rdma_free(peer);
}
