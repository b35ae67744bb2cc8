/* SPDX-License-Identifier: MIT */
/*
 * test_two_hosts.c - keys and data across a link, not loopback: the
 * requester on host 1's device, the peer on host 2's (tools/rdmalloc-vm
 * --hosts 2: rxe1 and rxe2 on the two ends of a veth pair).  Both PDs are
 * attached to rdmalloc, so every chunk is registered on both devices; the
 * peer's keys come from rdma_malloc_keys() under its PD.  Each test checks
 * every byte, and that the bytes really crossed veth1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "e2e.h"

#define HOSTS_SKIP_MSG "needs the guest's two hosts (tools/rdmalloc-vm --hosts 2)"

static struct {
	struct ibv_context *ctx[2];
	struct ibv_pd *pd[2];
	struct e2e_pair pair;
} h;

/* The device named @name, opened; NULL if there is none. */
static struct ibv_context *open_named(const char *name)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	for (int i = 0; list && i < n && !ctx; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

static void hosts_setup(void)
{
	/* "rxe1:10.77.0.1 rxe2:10.77.0.2" */
	const char *hosts = getenv("RDMALLOC_VM_HOSTS");
	char dev[2][32];
	if (!hosts || sscanf(hosts, "%31[^:]:%*s %31[^:]:%*s", dev[0], dev[1]) != 2)
		cr_skip_test(HOSTS_SKIP_MSG);
	for (int i = 0; i < 2; i++) {
		h.ctx[i] = open_named(dev[i]);
		cr_assert(h.ctx[i], "cannot open %s, a device of RDMALLOC_VM_HOSTS=\"%s\"", dev[i], hosts);
		h.pd[i] = ibv_alloc_pd(h.ctx[i]);
		cr_assert(h.pd[i], "ibv_alloc_pd(%s): %s", dev[i], strerror(errno));
		int err = rdma_malloc_attach_pd(h.pd[i]);
		cr_assert(err == 0, "rdma_malloc_attach_pd(%s): %s", dev[i], strerror(err));
	}
	int err = e2e_pair_open_hosts(&h.pair, h.pd[0], h.pd[1]);
	cr_assert(err == 0, "QP pair %s -> %s: %s", dev[0], dev[1], h.pair.err);
}

static void hosts_teardown(void)
{
	e2e_pair_close(&h.pair);
	for (int i = 0; i < 2; i++) {
		if (h.pd[i]) {
			int err = rdma_malloc_detach_pd(h.pd[i]);
			cr_expect(err == 0, "rdma_malloc_detach_pd: %s", strerror(err));
			cr_expect(ibv_dealloc_pd(h.pd[i]) == 0, "ibv_dealloc_pd: %s", strerror(errno));
		}
		if (h.ctx[i])
			ibv_close_device(h.ctx[i]);
	}
}

#define HOSTS_TEST(name, secs) \
	Test(rdma, name, .init = hosts_setup, .fini = hosts_teardown, .timeout = (secs))

/* Bytes host 1's end of the link has sent. */
static uint64_t veth1_tx_bytes(void)
{
	FILE *f = fopen("/sys/class/net/veth1/statistics/tx_bytes", "r");
	cr_assert(f, "/sys/class/net/veth1/statistics/tx_bytes: %s", strerror(errno));
	unsigned long long v = 0;
	cr_assert(fscanf(f, "%llu", &v) == 1);
	fclose(f);
	return v;
}

/* RDMA WRITE from host 1's buffer into host 2's, then READ it back into a
 * third, 8 B .. 64 MiB, buffers of rdma_malloc(): every byte checked, and
 * veth1 carried at least the bytes written. */
HOSTS_TEST(two_hosts_write_read, 240)
{
	for (size_t len = 8; len <= 64 * MiB; len *= 8) {
		uint8_t *src = rdma_malloc(len), *dst = rdma_malloc(len), *back = rdma_malloc(len);
		cr_assert(src && dst && back, "rdma_malloc(%zu): %s", len, strerror(errno));
		uint32_t seed = 3000u + (uint32_t)__builtin_ctzll(len);
		e2e_fill(src, len, seed);
		memset(dst, 0, len);
		memset(back, 0, len);
		uint64_t tx0 = veth1_tx_bytes();
		char what[96];
		snprintf(what, sizeof(what), "RDMA WRITE of %zu B from host 1 to host 2", len);
		E2E_ASSERT_PAIR_OK(h.pair, e2e_write(&h.pair, dst, src, len), what);
		E2E_ASSERT_PATTERN(dst, len, seed, what);
		uint64_t sent = veth1_tx_bytes() - tx0;
		cr_assert(sent >= len, "%s: veth1 sent %llu bytes: the data did not cross the link", what,
			  (unsigned long long)sent);
		snprintf(what, sizeof(what), "RDMA READ of %zu B from host 2 into host 1", len);
		E2E_ASSERT_PAIR_OK(h.pair, e2e_read(&h.pair, back, dst, len), what);
		E2E_ASSERT_PATTERN(back, len, seed, what);
		rdma_free(back);
		rdma_free(dst);
		rdma_free(src);
	}
}

/* The first 8 bytes of a 64 MiB window of the GiB buffer say which it is
 * (the rest is one pattern): a window written at the wrong offset, or not
 * at all, shows. */
static void stamp(uint8_t *w, uint64_t i)
{
	memcpy(w, &i, sizeof(i));
}

static void assert_window(const uint8_t *w, const uint8_t *ref, size_t win, uint64_t i, const char *what)
{
	uint64_t got;
	memcpy(&got, w, sizeof(got));
	size_t nd = 0, at = e2e_compare(w + 8, ref + 8, win - 8, &nd);
	cr_assert(got == i && at == E2E_NO_DIFF, "%s, window %llu: stamp %llu, first differing byte at %zu (%zu differ)",
		  what, (unsigned long long)i, (unsigned long long)got, at == E2E_NO_DIFF ? 0 : at + 8, nd);
}

/* rdma_malloc of a GiB with both hosts' PDs attached, which the
 * registration crew populates and registers on both devices at once
 * (issue 26): its keys under each PD move every byte of it, by RDMA WRITE
 * and READ across the link.  Host 2's keys (the buffer as the remote end):
 * a WRITE into each 64 MiB of it, then a READ of each back; host 1's keys
 * (the buffer as the local end): a WRITE of each 64 MiB to host 2, then a
 * READ of each from host 2 into it. */
HOSTS_TEST(two_hosts_gib_buffer_every_byte_per_pd, 1200)
{
	const size_t len = (size_t)1 << 30, win = 64 * MiB, n = len / win;
	struct rdma_malloc_stats s0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(s0) }, s1 = s0;
	cr_assert(rdma_malloc_stats_get(&s0) == 0);
	uint8_t *big = rdma_malloc(len), *ref = rdma_malloc(win), *w = rdma_malloc(win);
	cr_assert(big && ref && w, "rdma_malloc: %s", strerror(errno));
	cr_assert(rdma_malloc_stats_get(&s1) == 0);
	if (sysconf(_SC_NPROCESSORS_ONLN) > 1)
		cr_assert(s1.populated_chunks > s0.populated_chunks,
			  "the GiB's chunk was not populated by the registration crew");
	e2e_fill(ref, win, 3300);
	uint64_t tx0 = veth1_tx_bytes();

	memset(big, 0, len);
	for (uint64_t i = 0; i < n; i++) {
		stamp(ref, i);
		E2E_ASSERT_PAIR_OK(h.pair, e2e_write(&h.pair, big + i * win, ref, win),
				   "RDMA WRITE into the GiB buffer with host 2's rkey");
	}
	for (uint64_t i = 0; i < n; i++)
		assert_window(big + i * win, ref, win, i, "the GiB buffer after RDMA WRITEs with host 2's rkey");
	for (uint64_t i = 0; i < n; i++) {
		memset(w, 0, win);
		E2E_ASSERT_PAIR_OK(h.pair, e2e_read(&h.pair, w, big + i * win, win),
				   "RDMA READ from the GiB buffer with host 2's rkey");
		stamp(ref, i);
		assert_window(w, ref, win, i, "RDMA READ from the GiB buffer with host 2's rkey");
	}

	for (uint64_t i = 0; i < n; i++) {
		memset(w, 0, win);
		E2E_ASSERT_PAIR_OK(h.pair, e2e_write(&h.pair, w, big + i * win, win),
				   "RDMA WRITE from the GiB buffer with host 1's lkey");
		stamp(ref, i);
		assert_window(w, ref, win, i, "RDMA WRITE from the GiB buffer with host 1's lkey");
	}
	memset(big, 0, len);
	for (uint64_t i = 0; i < n; i++) {
		stamp(ref, n + i);
		E2E_ASSERT_PAIR_OK(h.pair, e2e_read(&h.pair, big + i * win, ref, win),
				   "RDMA READ into the GiB buffer with host 1's lkey");
	}
	for (uint64_t i = 0; i < n; i++) {
		stamp(ref, n + i);
		assert_window(big + i * win, ref, win, n + i, "the GiB buffer after RDMA READs with host 1's lkey");
	}
	uint64_t sent = veth1_tx_bytes() - tx0;
	cr_assert(sent >= 2 * len, "veth1 sent %llu bytes for 2 GiB of RDMA WRITE: the data did not cross the link",
		  (unsigned long long)sent);
	rdma_free(w);
	rdma_free(ref);
	rdma_free(big);
}

/* SEND/RECV and both atomics across the link, into malloc'ed memory. */
HOSTS_TEST(two_hosts_send_atomics, 120)
{
	const size_t len = 256 * KiB;
	uint8_t *src = rdma_malloc(len), *dst = rdma_calloc(1, len);
	uint64_t *word = rdma_aligned_alloc(8, 64);
	cr_assert(src && dst && word, "allocation: %s", strerror(errno));
	e2e_fill(src, len, 3100);
	size_t got = 0;
	E2E_ASSERT_PAIR_OK(h.pair, e2e_send_recv(&h.pair, dst, len, src, len, &got), "SEND from host 1 to host 2");
	cr_assert(got == len, "the receive completion says %zu bytes, want %zu", got, len);
	E2E_ASSERT_PATTERN(dst, len, 3100, "SEND from host 1 to host 2");

	*word = 40;
	uint64_t old = 0;
	E2E_ASSERT_PAIR_OK(h.pair, e2e_fetch_add(&h.pair, word, 2, &old), "fetch-and-add on host 2's word");
	cr_assert(old == 40 && *word == 42, "fetch-and-add: old %llu, now %llu; want 40, 42",
		  (unsigned long long)old, (unsigned long long)*word);
	E2E_ASSERT_PAIR_OK(h.pair, e2e_cmp_swap(&h.pair, word, 42, 7, &old), "compare-and-swap on host 2's word");
	cr_assert(old == 42 && *word == 7, "compare-and-swap: old %llu, now %llu; want 42, 7",
		  (unsigned long long)old, (unsigned long long)*word);
	rdma_free(word);
	rdma_free(dst);
	rdma_free(src);
}

/* A chunk given back is deregistered on both devices: host 2's old rkey is
 * refused across the link and changes no byte. */
HOSTS_TEST(two_hosts_given_back_rkey_refused, 120)
{
	const size_t len = 24 * MiB; /* a chunk of its own */
	rdma_heap_t *heap = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, .decay_ms = -1 });
	cr_assert(heap, "rdma_heap_create: %s", strerror(errno));
	uint8_t *stay = rdma_heap_malloc(heap, 4 * KiB); /* the heap's first chunk stays */
	uint8_t *victim = rdma_heap_malloc(heap, len);
	uint8_t *src = rdma_malloc(len);
	cr_assert(stay && victim && src, "allocation: %s", strerror(errno));
	uint32_t rkey;
	E2E_ASSERT_KEYS(victim, len, h.pd[1], NULL, &rkey, "host 2's keys of the buffer to free");
	uintptr_t vaddr = (uintptr_t)victim;
	e2e_fill(src, len, 3200);
	E2E_ASSERT_PAIR_OK(h.pair, e2e_write_raw(&h.pair, src, len, vaddr, rkey), "RDMA WRITE before the give-back");
	E2E_ASSERT_PATTERN(victim, len, 3200, "RDMA WRITE before the give-back");

	rdma_free(victim);
	cr_assert(rdma_malloc_trim() >= len, "rdma_malloc_trim gave back less than the freed chunk");
	/* Whatever now lies at the old address must survive the old rkey. */
	uint8_t *reuse = rdma_heap_malloc(heap, len);
	cr_assert(reuse, "allocation: %s", strerror(errno));
	memset(reuse, 0x5a, len);
	e2e_fill(src, len, 3201);
	E2E_ASSERT_PAIR_REFUSED(h.pair, e2e_write_raw(&h.pair, src, 4 * KiB, vaddr, rkey),
				"RDMA WRITE across the link with the old rkey of a given-back chunk");
	E2E_ASSERT_CONST(reuse, len, 0x5a, "memory after a write with the old rkey");
	rdma_free(reuse);
	rdma_free(src);
	rdma_free(stay);
	cr_assert(rdma_heap_destroy(heap) == 0);
}
