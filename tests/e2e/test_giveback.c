/* SPDX-License-Identifier: MIT */
/*
 * test_giveback.c - chunks given back (issue 12), as the NIC sees them:
 * the rkey of a given-back chunk is refused and changes no byte, memory
 * allocated afterwards moves data with its new keys, and chunks that come
 * and go while traffic runs lose no byte.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "e2e.h"

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert(rdma_malloc_stats_get(&st) == 0);
	return st;
}

E2E_TEST(giveback_old_rkey_refused, 120)
{
	const size_t len = 24 * MiB; /* a chunk of its own */
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, .decay_ms = -1 });
	cr_assert(h, "rdma_heap_create: %s", strerror(errno));
	uint8_t *stay = rdma_heap_malloc(h, 4 * KiB); /* the heap's first chunk stays */
	uint8_t *victim = rdma_heap_malloc(h, len);
	uint8_t *src = rdma_malloc(len);
	cr_assert(stay && victim && src, "allocation: %s", strerror(errno));
	uint32_t rkey;
	E2E_ASSERT_KEYS(victim, len, NULL, NULL, &rkey, "keys of the buffer to free");
	uintptr_t vaddr = (uintptr_t)victim;
	e2e_fill(src, len, 1200);
	E2E_ASSERT_WC_OK(e2e_write_raw(&e2e, src, len, vaddr, rkey), "RDMA WRITE before the give-back");
	E2E_ASSERT_PATTERN(victim, len, 1200, "RDMA WRITE before the give-back");

	uint64_t back = stats().chunks_given_back;
	rdma_free(victim);
	size_t freed = rdma_malloc_trim();
	cr_assert(freed >= len, "rdma_malloc_trim gave back %zu bytes, want at least %zu", freed, len);
	cr_assert(stats().chunks_given_back > back);
	int err = rdma_malloc_keys((void *)vaddr, 1, NULL, NULL, NULL);
	cr_assert(err == ENOENT, "keys of a given-back chunk: %s, want ENOENT", strerror(err));

	/* Memory allocated afterwards, at the same addresses if jemalloc
	 * reuses the range (the chunk is registered again, new keys). */
	uint8_t *reuse = rdma_heap_malloc(h, len);
	uint8_t *reuse_d = rdma_malloc(len);
	cr_assert(reuse && reuse_d, "allocation: %s", strerror(errno));
	cr_log_info("given back %p; reused %p (heap), %p (default)", (void *)vaddr, (void *)reuse,
		    (void *)reuse_d);
	e2e_fill(reuse, len, 1201);
	e2e_fill(reuse_d, len, 1202);
	e2e_fill(stay, 4 * KiB, 1203);
	uint32_t nrkey;
	E2E_ASSERT_KEYS(reuse, len, NULL, NULL, &nrkey, "keys of the memory reused");
	if ((uintptr_t)reuse == vaddr)
		cr_assert(nrkey != rkey, "the reused chunk kept the rkey of the given-back one");

	e2e_fill(src, len, 1204);
	E2E_ASSERT_WC_REFUSED(e2e_write_raw(&e2e, src, len, vaddr, rkey),
			      "RDMA WRITE with the rkey of a given-back chunk");
	E2E_ASSERT_PATTERN(reuse, len, 1201, "reused memory after a write with the old rkey");
	E2E_ASSERT_PATTERN(reuse_d, len, 1202, "default heap after a write with the old rkey");
	E2E_ASSERT_PATTERN(stay, 4 * KiB, 1203, "the heap's live block after a write with the old rkey");

	cr_assert(e2e_pair_reset(&e2e) == 0, "recreating the QP pair: %s", e2e.err);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, reuse, src, len), "RDMA WRITE into the reused memory, new keys");
	E2E_ASSERT_PATTERN(reuse, len, 1204, "RDMA WRITE into the reused memory, new keys");
	rdma_free(reuse);
	rdma_free(reuse_d);
	rdma_free(stay);
	rdma_free(src);
	cr_assert(rdma_heap_destroy(h) == 0);
}

/* Chunks come and go under traffic: a heap with a 1 ms decay, a thread
 * that allocates, frees and trims in it all the while, and this one
 * RDMA-writing into fresh buffers of it and checking every byte. */
struct churn {
	rdma_heap_t *h;
	atomic_int stop;
	atomic_long cycles;
};

static void *churner(void *arg)
{
	struct churn *c = arg;
	uint64_t x = 0x9E3779B97F4A7C15ull;
	void *b[16] = { 0 };
	while (!atomic_load(&c->stop)) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int i = (int)(x % 16);
		rdma_free(b[i]);
		b[i] = rdma_heap_malloc(c->h, 1 + (size_t)(x >> 20) % (3 * MiB));
		if (b[i])
			memset(b[i], 0x77, 64);
		if ((x & 0xff) == 0) {
			for (int k = 0; k < 16; k++) {
				rdma_free(b[k]);
				b[k] = NULL;
			}
			rdma_malloc_trim();
		}
		atomic_fetch_add(&c->cycles, 1);
	}
	for (int k = 0; k < 16; k++)
		rdma_free(b[k]);
	return NULL;
}

E2E_TEST(giveback_churn_under_traffic, 240)
{
	struct churn c = { .h = rdma_heap_create(&(struct rdma_heap_attr){
				   .access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, .decay_ms = 1 }) };
	cr_assert(c.h, "rdma_heap_create: %s", strerror(errno));
	uint8_t *src = rdma_malloc(4 * MiB);
	cr_assert(src);
	uint64_t back0 = stats().chunks_given_back, taken0 = stats().chunks_taken_back;
	pthread_t t;
	cr_assert(pthread_create(&t, NULL, churner, &c) == 0);
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t x = 0x2545F4914F6CDD1Dull;
	long rounds = 0;
	do {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t len = 1 + (size_t)(x >> 24) % (4 * MiB);
		uint8_t *dst = rdma_heap_malloc(c.h, len);
		cr_assert(dst, "allocation of %zu bytes: %s", len, strerror(errno));
		e2e_fill(src, len, (uint32_t)rounds);
		E2E_ASSERT_WC_OK(e2e_write(&e2e, dst, src, len), "RDMA WRITE into a fresh buffer");
		E2E_ASSERT_PATTERN(dst, len, (uint32_t)rounds, "RDMA WRITE into a fresh buffer");
		rdma_free(dst);
		if (rounds % 16 == 15)
			rdma_malloc_trim();
		rounds++;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < 20);
	atomic_store(&c.stop, 1);
	pthread_join(t, NULL);
	struct rdma_malloc_stats st = stats();
	cr_log_info("%ld transfers checked, %ld churn cycles, %llu chunks given back, %llu taken back", rounds,
		    atomic_load(&c.cycles), (unsigned long long)(st.chunks_given_back - back0),
		    (unsigned long long)(st.chunks_taken_back - taken0));
	cr_assert(st.chunks_given_back > back0, "no chunk came and went: the test tried nothing");
	cr_assert(st.chunks_taken_back > taken0, "no chunk was taken back");
	rdma_free(src);
	cr_assert(rdma_heap_destroy(c.h) == 0);
}
