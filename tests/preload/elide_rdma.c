/* SPDX-License-Identifier: MIT */
/*
 * elide_rdma.c - registration elision with a real device (issue 13, item
 * 3), under the LD_PRELOAD drop-in in the Soft-RoCE guest: the program's
 * own regions, re-registered in place or given a registration of their
 * own, move bytes (RDMA WRITE, every byte compared); libibverbs' own
 * ibv_dereg_mr, bypassing the drop-in, cannot take an elided region's
 * chunk registration away; a PD is detached with its last elided region
 * (the kernel then deallocates it); leaked PDs make way, and when every
 * slot is held by a busy PD the next registration goes to the kernel; no
 * key of an elided region dies under it (the PD's detach is refused while
 * the region lives), and once the program let go, the old rkey moves no
 * byte (issue 23, item 1).
 * Run with a drop-in heap that peers may write:
 *   RDMALLOC_PRELOAD_ACCESS=LOCAL_WRITE,REMOTE_WRITE \
 *   LD_PRELOAD=build/preload/librdmalloc-preload.so elide_rdma
 * Prints ok/FAIL lines and "N passed, M failed"; exit 77 (skip) without a
 * device.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rdma_env.h"
#include "rdma_malloc.h"

#define KiB ((size_t)1 << 10)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static int passed, failed;

#define CHECK(cond, ...)                     \
	do {                                 \
		if (cond) {                  \
			passed++;            \
			printf("ok   ");     \
		} else {                     \
			failed++;            \
			printf("FAIL ");     \
		}                            \
		printf(__VA_ARGS__);         \
		printf("\n");                \
	} while (0)

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		CHECK(0, "rdma_malloc_stats_get");
	return st;
}

static struct e2e_pair pair;

/* RDMA WRITE of @len patterned bytes from @src (lkey @lkey) into @dst with
 * @rkey; every byte of @dst compared.  0 or why not. */
static const char *write_and_check(uint8_t *src, uint32_t lkey, uint8_t *dst, uint32_t rkey, size_t len,
				   uint32_t seed)
{
	static char why[128];
	e2e_fill(src, len, seed);
	memset(dst, 0, len);
	int st = e2e_post_write(&pair, src, len, lkey, (uintptr_t)dst, rkey, seed);
	if (!st)
		st = e2e_wait(&pair, 0, NULL, E2E_WC_TIMEOUT_MS);
	if (st) {
		snprintf(why, sizeof(why), "RDMA WRITE: status %d (%s)", st, e2e_status_str(st));
		e2e_pair_reset(&pair);
		return why;
	}
	size_t nd = 0;
	if (e2e_check(dst, len, seed, &nd) != E2E_NO_DIFF) {
		snprintf(why, sizeof(why), "%zu bytes differ", nd);
		return why;
	}
	return NULL;
}

static int elided(const struct ibv_mr *mr, struct ibv_pd *pd)
{
	uint32_t l, r;
	return mr && !rdma_malloc_keys(mr->addr, mr->length, pd, &l, &r) && l == mr->lkey && r == mr->rkey;
}

/* Elided, told without a key lookup (which hands keys of the PD out to the
 * program: elision would never evict it): the record's handle, one the
 * kernel never issues. */
static int elided_handle(const struct ibv_mr *mr)
{
	return mr && mr->handle == UINT32_MAX;
}

static void rereg_moves_bytes(void)
{
	uint8_t *src = malloc(512 * KiB), *dst = malloc(512 * KiB);
	struct rdma_malloc_stats s0 = stats();
	struct ibv_mr *ms = ibv_reg_mr(pair.pd, src, 512 * KiB, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *md = ibv_reg_mr(pair.pd, dst, 64 * KiB, ACC);
	struct rdma_malloc_stats s1 = stats();
	CHECK(elided(ms, pair.pd) && elided(md, pair.pd) && s1.elided_registrations == s0.elided_registrations + 2,
	      "two malloc'ed buffers registered: elided");
	if (!ms || !md)
		return;
	struct ibv_mr *cmr = rdma_malloc_mr(dst, 64 * KiB, pair.pd);
	CHECK(cmr && md->handle != cmr->handle, "the elided region's handle (%u) is not its chunk's (%u)",
	      md->handle, cmr ? cmr->handle : 0);

	int r = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, dst + 128 * KiB, 256 * KiB, 0);
	CHECK(r == 0 && md->addr == dst + 128 * KiB && md->length == 256 * KiB && elided(md, pair.pd) &&
	      stats().elided_rereg_in_place == s0.elided_rereg_in_place + 1,
	      "ibv_rereg_mr CHANGE_TRANSLATION of an elided region: in place (%d)", r);
	const char *why = write_and_check(src, ms->lkey, md->addr, md->rkey, md->length, 1);
	CHECK(!why, "RDMA WRITE of 256 KiB with the re-registered region's rkey: every byte arrived%s%s",
	      why ? ": " : "", why ? why : "");

	/* libibverbs' own ibv_dereg_mr, as a library bypassing the drop-in would
	 * call it: the kernel refuses the record's handle, the chunk keeps its
	 * registration (with the chunk's handle, it would have lost it). */
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	int (*own_dereg)(struct ibv_mr *) = lib ? (int (*)(struct ibv_mr *))dlvsym(lib, "ibv_dereg_mr", "IBVERBS_1.1")
						 : NULL;
	r = own_dereg ? own_dereg(md) : -1;
	CHECK(own_dereg && r != 0, "libibverbs' own ibv_dereg_mr of the elided region fails: %s",
	      r > 0 ? strerror(r) : "(not found)");
	why = write_and_check(src, ms->lkey, md->addr, md->rkey, md->length, 2);
	CHECK(!why, "and the chunk's registration is intact: every byte arrived%s%s", why ? ": " : "",
	      why ? why : "");

	/* More access than the heap grants: a registration of its own. */
	r = ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, ACC | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(r == 0 && !elided(md, pair.pd) && stats().elided_rereg_backed == s0.elided_rereg_backed + 1,
	      "ibv_rereg_mr to REMOTE_ATOMIC, which the heap does not grant: a registration of its own (%d)", r);
	why = write_and_check(src, ms->lkey, md->addr, md->rkey, md->length, 3);
	CHECK(!why, "RDMA WRITE with its own rkey: every byte arrived%s%s", why ? ": " : "", why ? why : "");
	CHECK(ibv_dereg_mr(md) == 0 && ibv_dereg_mr(ms) == 0 && stats().elided_regions == s0.elided_regions,
	      "both deregistered");
	if (lib)
		dlclose(lib);
	free(src);
	free(dst);
}

static void pd_detached_with_last_region(void)
{
	uint8_t *buf = malloc(64 * KiB);
	struct ibv_pd *pd = ibv_alloc_pd(pair.ctx);
	struct rdma_malloc_stats s0 = stats();
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 64 * KiB, IBV_ACCESS_LOCAL_WRITE);
	CHECK(elided_handle(mr) && stats().pds == s0.pds + 1, "a new PD's registration elided, the PD attached");
	int r = ibv_dealloc_pd(pd);
	CHECK(r == EBUSY, "ibv_dealloc_pd with its region alive: EBUSY (%d)", r);
	CHECK(mr && ibv_dereg_mr(mr) == 0, "its last region deregistered");
	struct rdma_malloc_stats s1 = stats();
	CHECK(s1.pds == s0.pds && s1.elided_pds_detached == s0.elided_pds_detached + 1,
	      "the PD detached (pds %llu, elided_pds_detached %llu)", (unsigned long long)s1.pds,
	      (unsigned long long)s1.elided_pds_detached);
	r = ibv_dealloc_pd(pd);
	CHECK(r == 0, "the kernel deallocates it: no chunk registration is left on it (%d)", r);
	free(buf);
}

static void ninth_pd(void)
{
	uint8_t *buf = malloc(64 * KiB);
	struct rdma_malloc_stats s0 = stats();
	enum { LEAKED = 2 * RDMA_MALLOC_MAX_PDS };
	struct ibv_pd *leaked[LEAKED];
	int ok = 0;
	for (int i = 0; i < LEAKED; i++) {
		leaked[i] = ibv_alloc_pd(pair.ctx);
		struct ibv_mr *mr = ibv_reg_mr(leaked[i], buf, 4 * KiB, IBV_ACCESS_LOCAL_WRITE);
		ok += elided_handle(mr);
		if (mr)
			ibv_dereg_mr(mr);
	}
	struct rdma_malloc_stats s1 = stats();
	CHECK(ok == LEAKED && s1.pds <= RDMA_MALLOC_MAX_PDS,
	      "%d of %d PDs left idle (not deallocated) elided: idle ones evicted (pds %llu, %llu detached)", ok,
	      LEAKED, (unsigned long long)s1.pds, (unsigned long long)(s1.elided_pds_detached - s0.elided_pds_detached));

	int room = RDMA_MALLOC_MAX_PDS - (int)s0.pds, held = 0;
	struct ibv_pd *busy[RDMA_MALLOC_MAX_PDS + 1];
	struct ibv_mr *mr[RDMA_MALLOC_MAX_PDS + 1];
	for (int i = 0; i <= room; i++) {
		busy[i] = ibv_alloc_pd(pair.ctx);
		mr[i] = ibv_reg_mr(busy[i], buf + i * 64, 64, IBV_ACCESS_LOCAL_WRITE);
		held += i < room && elided_handle(mr[i]);
	}
	struct rdma_malloc_stats s2 = stats();
	CHECK(held == room && s2.pds == RDMA_MALLOC_MAX_PDS, "%d PDs with a live region each elided (pds %llu)", held,
	      (unsigned long long)s2.pds);
	CHECK(mr[room] && mr[room]->handle != UINT32_MAX && s2.elision_no_pd_slot == s0.elision_no_pd_slot + 1 &&
	      s2.passthrough_registrations == s1.passthrough_registrations + 1,
	      "every slot busy: PD %d's registration went to the kernel (handle %u), counted in elision_no_pd_slot",
	      room + 1, mr[room] ? mr[room]->handle : 0);
	int bad = 0;
	for (int i = 0; i <= room; i++)
		bad += !mr[i] || ibv_dereg_mr(mr[i]) != 0 || ibv_dealloc_pd(busy[i]) != 0;
	for (int i = 0; i < LEAKED; i++)
		bad += ibv_dealloc_pd(leaked[i]) != 0;
	CHECK(!bad && stats().pds == s0.pds, "every region and PD goes (%d failed), pds %llu", bad,
	      (unsigned long long)stats().pds);
	free(buf);
}

/* A key handed out stays valid until the program lets go of what it came
 * from: the detach of the PD under a live elided region is refused and the
 * region's rkey still moves every byte; once the region is deregistered
 * and the PD detached, its old rkey moves none. */
static void stale_key_refused(void)
{
	uint8_t *dst = malloc(64 * KiB);
	uint8_t *src = mmap(NULL, 64 * KiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *md = ibv_reg_mr(pair.pd, dst, 64 * KiB, ACC);
	struct ibv_mr *ms = src != MAP_FAILED ? ibv_reg_mr(pair.pd, src, 64 * KiB, IBV_ACCESS_LOCAL_WRITE) : NULL;
	CHECK(elided_handle(md) && ms && !elided_handle(ms), "a malloc'ed buffer's region elided, an mmap's the kernel's");
	if (!md || !ms)
		return;
	uint32_t rkey = md->rkey;
	int r = rdma_malloc_detach_pd(pair.pd);
	CHECK(r == EBUSY, "rdma_malloc_detach_pd under a live elided region: EBUSY (%d)", r);
	const char *why = write_and_check(src, ms->lkey, dst, rkey, 64 * KiB, 7);
	CHECK(!why, "its rkey still moves every byte%s%s", why ? ": " : "", why ? why : "");
	CHECK(ibv_dereg_mr(md) == 0, "the program lets go of the region");
	r = rdma_malloc_detach_pd(pair.pd);
	CHECK(r == 0, "and detaches the PD (%d)", r);
	memset(dst, 0xa5, 64 * KiB);
	e2e_fill(src, 64 * KiB, 8);
	int st = e2e_post_write(&pair, src, 64 * KiB, ms->lkey, (uintptr_t)dst, rkey, 8);
	if (!st)
		st = e2e_wait(&pair, 0, NULL, E2E_WC_TIMEOUT_MS);
	size_t moved = 0;
	for (size_t i = 0; i < 64 * KiB; i++)
		moved += dst[i] != 0xa5;
	CHECK(st != 0 && !moved, "an RDMA WRITE with the old rkey fails (%s) and moves no byte (%zu moved)",
	      e2e_status_str(st), moved);
	if (st)
		e2e_pair_reset(&pair);
	ibv_dereg_mr(ms);
	munmap(src, 64 * KiB);
	free(dst);
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	int err = e2e_pair_open(&pair, NULL);
	if (err == ENODEV) {
		printf("SKIP: no RDMA device\n");
		return 77;
	}
	if (err) {
		printf("FAIL set-up: %s\n", pair.err);
		return 1;
	}
	rereg_moves_bytes();
	pd_detached_with_last_region();
	ninth_pd();
	stale_key_refused(); /* last: it detaches the pair's PD */
	e2e_pair_close(&pair);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
