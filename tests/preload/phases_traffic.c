/* SPDX-License-Identifier: MIT */
/*
 * phases_traffic.c - under the LD_PRELOAD drop-in, in the Soft-RoCE guest:
 * a program whose heap grows and shrinks between phases of RDMA traffic.
 * Each phase mallocs buffers (64 KiB - 4 MiB, 48 MiB in all), RDMA-writes
 * into every one with the keys of its chunk and checks every byte, also
 * through a region of its own ibv_reg_mr (elided by the drop-in), frees
 * everything and calls malloc_trim(): chunks are given back, and the next
 * phase registers them again (taken back, or on first use) with new keys.  Run with a drop-in heap that peers
 * may write:
 *   RDMALLOC_PRELOAD_ACCESS=LOCAL_WRITE,REMOTE_WRITE \
 *   LD_PRELOAD=build/preload/librdmalloc-preload.so phases_traffic
 * Prints "N passed, M failed"; exit 77 (skip) without a device.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_env.h"
#include "rdma_malloc.h"

#define MiB ((size_t)1 << 20)
#define NBUF 64

static int failed;

static void fail(const char *what, long a, long b)
{
	failed++;
	printf("FAIL %s (%ld, %ld)\n", what, a, b);
}

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	if (rdma_malloc_stats_get(&st))
		fail("rdma_malloc_stats_get", 0, 0);
	return st;
}

int main(void)
{
	/* Each line out at once: a piped log keeps what came before a crash. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct e2e_pair pair;
	int err = e2e_pair_open(&pair, NULL);
	if (err == ENODEV) {
		printf("SKIP: no RDMA device\n");
		return 77;
	}
	if (err) {
		printf("FAIL set-up: %s\n", pair.err);
		return 1;
	}
	uint8_t *src = malloc(4 * MiB);
	if (!src)
		return 1;
	uint64_t x = 0x9E3779B97F4A7C15ull;
	uint64_t first_phase_regs = 0; /* registrations on first use in phase 0 */
	for (int phase = 0; phase < 6; phase++) {
		uint8_t *buf[NBUF];
		size_t len[NBUF], total = 0;
		int n = 0;
		while (total < 48 * MiB && n < NBUF) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			len[n] = (64 << 10) + (size_t)(x >> 20) % (4 * MiB - (64 << 10));
			buf[n] = malloc(len[n]);
			if (!buf[n]) {
				fail("malloc in a phase", phase, (long)len[n]);
				break;
			}
			total += len[n++];
		}
		for (int i = 0; i < n; i++) {
			uint32_t seed = (uint32_t)(phase * 1000 + i);
			e2e_fill(src, len[i], seed);
			int st = e2e_write(&pair, buf[i], src, len[i]);
			size_t nd = 0;
			if (st != 0)
				fail("RDMA WRITE into a malloc'ed buffer", phase, st);
			else if (e2e_check(buf[i], len[i], seed, &nd) != E2E_NO_DIFF)
				fail("bytes differ after an RDMA WRITE", phase, (long)nd);
		}
		/* The program's own registration of one buffer: elided, its
		 * keys the chunk's; the chunk stays until ibv_dereg_mr. */
		struct ibv_mr *mr = ibv_reg_mr(pair.pd, buf[0], len[0], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		uint32_t rkey = 0;
		if (!mr || rdma_malloc_keys(buf[0], len[0], pair.pd, NULL, &rkey) || mr->rkey != rkey)
			fail("ibv_reg_mr of a malloc'ed buffer is not the chunk's region", phase, mr ? 1 : 0);
		if (mr) {
			e2e_fill(src, len[0], 77);
			int st = e2e_write_raw(&pair, src, len[0], (uintptr_t)buf[0], mr->rkey);
			size_t nd = 0;
			if (st != 0 || e2e_check(buf[0], len[0], 77, &nd) != E2E_NO_DIFF)
				fail("RDMA WRITE with the program's own rkey", st, (long)nd);
			ibv_dereg_mr(mr);
		}
		for (int i = 0; i < n; i++)
			free(buf[i]);
		if (phase == 0)
			first_phase_regs = stats().demand_registrations;
		uint64_t back = stats().chunks_given_back;
		malloc_trim(0);
		if (stats().chunks_given_back <= back)
			fail("malloc_trim gave nothing back after a phase", phase, (long)back);
	}
	struct rdma_malloc_stats st = stats();
	/* An eager drop-in takes chunks back at their commit; a first-use one
	 * (the default) registers them again on their first use. */
	uint64_t again = st.chunks_taken_back + (st.demand_registrations - first_phase_regs);
	if (!again)
		fail("no chunk given back was registered again by a later phase", 0, 0);
	printf("phases_traffic: 6 phases of 48 MiB, %llu chunks given back, %llu taken back, %llu registered "
	       "again on first use, %llu elided\n",
	       (unsigned long long)st.chunks_given_back, (unsigned long long)st.chunks_taken_back,
	       (unsigned long long)(st.demand_registrations - first_phase_regs),
	       (unsigned long long)st.elided_registrations);
	free(src);
	e2e_pair_close(&pair);
	printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
	return failed ? 1 : 0;
}
