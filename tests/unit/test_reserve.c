/* SPDX-License-Identifier: MIT */
/*
 * test_reserve.c - the reserve (issue 14, part 2), against the fake
 * backend: a heap's next chunk is made and registered by the background
 * thread and handed over when jemalloc asks for exactly its size; a
 * misprediction, a hand-over that must register anew and a dropped reserve
 * are counted; PD attach/detach and access changes while a reserve is
 * ready or being made leave every handed-over chunk registered with the
 * heap's PDs and access; heap destruction, RDMALLOC_MAX_REGISTERED and a
 * fork child.  That the growth latency drops is bench/growth.c's, in the
 * Soft-RoCE guest.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "chunk.h"
#include "fork.h"
#include "fake_verbs.h"
#include "fork_window.h"
#include "os.h"
#include "reserve.h"
#include "rdma_malloc.h"
#include "stderr_said.h"
#include "watchdog.h"
#include "thread_named.h"
#include "clock_now.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define LW IBV_ACCESS_LOCAL_WRITE
#define RR IBV_ACCESS_REMOTE_READ

/* These tests are about jemalloc's chunks: every block is jemalloc's
 * (big blocks, a chunk each, are test_big.c's). */
static void install(int with_device)
{
	setenv("RDMALLOC_BIG_BLOCK", "0", 1);
	setenv("RDMALLOC_CHUNK_MAX", "0", 1); /* jemalloc's series: what the reserve predicts */
	fake_verbs_install(with_device);
}

static void setup(void)
{
	install(1);
}

TestSuite(reserve, .init = setup, .timeout = 60);

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static uint64_t growths(void)
{
	struct rdma_malloc_stats st = stats();
	return st.inline_chunks + st.reserve_hits;
}

enum { MAXB = 1 << 14 };
static void *blocks[MAXB];
static size_t nblocks;

/* Allocate 64 KiB blocks from @h, kept live, until the heap grew once;
 * returns the last block (in the new chunk). */
static void *grow(rdma_heap_t *h)
{
	uint64_t before = growths();
	for (;;) {
		cr_assert_lt(nblocks, MAXB);
		void *p = rdma_heap_malloc(h, 64 * KiB);
		cr_assert(p, "%s", strerror(errno));
		memset(p, 0x5a, 64 * KiB);
		blocks[nblocks++] = p;
		if (growths() != before)
			return p;
	}
}

/* A LOCAL_WRITE heap that grew once, its reserve made: what most tests
 * start from. */
static rdma_heap_t *grown_heap(void)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	grow(h);
	rdmalloc_reserves_settle();
	return h;
}

/* Under RDMALLOC_MAX_REGISTERED=@limit: a LOCAL_WRITE heap grown three
 * times (2 + 2.5 + 3 MiB) with its 3.5 MiB reserve made. */
static rdma_heap_t *grown_thrice_under(const char *limit)
{
	setenv("RDMALLOC_MAX_REGISTERED", limit, 1);
	install(1);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	for (int i = 0; i < 3; i++) {
		grow(h);
		rdmalloc_reserves_settle();
	}
	return h;
}

/* Every live region is of a chunk held, one per chunk and PD. */
static void check_accounting(unsigned npds)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.chunks * npds, st.mrs, "chunks %llu (reserve %llu), regions %llu",
		     (unsigned long long)st.chunks, (unsigned long long)st.reserve_chunks,
		     (unsigned long long)st.mrs);
}

static size_t regions_on(struct ibv_pd *pd)
{
	static struct fake_mr_info all[FAKE_MAX_MRS];
	size_t n = fake_snapshot(all, FAKE_MAX_MRS), on = 0;
	for (size_t i = 0; i < n; i++)
		on += all[i].pd == pd;
	return on;
}

Test(reserve, next_size_follows_jemallocs_series)
{
	static const size_t series[] = { 2 * MiB, 5 * MiB / 2, 3 * MiB, 7 * MiB / 2, 4 * MiB, 5 * MiB,
					 6 * MiB, 7 * MiB, 8 * MiB, 10 * MiB, 12 * MiB, 14 * MiB, 16 * MiB };
	for (size_t i = 0; i + 1 < sizeof(series) / sizeof(series[0]); i++)
		cr_assert_eq(rdmalloc_reserve_next_size(series[i], 0), series[i + 1], "after %zu", series[i]);
	/* retain_grow_limit caps the series at the class at or below it. */
	cr_assert_eq(rdmalloc_reserve_next_size(8 * MiB, 8 * MiB), 8 * MiB);
	cr_assert_eq(rdmalloc_reserve_next_size(7 * MiB, 8 * MiB), 8 * MiB);
	cr_assert_eq(rdmalloc_reserve_next_size(64 * MiB, 8 * MiB), 8 * MiB, "after a larger single call");
	cr_assert_eq(rdmalloc_reserve_next_size(3 * MiB, 3 * MiB + 100000), 3 * MiB);
	/* A call of its own size (not a class) is followed by the next class. */
	cr_assert_eq(rdmalloc_reserve_next_size(40 * MiB + 4096, 0), 48 * MiB);
}

/* Steady growth: after the first chunk (registered by the allocation that
 * needed it), every chunk was registered ahead and handed over. */
Test(reserve, growth_hands_over_the_reserve)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	grow(h);
	for (int i = 0; i < 10; i++) {
		rdmalloc_reserves_settle();
		struct rdma_malloc_stats st = stats();
		cr_assert_eq(st.reserve_chunks, 1, "growth %d: no reserve ready", i);
		cr_assert_geq(st.reserve_bytes, 2 * MiB);
		void *p = grow(h);
		uint32_t lkey;
		cr_assert_eq(rdma_malloc_keys(p, 64 * KiB, NULL, &lkey, NULL), 0);
		cr_assert(fake_find(fake_pd(0), p), "a handed-over chunk has no region");
	}
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.inline_chunks, 1, "growths that waited for ibv_reg_mr: %llu",
		     (unsigned long long)st.inline_chunks);
	cr_assert_eq(st.reserve_hits, 10);
	cr_assert_eq(st.reserve_discards, 0);
	cr_assert_eq(st.reserve_resyncs, 0);
	check_accounting(1);
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	st = stats();
	cr_assert_eq(st.reserve_chunks, 0);
	cr_assert_eq(st.reserve_bytes, 0);
	cr_assert_eq(st.reserve_discards, 1, "the destroyed heap's reserve is counted");
	cr_assert_eq(st.mrs, fake_live_mrs());
}

static void *grow_once(void *h)
{
	return grow(h);
}

/* Growth that outruns the thread waits for the rest of the registration
 * under way (counted), rather than registering a chunk of its own and
 * wasting that one. */
Test(reserve, growth_waits_for_the_chunk_being_made)
{
	rdma_heap_t *h = grown_heap();
	fake_block_next_reg();
	grow(h); /* hand-over; the thread blocks inside ibv_reg_mr for the next one */
	fake_wait_blocked();
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, grow_once, h), 0);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	for (int i = 0; i < 100 && stats().reserve_waits == 0; i++)
		nanosleep(&ts, NULL);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.reserve_waits, 1, "the growth did not wait for the chunk being made");
	cr_assert_eq(st.inline_chunks + st.reserve_hits, 2, "a growth went by meanwhile");
	fake_release_reg();
	void *p;
	pthread_join(t, &p);
	cr_assert(fake_find(fake_pd(0), p));
	st = stats();
	cr_assert_eq(st.inline_chunks, 1);
	cr_assert_eq(st.reserve_hits, 2);
	cr_assert_eq(st.reserve_discards, 0);
	check_accounting(1);
}

/* The thread stays inside ibv_reg_mr until a watchdog lets it go after
 * 20 s, or when the test says it is done (watchdog.h). */
static struct watchdog watch;

static void watch_start(void)
{
	cr_assert_eq(watchdog_start(&watch, fake_release_reg), 0);
}

/* Lets the thread go; 1 if the watchdog had to. */
static int watch_done(void)
{
	return watchdog_done(&watch);
}

/* What the library wrote to the redirected stderr holds @text. */
static void said(const char *text)
{
	static char buf[8192];
	cr_assert(strstr(stderr_said(buf, sizeof(buf)), text), "not said: \"%s\"; stderr: %s", text, buf);
}

/* The thread's ibv_reg_mr may wait for a lock that the growing thread
 * holds (a provider's; glibc's when a message took one): a growth waits
 * for the chunk being made for it at most rdmalloc_fill_wait_ns, then
 * registers its own, counted and said once.  Before, it waited for ever.
 * (That a late fill is not waited for again is shown by the relief's
 * test.) */
Test(reserve, growth_stops_waiting_for_a_stuck_fill, .init = NULL)
{
	cr_redirect_stderr();
	install(1);
	rdma_heap_t *h = grown_heap();
	rdmalloc_fill_wait_ns = 200 * 1000 * 1000;
	fake_block_next_reg();
	grow(h); /* hand-over; the thread blocks inside ibv_reg_mr for the next one */
	fake_wait_blocked();
	struct rdma_malloc_stats s0 = stats();
	watch_start();
	double t0 = now_s();
	void *p = grow(h); /* stays inside the thread's wait, as it would inside a lock */
	double waited = now_s() - t0;
	struct rdma_malloc_stats s1 = stats();
	int stuck = watch_done();
	rdmalloc_fill_wait_ns = RDMALLOC_FILL_WAIT_NS;
	cr_assert(!stuck, "the growth waited for the stuck fill until it was let go (20 s)");
	cr_assert_geq(waited, 0.19, "it did not wait for the fill first (%.3f s)", waited);
	cr_assert_eq(s1.reserve_waits, s0.reserve_waits + 1);
	cr_assert_eq(s1.reserve_wait_timeouts, s0.reserve_wait_timeouts + 1);
	cr_assert_eq(s1.fallbacks, s0.fallbacks + 1);
	cr_assert_eq(s1.inline_chunks, s0.inline_chunks + 1, "the growth did not register its own");
	cr_assert(fake_find(fake_pd(0), p), "the growth's chunk has no region");
	said("stopped waiting for the reserve chunk being made for it");
	rdmalloc_reserves_settle();
	check_accounting(1);
}

/* The same for a relief of memory pressure, which waits for the fills
 * under way to drop what they hold: under RDMALLOC_MAX_REGISTERED, 2 +
 * 2.5 + 3 + 3.5 MiB in use and a 4 MiB fill stuck leave 3 MiB of 18, and
 * a 6 MiB chunk fits only without the fill.  The relief stops waiting, the
 * allocation fails (ENOMEM, as it would have if the fill had been slow to
 * end), and so does the next one at once, the fill being late; the
 * fill's chunk is dropped once made: then it fits. */
Test(reserve, relief_stops_waiting_for_a_stuck_fill, .init = NULL)
{
	cr_redirect_stderr();
	rdma_heap_t *h = grown_thrice_under("18M");
	rdmalloc_fill_wait_ns = 200 * 1000 * 1000;
	fake_block_next_reg();
	grow(h); /* hand-over of 3.5 MiB; the thread blocks making 4 MiB */
	fake_wait_blocked();
	struct rdma_malloc_stats s0 = stats();
	watch_start();
	double t0 = now_s();
	errno = 0;
	void *big = rdma_heap_malloc(h, 5 * MiB + MiB / 2);
	int err = errno;
	double waited = now_s() - t0;
	struct rdma_malloc_stats s1 = stats();
	void *again = rdma_heap_malloc(h, 5 * MiB + MiB / 2); /* the fill still stuck, and late */
	struct rdma_malloc_stats s2 = stats();
	int stuck = watch_done();
	rdmalloc_fill_wait_ns = RDMALLOC_FILL_WAIT_NS;
	cr_assert(!stuck, "the relief waited for the stuck fill until it was let go (20 s)");
	cr_assert_geq(waited, 0.19, "the relief did not wait for the fill first (%.3f s)", waited);
	cr_assert_null(big, "allocated although the fill held its bytes");
	cr_assert_eq(err, ENOMEM);
	cr_assert_eq(s1.reserve_wait_timeouts, s0.reserve_wait_timeouts + 1);
	cr_assert_geq(s1.fallbacks, s0.fallbacks + 1);
	cr_assert_null(again);
	cr_assert_eq(s2.reserve_wait_timeouts, s1.reserve_wait_timeouts, "the late fill was waited for again");
	said("stopped waiting for the reserve's registration thread to drop its chunks");
	rdmalloc_reserves_settle(); /* the fill, cancelled, drops its chunk */
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.reserve_chunks, 0, "the cancelled fill's chunk was kept");
	big = rdma_heap_malloc(h, 5 * MiB + MiB / 2);
	cr_assert(big, "refused once the fill was dropped: %s", strerror(errno));
	check_accounting(1);
}

/* A growth of another size than predicted (one large block) registers
 * inline, counted; the stale reserve is dropped (counted), and none is made
 * for the size that follows: jemalloc's series jumped with that one call,
 * and a reserve is never more than a quarter of what the heap holds (or
 * 8 MiB).  Before, a 48 MiB chunk was pinned ahead for a growth that may
 * never come. */
Test(reserve, misprediction_is_counted)
{
	rdma_heap_t *h = grown_heap();
	struct rdma_malloc_stats st0 = stats();
	void *big = rdma_heap_malloc(h, 40 * MiB);
	cr_assert(big);
	memset(big, 1, 40 * MiB);
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.inline_chunks, st0.inline_chunks + 1, "the large block's chunk was not made inline");
	cr_assert_eq(st.reserve_hits, st0.reserve_hits);
	cr_assert_eq(st.reserve_discards, st0.reserve_discards + 1, "the stale reserve was not counted");
	cr_assert_eq(st.reserve_chunks, 0, "a %llu-byte reserve for a heap of %llu bytes",
		     (unsigned long long)st.reserve_bytes, (unsigned long long)st.chunk_bytes);
	cr_assert_eq(st.reserve_bytes, 0);
	check_accounting(1);
	rdma_free(big);
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* Steady growth keeps a reserve within its cap: at most a quarter of the
 * heap's chunks, or 8 MiB. */
Test(reserve, reserve_within_its_cap)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	for (int i = 0; i < 16; i++) {
		grow(h);
		rdmalloc_reserves_settle();
		struct rdma_malloc_stats st = stats();
		uint64_t held = st.chunk_bytes - st.reserve_bytes;
		cr_assert(st.reserve_bytes <= held / 4 || st.reserve_bytes <= 8 * MiB,
			  "growth %d: a %llu-byte reserve for %llu bytes held", i,
			  (unsigned long long)st.reserve_bytes, (unsigned long long)held);
	}
	cr_assert_gt(stats().reserve_hits, 10, "the cap starved steady growth");
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A heap that stops growing gives its reserve up after its decay time:
 * pinned memory nobody uses.  Before, it stayed for the process's life. */
Test(reserve, idle_heap_drops_its_reserve)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 200 });
	cr_assert(h);
	grow(h);
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st0 = stats();
	cr_assert_eq(st0.reserve_chunks, 1);
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	for (int i = 0; i < 50 && stats().reserve_chunks; i++)
		nanosleep(&ts, NULL);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.reserve_chunks, 0, "the reserve outlived 5 s idle with a 200 ms decay");
	cr_assert_eq(st.reserve_bytes, 0);
	cr_assert_eq(st.reserve_discards, st0.reserve_discards + 1);
	check_accounting(1);
	/* Growth after it registers inline, and reserves again. */
	void *p = grow(h);
	cr_assert(fake_find(fake_pd(0), p));
	rdmalloc_reserves_settle();
	cr_assert_eq(stats().reserve_chunks, 1);
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A PD attached and detached while a reserve is ready: the attach walk
 * registers it too, the detach walk deregisters it; chunks handed over
 * afterwards are registered with exactly the PDs attached, without a
 * registration at hand-over. */
Test(reserve, attach_and_detach_while_ready)
{
	rdma_heap_t *h = grown_heap();
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(regions_on(fake_pd(1)), st.chunks, "the reserve was not registered with the new PD");
	void *p = grow(h);
	cr_assert(fake_find(fake_pd(1), p), "handed over without the new PD's region");
	cr_assert_eq(stats().reserve_hits, 1);
	check_accounting(2);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), 0);
	cr_assert_eq(regions_on(fake_pd(1)), 0, "a region with the detached PD is left");
	rdmalloc_reserves_settle();
	p = grow(h);
	cr_assert_null(fake_find(fake_pd(1), p));
	cr_assert(fake_find(fake_pd(0), p));
	st = stats();
	cr_assert_eq(st.reserve_hits, 2);
	cr_assert_eq(st.reserve_resyncs, 0);
	check_accounting(1);
}

/* An access change leaves the reserve alone: the hand-over registers it
 * anew with the heap's access (counted in reserve_resyncs). */
Test(reserve, access_change_while_ready)
{
	rdma_heap_t *h = grown_heap();
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, 0, NULL, NULL), 0);
	void *p = grow(h);
	const struct fake_mr_info *mr = fake_find(fake_pd(0), p);
	cr_assert(mr);
	cr_assert_eq(mr->access & RR, RR, "handed over with the old access %#x", mr->access);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.reserve_hits, 1);
	cr_assert_eq(st.reserve_resyncs, 1);
	check_accounting(1);
}

static void *detach_pd1(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)rdma_malloc_detach_pd(fake_pd(1));
}

/* A PD attached, then detached, while the thread is inside ibv_reg_mr for
 * the next reserve: the reserve ends up with the PDs attached at the end,
 * and the detach returns only once no region of its PD is left. */
Test(reserve, attach_and_detach_while_being_made)
{
	rdma_heap_t *h = grown_heap();
	fake_block_next_reg();
	grow(h); /* hand-over; the thread starts the next one and blocks */
	fake_wait_blocked();
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	fake_release_reg();
	rdmalloc_reserves_settle();
	void *p = grow(h);
	cr_assert(fake_find(fake_pd(1), p), "the reserve made during the attach lacks the new PD");
	check_accounting(2);
	rdmalloc_reserves_settle();
	fake_block_next_reg();
	grow(h);
	fake_wait_blocked();
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, detach_pd1, NULL), 0);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	fake_release_reg();
	void *ret;
	pthread_join(t, &ret);
	cr_assert_eq((intptr_t)ret, 0);
	cr_assert_eq(regions_on(fake_pd(1)), 0, "a region with the detached PD is left");
	rdmalloc_reserves_settle();
	cr_assert_eq(regions_on(fake_pd(1)), 0, "the reserve made during the detach has its PD");
	p = grow(h);
	cr_assert_null(fake_find(fake_pd(1), p));
	check_accounting(1);
}

/* Once the thread is done: no chunk, reserve or region left. */
static void nothing_left(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.reserve_chunks, 0);
	cr_assert_eq(st.chunks, 0);
	cr_assert_eq(st.mrs, 0);
	cr_assert_eq(fake_live_mrs(), 0);
}

static void *destroy_heap(void *arg)
{
	return (void *)(intptr_t)rdma_heap_destroy(arg);
}

/* Destroying a heap while its reserve is being made waits for it, then
 * releases it: nothing of the heap stays registered. */
Test(reserve, destroy_while_being_made)
{
	rdma_heap_t *h = grown_heap();
	fake_block_next_reg();
	grow(h);
	fake_wait_blocked();
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, destroy_heap, h), 0);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	fake_release_reg();
	void *ret;
	pthread_join(t, &ret);
	cr_assert_eq((intptr_t)ret, 0);
	nothing_left();
}

static void *trim_heaps(void *arg)
{
	(void)arg;
	rdma_malloc_trim();
	return NULL;
}

static atomic_int destroy_returned;

static void *destroy_heap_and_say(void *arg)
{
	void *ret = destroy_heap(arg);
	atomic_store(&destroy_returned, 1);
	return ret;
}

/* A trim's drop of the ready chunk and the thread's drop of a fill it
 * discards (cancelled by another trim) overlap.  The reserve named one
 * chunk being dropped, the last, so a close waited for that one only: the
 * heap's destroy returned with the other chunk still registered, and a
 * fork child would have counted it held for good.  Now the reserve lists
 * every chunk being dropped, and a close waits for all of them. */
Test(reserve, a_close_waits_for_two_drops_at_once)
{
	rdma_heap_t *h = grown_heap();
	cr_assert_eq(stats().reserve_chunks, 1, "no reserve chunk to drop");
	fake_block_next_dereg();
	pthread_t t1;
	cr_assert_eq(pthread_create(&t1, NULL, trim_heaps, NULL), 0);
	fake_wait_blocked(); /* the first trim's drop, in ibv_dereg_mr */
	fake_hold_regs_off(pthread_self());
	grow(h); /* registered here; the thread's next fill is held */
	for (int i = 0; i < 2000 && fake_calls_under_way() < 2; i++)
		usleep(1000);
	cr_assert_eq(fake_calls_under_way(), 2, "the fill did not start");
	pthread_t t2;
	cr_assert_eq(pthread_create(&t2, NULL, trim_heaps, NULL), 0);
	pthread_join(t2, NULL); /* cancels the fill */
	cr_assert_eq(fake_release_held(), 1);
	rdmalloc_reserves_settle(); /* the fill discarded and dropped */
	uint64_t discards = stats().reserve_discards;
	cr_assert_geq(discards, 2, "%llu discards: the fill was not discarded", (unsigned long long)discards);
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	pthread_t td;
	cr_assert_eq(pthread_create(&td, NULL, destroy_heap_and_say, h), 0);
	for (int i = 0; i < 5000 && !atomic_load(&destroy_returned) && !rdmalloc_reserve_closes_waiting(); i++)
		usleep(1000);
	cr_assert_not(atomic_load(&destroy_returned), "the destroy did not wait for the first drop");
	cr_assert_eq(rdmalloc_reserve_closes_waiting(), 1, "the destroy does not wait for the first drop");
	fake_release_reg();
	void *ret;
	pthread_join(td, &ret);
	cr_assert_eq((intptr_t)ret, 0);
	pthread_join(t1, NULL);
	nothing_left();
}

/* Until a destroy waits for its reserve's fill (at most 20 s). */
static void wait_for_the_close(void)
{
	struct timespec ts = { 0, 1000 * 1000 };
	for (int i = 0; i < 20000 && !rdmalloc_reserve_closes_waiting(); i++)
		nanosleep(&ts, NULL);
	cr_assert(rdmalloc_reserve_closes_waiting(), "the destroy does not wait for its reserve's fill");
}

/* @h's next growth is handed its reserve and the thread is held inside
 * ibv_reg_mr making the next one (until the watchdog, 20 s, or
 * watch_done()); @h's blocks are freed if @free_blocks; then a thread
 * destroys @h, and is waiting for that fill when this returns it. */
static pthread_t destroy_during_its_fill(rdma_heap_t *h, int free_blocks)
{
	fake_block_next_reg();
	grow(h);
	fake_wait_blocked();
	while (free_blocks && nblocks)
		rdma_free(blocks[--nblocks]);
	watch_start();
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, destroy_heap, h), 0);
	wait_for_the_close();
	return t;
}

/* While a destroy waits for the chunk being made for its heap, the rest
 * of the library goes on: another heap is created, grows, is trimmed and
 * destroyed, and a PD is attached, with that fill held inside
 * ibv_reg_mr.  Before, the destroy waited holding the HEAP and PD locks,
 * and all of it waited behind the thread's registration (until the
 * watchdog let it go, 20 s). */
Test(reserve, destroy_waits_for_its_fill_holding_no_lock)
{
	rdma_heap_t *h = grown_heap();
	pthread_t t = destroy_during_its_fill(h, 1);
	double t0 = now_s();
	rdma_heap_t *other = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(other, "%s", strerror(errno));
	void *p = grow(other);
	cr_assert(fake_find(fake_pd(0), p));
	rdma_malloc_trim();
	struct ibv_pd *pd1 = fake_pd(1);
	cr_assert_eq(rdma_malloc_attach_pd(pd1), 0);
	cr_assert(fake_find(pd1, p), "the attach did not reach the other heap's chunk");
	cr_assert_eq(rdma_malloc_detach_pd(pd1), 0);
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	cr_assert_eq(rdma_heap_destroy(other), 0);
	double took = now_s() - t0;
	int stuck = watch_done();
	void *ret;
	pthread_join(t, &ret);
	cr_assert(!stuck, "the rest waited for the destroy's fill until it was let go (%.1f s)", took);
	cr_assert_eq((intptr_t)ret, 0);
	nothing_left();
}

/* A second destroy of the same heap while the first waits for the fill
 * (a program's bug) is refused at once with EINVAL, as after the first:
 * it neither waits for the fill nor touches the reserve of a heap that
 * may take the slot once the first is done.  Before, it waited for the
 * fill too (here until the watchdog let it go, 20 s). */
Test(reserve, a_second_destroy_during_the_first_is_refused)
{
	rdma_heap_t *h = grown_heap();
	pthread_t t = destroy_during_its_fill(h, 1);
	int second = rdma_heap_destroy(h);
	int stuck = watch_done();
	void *ret;
	pthread_join(t, &ret);
	cr_assert(!stuck, "the second destroy waited for the fill until it was let go");
	cr_assert_eq(second, EINVAL);
	cr_assert_eq((intptr_t)ret, 0);
	nothing_left();
}

/* A destroy that waited for its fill and then found the heap pinned (a
 * window granted meanwhile: EBUSY) leaves the heap's reserve working: a
 * growth lists it again, and the next one is handed a chunk made ahead. */
Test(reserve, a_destroy_refused_after_its_wait_leaves_the_reserve_working)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_MW_BIND });
	cr_assert(h);
	grow(h);
	rdmalloc_reserves_settle();
	pthread_t t = destroy_during_its_fill(h, 0); /* blocks[0] stays, for a window */
	struct ibv_qp qp = { .pd = fake_pd(0) };
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp, blocks[0], 64, RR, IBV_MW_TYPE_2, 0, 0);
	int stuck = watch_done();
	cr_assert(!stuck, "the grant waited for the destroy's fill until it was let go");
	cr_assert(mw, "%s", strerror(errno));
	void *ret;
	pthread_join(t, &ret);
	cr_assert_eq((intptr_t)ret, EBUSY, "destroyed with a window on its memory");
	rdmalloc_reserves_settle();
	cr_assert_eq(stats().reserve_chunks, 0, "the closed reserve kept its chunk");
	uint64_t hits = stats().reserve_hits;
	grow(h);
	rdmalloc_reserves_settle();
	cr_assert_eq(stats().reserve_chunks, 1, "no reserve made after the refused destroy");
	grow(h);
	cr_assert_eq(stats().reserve_hits, hits + 1, "the growth after a refused destroy had no reserve");
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	while (nblocks)
		rdma_free(blocks[--nblocks]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	rdmalloc_reserves_settle();
	cr_assert_eq(stats().chunks, 0);
	cr_assert_eq(fake_live_mrs(), 0);
}

/* fork() while a destroy waits for its heap's fill, which outlasts
 * fork's wait: in the child the heap is alive (its destroy was the
 * parent's thread's), its reserve works, nothing of the fill is counted,
 * and destroying it there neither hangs nor leaves anything registered.
 * Before the destroy waited holding no lock, the fork waited for it. */
Test(reserve, a_fork_while_a_destroy_waits_for_its_fill)
{
	rdma_heap_t *h = grown_heap();
	pthread_t t = destroy_during_its_fill(h, 1);
	rdmalloc_fork_wait_ns = 200 * 1000 * 1000;
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		struct rdma_malloc_stats c = stats();
		if (c.pinned_bytes != c.chunk_bytes)
			_exit(5); /* the fill's hold counted */
		uint64_t hits = c.reserve_hits;
		grow(h);
		rdmalloc_reserves_settle();
		grow(h);
		if (stats().reserve_hits != hits + 1)
			_exit(6); /* no reserve for a heap alive here */
		while (nblocks)
			rdma_free(blocks[--nblocks]);
		if (rdma_heap_destroy(h))
			_exit(7);
		c = stats();
		if (c.chunks || c.mrs || c.reserve_chunks)
			_exit(8);
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	int stuck = watch_done();
	rdmalloc_fork_wait_ns = RDMALLOC_FORK_WAIT_NS;
	void *ret;
	pthread_join(t, &ret);
	cr_assert(!stuck, "fork() waited for the destroy's fill until it was let go");
	cr_assert(WIFEXITED(status), "child: status %#x (14: SIGALRM, hung)", status);
	cr_assert_neq(WEXITSTATUS(status), 5, "the child counts the fill's hold as pinned");
	cr_assert_neq(WEXITSTATUS(status), 6, "the child's heap has no reserve");
	cr_assert_eq(WEXITSTATUS(status), 0, "child: exit %d", WEXITSTATUS(status));
	cr_assert_eq((intptr_t)ret, 0);
	nothing_left();
}

/* Under RDMALLOC_MAX_REGISTERED the reserve counts as held, and is given
 * up before a real allocation is refused: 2 + 2.5 + 3 MiB in use and a
 * 3.5 MiB reserve leave 5 MiB of 16; a 6 MiB chunk fits only without it. */
Test(reserve, limit_gives_up_the_reserve_first, .init = NULL)
{
	rdma_heap_t *h = grown_thrice_under("16M");
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.reserve_chunks, 1);
	cr_assert_eq(st.chunk_bytes, 11 * MiB, "chunks held %llu, the reserve included",
		     (unsigned long long)st.chunk_bytes);
	void *big = rdma_heap_malloc(h, 5 * MiB + MiB / 2);
	cr_assert(big, "refused while a reserve was held: %s", strerror(errno));
	st = stats();
	cr_assert_eq(st.limit_refusals, 0);
	cr_assert_geq(st.reserve_discards, 1, "the reserve was not given up");
	cr_assert_leq(st.chunk_bytes, 16 * MiB);
	rdmalloc_reserves_settle();
	st = stats();
	cr_assert_leq(st.chunk_bytes, 16 * MiB);
	cr_assert_eq(st.reserve_chunks + st.reserve_skipped > 0, 1, "the next reserve neither made nor counted");
	check_accounting(1);
}

static void *attach_pd1(void *arg)
{
	*(int *)arg = rdma_malloc_attach_pd(fake_pd(1));
	return NULL;
}

/* A relief drops the ready reserve chunk; an attach registering it (the
 * newest chunk: the first it registers) holds it busy, and that
 * registration may wait for a lock the relieving thread holds.  The
 * relief waits for it rdmalloc_fill_wait_ns at most, then goes on
 * without that chunk's bytes. */
Test(reserve, relief_stops_waiting_for_a_busy_reserve_chunk, .init = NULL)
{
	cr_redirect_stderr();
	rdma_heap_t *h = grown_thrice_under("12M");
	cr_assert_eq(stats().reserve_chunks, 1);
	rdmalloc_fill_wait_ns = 200 * 1000 * 1000;
	fake_block_next_reg_on(fake_pd(1));
	int attached = -1;
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, attach_pd1, &attached), 0);
	fake_wait_blocked(); /* the attach registers the reserve chunk */
	struct rdma_malloc_stats s0 = stats();
	watch_start();
	errno = 0;
	void *big = rdma_heap_malloc(h, 5 * MiB + MiB / 2); /* over the limit: a relief */
	int err = errno;
	struct rdma_malloc_stats s1 = stats();
	void *again = rdma_heap_malloc(h, 5 * MiB + MiB / 2); /* the chunk still busy: not waited for */
	struct rdma_malloc_stats s2 = stats();
	int stuck = watch_done();
	rdmalloc_fill_wait_ns = RDMALLOC_FILL_WAIT_NS;
	pthread_join(t, NULL);
	cr_assert(!stuck, "the relief waited for the busy reserve chunk until it was let go (20 s)");
	cr_assert_null(again);
	cr_assert_eq(s2.reserve_wait_timeouts, s1.reserve_wait_timeouts, "the same busy chunk was waited for again");
	cr_assert_null(big, "allocated although the reserve chunk held its bytes");
	cr_assert_eq(err, ENOMEM);
	cr_assert_eq(s1.reserve_wait_timeouts, s0.reserve_wait_timeouts + 1);
	cr_assert_eq(attached, 0);
	check_accounting(2);
	said("stopped waiting for a reserve chunk an attach or a detach works on");
	big = rdma_heap_malloc(h, 4 * MiB);
	cr_assert(big, "refused once nothing was busy: %s", strerror(errno));
	check_accounting(2);
}

/* A fork child has no registration thread: it grows without waiting for
 * one, and a reserve ready at the fork is handed over in the child. */
Test(reserve, fork_child_does_not_wait)
{
	rdma_heap_t *h = grown_heap();
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) { /* the reserve ready at the fork is the child's */
		alarm(20);
		uint64_t hits = stats().reserve_hits;
		grow(h);
		if (stats().reserve_hits != hits + 1)
			_exit(3);
		for (int i = 0; i < 4; i++)
			grow(h); /* would hang here if it waited for a thread */
		_exit(0);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child with a ready reserve: status %#x", status);
	check_accounting(1);
}

static atomic_int released;

/* Let the blocked registration go after @arg's milliseconds (NULL: 300). */
static void *release_later(void *arg)
{
	long ms = arg ? *(long *)arg : 300;
	struct timespec ts = { ms / 1000, ms % 1000 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	atomic_store(&released, 1);
	fake_release_reg();
	return NULL;
}

/* fork() waits while the thread is inside ibv_reg_mr: a child cut in the
 * middle of a fill would inherit a chunk half made (its bytes held under
 * the limit forever) and, with fork protection, libibverbs' own lock
 * held.  Both processes go on growing. */
Test(reserve, fork_waits_for_the_thread)
{
	rdma_heap_t *h = grown_heap();
	fake_block_next_reg();
	grow(h);
	fake_wait_blocked(); /* the thread is inside ibv_reg_mr */
	atomic_store(&released, 0);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, release_later, NULL), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		if (!atomic_load(&released))
			_exit(4);
		for (int i = 0; i < 4; i++)
			grow(h);
		_exit(0);
	}
	int waited = atomic_load(&released);
	pthread_join(t, NULL);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(waited, "fork() returned while the thread was inside ibv_reg_mr");
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: status %#x", status);
	grow(h);
	rdmalloc_reserves_settle();
	check_accounting(1);
}

/* A fill that outlasts fork()'s wait (30 s in all, shortened here to
 * 200 ms; fork.h): its verbs call may never end (one that frees into
 * jemalloc after jemalloc's prepare), so the fork goes ahead rather than
 * hang, logged once and counted once in fallbacks.  The child does without
 * the chunk half made and grows; the parent's fill ends as it would. */
Test(reserve, fork_goes_ahead_once_a_fill_outlasts_its_wait)
{
	rdma_heap_t *h = grown_heap();
	rdmalloc_fork_wait_ns = 200 * 1000 * 1000;
	fake_block_next_reg();
	grow(h);
	fake_wait_blocked(); /* the thread is inside ibv_reg_mr */
	struct rdma_malloc_stats s0 = stats();
	atomic_store(&released, 0);
	long ms = 5000;
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, release_later, &ms), 0);
	double t0 = now_s();
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		struct rdma_malloc_stats c = stats(); /* every chunk held, and only they */
		if (c.pinned_bytes != c.chunk_bytes)
			_exit(5);
		for (int i = 0; i < 4; i++)
			grow(h);
		rdmalloc_reserves_settle(); /* waits for no fill of the parent's */
		_exit(0);
	}
	double waited = now_s() - t0;
	int early = !atomic_load(&released);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(early && waited >= 0.19, "fork() returned after %.3f s, not after its 0.2 s wait", waited);
	cr_assert(WIFEXITED(status), "child: status %#x", status);
	cr_assert_neq(WEXITSTATUS(status), 5, "the child counts the chunk half made as pinned");
	cr_assert_eq(WEXITSTATUS(status), 0, "child: status %#x", status);
	cr_assert_eq(stats().fallbacks, s0.fallbacks + 1, "not counted once in fallbacks");
	pthread_join(t, NULL);
	rdmalloc_fork_wait_ns = RDMALLOC_FORK_WAIT_NS;
	grow(h);
	rdmalloc_reserves_settle();
	check_accounting(1);
}

/* The same while the thread drops an idle reserve chunk (inside
 * ibv_dereg_mr): the child must not count the chunk half dropped, out of
 * the list, as held (chunks, chunk_bytes, pinned_bytes, which
 * RDMALLOC_MAX_REGISTERED limits).  The parent's drop ends as it would. */
Test(reserve, a_fork_that_goes_ahead_mid_drop_leaves_the_child_counting_right)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 200 });
	cr_assert(h);
	grow(h);
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats s0 = stats();
	cr_assert_eq(s0.reserve_chunks, 1);
	uint64_t ready = s0.reserve_bytes;
	rdmalloc_fork_wait_ns = 200 * 1000 * 1000;
	fake_block_next_dereg();
	fake_wait_blocked(); /* the thread drops the idle reserve, inside ibv_dereg_mr */
	atomic_store(&released, 0);
	long ms = 5000;
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, release_later, &ms), 0);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		struct rdma_malloc_stats c = stats();
		if (atomic_load(&released))
			_exit(4);
		if (c.chunks != s0.chunks - 1 || c.chunk_bytes != s0.chunk_bytes - ready)
			_exit(5);
		if (c.pinned_bytes != s0.pinned_bytes - ready)
			_exit(6);
		grow(h);
		rdmalloc_reserves_settle();
		_exit(0);
	}
	int early = !atomic_load(&released);
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(early, "fork() waited for the drop");
	cr_assert(WIFEXITED(status), "child: status %#x", status);
	cr_assert_neq(WEXITSTATUS(status), 5, "the child counts the chunk half dropped among its chunks");
	cr_assert_neq(WEXITSTATUS(status), 6, "the child counts the chunk half dropped as pinned");
	cr_assert_eq(WEXITSTATUS(status), 0, "child: status %#x", status);
	pthread_join(t, NULL);
	rdmalloc_fork_wait_ns = RDMALLOC_FORK_WAIT_NS;
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats s1 = stats();
	cr_assert_eq(s1.reserve_chunks, 0);
	cr_assert_eq(s1.chunks, s0.chunks - 1, "the parent's drop did not end as it would");
	check_accounting(1);
}

/* RDMALLOC_RESERVE=0: every growth registered inline, and no thread for a
 * heap that never decays (one that does wants the thread for its tick:
 * test_giveback.c, idle_program_gives_back_without_a_reserve). */
Test(reserve, off_registers_inline, .init = NULL)
{
	setenv("RDMALLOC_RESERVE", "0", 1);
	install(1);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = -1 });
	cr_assert(h);
	for (int i = 0; i < 5; i++)
		grow(h);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.inline_chunks, 5);
	cr_assert_eq(st.reserve_hits, 0);
	cr_assert_eq(st.reserve_chunks, 0);
	cr_assert_eq(atomic_load(&rdmalloc_reserve_thread_state), 0, "a thread was wanted");
	check_accounting(1);
}

/* The thread a program's thread starts serves the whole process: it runs
 * with the scheduling and CPUs the process had at load, not with those of
 * the thread whose allocation started it (a data-path thread pinned to one
 * CPU under SCHED_FIFO; here SCHED_BATCH, which any test may leave again),
 * nor with the main thread's CPUs once it pinned itself to a polling CPU. */
static void pin_to_this_cpu(void)
{
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0, "%s", strerror(errno));
}

static void *start_from_a_batch_pinned_thread(void *h)
{
	struct sched_param sp = { 0 };
	cr_assert_eq(sched_setscheduler(0, SCHED_BATCH, &sp), 0, "%s", strerror(errno));
	pin_to_this_cpu();
	void *p = rdma_heap_malloc(h, 64 * KiB); /* its heap's first growth: the thread starts on return */
	cr_assert(p);
	return p;
}

/* The reserve's thread runs with @policy on @cpus. */
static void check_placement(int policy, const cpu_set_t *cpus)
{
	pid_t tid = thread_named_wait("rdmalloc-reserv");
	cr_assert(tid, "no rdmalloc-reserv thread after 5 s");
	for (int i = 0; i < 500 && sched_getscheduler(tid) != policy; i++)
		usleep(10000); /* it moves itself: once it has run */
	cr_assert_eq(sched_getscheduler(tid), policy, "it took the policy of the thread that started it");
	cpu_set_t its;
	cr_assert_eq(sched_getaffinity(tid, sizeof its, &its), 0);
	if (CPU_COUNT(cpus) < 2)
		cr_log_warn("one CPU allowed: the CPUs are not tested");
	cr_assert(CPU_EQUAL(cpus, &its), "it runs on %d CPUs, the process at load on %d", CPU_COUNT(&its),
		  CPU_COUNT(cpus));
	cr_assert_eq(stats().fallbacks, 0, "counted as a fallback");
}

Test(reserve, the_thread_runs_as_the_process_at_load_not_as_its_starter)
{
	cpu_set_t cpus;
	cr_assert_eq(sched_getaffinity(0, sizeof cpus, &cpus), 0);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	pthread_t t;
	void *p;
	cr_assert_eq(pthread_create(&t, NULL, start_from_a_batch_pinned_thread, h), 0);
	cr_assert_eq(pthread_join(t, &p), 0);
	check_placement(sched_getscheduler(0), &cpus);
	rdma_free(p);
}

Test(reserve, the_thread_keeps_the_cpus_of_the_process_at_load_once_main_pins_itself)
{
	cpu_set_t cpus;
	cr_assert_eq(sched_getaffinity(0, sizeof cpus, &cpus), 0);
	pin_to_this_cpu(); /* a polling main thread */
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 64 * KiB);
	cr_assert(p);
	check_placement(sched_getscheduler(0), &cpus);
	rdma_free(p);
}

/* The signals thread @tid blocks (its SigBlk in /proc), or ~0 if unread. */
static unsigned long long signals_blocked(pid_t tid)
{
	char path[64], line[128];
	snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
	FILE *f = fopen(path, "r");
	unsigned long long mask = ~0ull;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "SigBlk: %llx", &mask) == 1)
			break;
	if (f)
		fclose(f);
	return mask;
}

/* The thread keeps the program's signals away from itself (a handler of
 * the program's must not run on it), but not the faults it may raise
 * itself: blocked, a fault kills the process at once and in silence, past
 * every handler (a sanitizer's report, a program's crash reporter); the
 * stress test once died so, with nothing said. */
Test(reserve, the_thread_blocks_the_programs_signals_not_its_own_faults)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 64 * KiB); /* its heap's first growth: the thread starts */
	cr_assert(p);
	pid_t tid = thread_named_wait("rdmalloc-reserv");
	cr_assert(tid, "no rdmalloc-reserv thread after 5 s");
	unsigned long long m = signals_blocked(tid);
	cr_assert_neq(m, ~0ull, "no SigBlk for thread %d", (int)tid);
	static const int program_s[] = { SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGUSR1, SIGALRM };
	for (size_t i = 0; i < sizeof program_s / sizeof program_s[0]; i++)
		cr_expect(m >> (program_s[i] - 1) & 1, "signal %d (%s) is not blocked: the program's handler may run on "
			  "rdmalloc's thread", program_s[i], strsignal(program_s[i]));
	static const int faults[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS };
	for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
		cr_expect(!(m >> (faults[i] - 1) & 1), "signal %d (%s) is blocked: a fault on rdmalloc's thread would "
			  "kill the process silently", faults[i], strsignal(faults[i]));
	rdma_free(p);
}

/* A process started under SCHED_BATCH (or SCHED_IDLE, which thread
 * attributes cannot carry): the thread runs under it too, on the CPUs at
 * load, though a SCHED_OTHER thread pinned to one CPU started it. */
Test(reserve, the_thread_takes_a_batch_policy_of_the_process_at_load, .init = NULL)
{
	install(1);
	cpu_set_t cpus;
	cr_assert_eq(sched_getaffinity(0, sizeof cpus, &cpus), 0);
	struct sched_param sp = { 0 };
	cr_assert_eq(sched_setscheduler(0, SCHED_BATCH, &sp), 0, "%s", strerror(errno));
	rdmalloc_os_note_placement(); /* as if the program had started under SCHED_BATCH */
	cr_assert_eq(sched_setscheduler(0, SCHED_OTHER, &sp), 0, "%s", strerror(errno));
	pin_to_this_cpu();
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 64 * KiB);
	cr_assert(p);
	check_placement(SCHED_BATCH, &cpus);
	rdma_free(p);
}

/* A program thread at nice N+5 starts the thread of a process whose nice
 * value at load was N+15 (N the run's own, 0 mostly): it runs at N+15, not
 * at its starter's (the other way, a lower value, needs RLIMIT_NICE or
 * CAP_SYS_NICE: the same call). */
static sem_t go;
static int base_nice;

static void *start_at_nice_5(void *h)
{
	cr_assert_eq(getpriority(PRIO_PROCESS, 0), base_nice + 5);
	while (sem_wait(&go))
		;
	void *p = rdma_heap_malloc(h, 64 * KiB); /* its heap's first growth: the thread starts on return */
	cr_assert(p);
	return p;
}

Test(reserve, the_thread_takes_the_nice_value_of_the_process_at_load, .init = NULL)
{
	install(1);
	cr_assert_eq(sem_init(&go, 0, 0), 0);
	errno = 0;
	base_nice = getpriority(PRIO_PROCESS, 0);
	cr_assert_eq(errno, 0);
	if (base_nice + 15 > 19)
		cr_skip_test("the run is at nice %d: no room for +15", base_nice);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	cr_assert_eq(setpriority(PRIO_PROCESS, 0, base_nice + 5), 0, "%s", strerror(errno)); /* the main thread only */
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, start_at_nice_5, h), 0);
	cr_assert_eq(setpriority(PRIO_PROCESS, 0, base_nice + 15), 0, "%s", strerror(errno));
	rdmalloc_os_note_placement(); /* as if the program had started at nice 15 */
	cr_assert_eq(sem_post(&go), 0);
	void *p;
	cr_assert_eq(pthread_join(t, &p), 0);
	pid_t tid = thread_named_wait("rdmalloc-reserv");
	cr_assert(tid, "no rdmalloc-reserv thread after 5 s");
	for (int i = 0; i < 500 && getpriority(PRIO_PROCESS, (id_t)tid) != base_nice + 15; i++)
		usleep(10000); /* it moves itself: once it has run */
	cr_assert_eq(getpriority(PRIO_PROCESS, (id_t)tid), base_nice + 15,
		     "it took the nice value of the thread that started it");
	cr_assert_eq(stats().fallbacks, 0, "counted as a fallback");
	rdma_free(p);
}

/* The reserve's thread asked for while a fork holds the inner locks (the
 * drop-in's malloc asks, maybe under a FILE's lock, which glibc's fork
 * takes after the handlers): the start is put off taking none of them.
 * It took the chunk lock to say so (found in review). */
Test(reserve, a_start_during_a_fork_takes_no_lock_the_fork_holds)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	int none = 0; /* as a growth asks */
	cr_assert(atomic_compare_exchange_strong(&rdmalloc_reserve_thread_state, &none, 1));
	int returned = returns_in_a_fork_window(rdmalloc_reserve_start);
	cr_assert(returned, "the start waited for a lock the fork holds");
	cr_assert_eq(atomic_load(&rdmalloc_reserve_thread_state), 1, "not asked for again");
	rdmalloc_reserve_start();
	cr_assert_eq(atomic_load(&rdmalloc_reserve_thread_state), 2);
	cr_assert(thread_named_wait("rdmalloc-reserv"), "no rdmalloc-reserv thread after 5 s");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}
