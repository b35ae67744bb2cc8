/* SPDX-License-Identifier: MIT */
/*
 * test_big.c - big blocks (RDMALLOC_BIG_BLOCK, 64K by default; big.h),
 * against the fake backend: a block past the threshold is a chunk of its
 * own whose registration covers it whole; a freed one is kept, registered,
 * and serves the next block of its size without a registration; a trim
 * (or the decay time) releases it and its registration; realloc keeps the
 * bytes; a second free of a kept block, or a free inside one, aborts.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "addrmap.h"
#include "big.h"
#include "chunk.h"
#include "fake_verbs.h"
#include "fork.h"
#include "reserve.h"
#include "verbs.h"
#include "rdma_malloc.h"
#include "clock_now.h"
#include "watchdog.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static void setup(void)
{
	setenv("RDMALLOC_BIG_BLOCK", "64K", 1);
	setenv("RDMALLOC_DECAY_MS", "-1", 1); /* kept until a trim */
	fake_verbs_install(1);
}

TestSuite(big, .init = setup, .timeout = 60);

static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

Test(big, a_chunk_of_its_own_registered_whole)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	size_t mrs = fake_live_mrs();
	char *p = rdma_heap_malloc(h, 300 * KiB + 5);
	cr_assert(p);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	cr_assert(c && c->big && c->base == (uintptr_t)p);
	cr_assert_eq(c->size, 304 * KiB, "a big block is page-rounded: %zu", c->size);
	cr_assert_eq(rdma_malloc_usable_size(p), 304 * KiB);
	cr_assert_eq(fake_live_mrs(), mrs + 1);
	const struct fake_mr_info *f = fake_find(fake_pd(0), p);
	cr_assert(f);
	uint32_t l;
	cr_assert_eq(rdma_malloc_keys(p, 304 * KiB, NULL, &l, NULL), 0);
	cr_assert_eq(l, f->mr->lkey);
	cr_assert_eq(rdma_malloc_keys(p + 304 * KiB - 1, 1, NULL, &l, NULL), 0);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.big_blocks, 1);
	cr_assert_eq(st.big_bytes, 304 * KiB);
	/* Small blocks stay jemalloc's. */
	void *s = rdma_heap_malloc(h, 1000);
	cr_assert(s && !rdmalloc_addrmap_find(s)->big);
	rdma_free(s);
	rdma_free(p);
	rdma_heap_destroy(h);
}

Test(big, freed_one_serves_the_next_then_a_trim_releases_it)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	char *p = rdma_heap_malloc(h, 1 * MiB);
	cr_assert(p);
	memset(p, 1, 1 * MiB);
	size_t mrs = fake_live_mrs();
	unsigned long regs = fake_reg_calls();
	rdma_free(p);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.big_blocks, 0);
	cr_assert_eq(st.big_cached_bytes, 1 * MiB);
	cr_assert_eq(fake_live_mrs(), mrs, "a freed big block stays registered, for reuse");
	char *q = rdma_heap_calloc(h, 1, 1 * MiB - 4 * KiB); /* within an eighth: reused */
	cr_assert_eq(q, p);
	for (size_t i = 0; i < 1 * MiB - 4 * KiB; i++)
		cr_assert_eq(q[i], 0, "calloc of a reused block: byte %zu", i);
	cr_assert_eq(fake_reg_calls(), regs, "reuse registered again");
	cr_assert_eq(stats().big_cache_hits, 1);
	/* Far smaller: not this one (bounded waste). */
	char *r = rdma_heap_malloc(h, 128 * KiB);
	cr_assert(r && r != q);
	uint64_t back = stats().chunks_given_back, gen = rdma_heap_key_generation(h);
	rdma_free(q); /* released at once: past the bound of what is kept */
	rdma_free(r); /* kept: the most recently freed */
	/* Given back as an idle chunk is: counted, in what the trim returns,
	 * and in the heap's key generation (programs that cache keys). */
	cr_assert_geq(rdma_malloc_trim(), 128 * KiB);
	st = stats();
	cr_assert_eq(st.chunks_given_back, back + 2, "released big blocks are not counted as given back");
	cr_assert_gt(rdma_heap_key_generation(h), gen);
	cr_assert_eq(st.big_cached_bytes, 0);
	cr_assert_null(fake_find(fake_pd(0), p), "a released big block's registration stays");
	rdma_heap_destroy(h);
}

/* A heap that has only ever grown by big blocks: a freed one goes once its
 * decay time has passed, with no further call into the library (before,
 * nothing started the background thread: it stayed registered until the
 * heap was used again). */
Test(big, a_freed_one_goes_after_the_decay_time_while_the_program_is_idle)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								   .decay_ms = 300 });
	cr_assert(h);
	char *p = rdma_heap_malloc(h, 64 * MiB);
	cr_assert(p);
	memset(p, 1, 64 * MiB);
	rdma_free(p);
	cr_assert_eq(stats().big_cached_bytes, 64 * MiB);
	struct rdma_malloc_stats st;
	for (int i = 0; i < 50 && (st = stats()).big_cached_bytes; i++)
		usleep(100000); /* no call into the library but the stats */
	cr_assert_eq(st.big_cached_bytes, 0, "a freed big block still kept 5 s after a 300 ms decay");
	cr_assert_null(fake_find(fake_pd(0), p), "its registration stays");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

Test(big, realloc_keeps_the_bytes)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	unsigned char *p = rdma_heap_malloc(h, 100 * KiB);
	for (size_t i = 0; i < 100 * KiB; i++)
		p[i] = (unsigned char)(i * 7);
	unsigned char *q = rdma_realloc(p, 3 * MiB); /* bigger: moved */
	cr_assert(q);
	for (size_t i = 0; i < 100 * KiB; i++)
		cr_assert_eq(q[i], (unsigned char)(i * 7));
	unsigned char *r = rdma_realloc(q, 1000); /* below the threshold: jemalloc's */
	cr_assert(r && !rdmalloc_addrmap_find(r)->big);
	for (size_t i = 0; i < 1000; i++)
		cr_assert_eq(r[i], (unsigned char)(i * 7));
	uint32_t l;
	cr_assert_eq(rdma_malloc_keys(r, 1000, NULL, &l, NULL), 0);
	rdma_free(r);
	rdma_heap_destroy(h);
}

Test(big, double_free_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	setup();
	void *p = rdma_malloc(256 * KiB);
	cr_assert(p && rdmalloc_addrmap_find(p)->big);
	rdma_free(p);
	rdma_free(p);
}

/* rdma_realloc of a kept (freed) big block: it returned the block as it
 * was when the new size fitted, and the next rdma_malloc handed it out
 * again (the review of issue 23). */
Test(big, realloc_of_freed_block_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	setup();
	void *p = rdma_malloc(256 * KiB);
	cr_assert(p && rdmalloc_addrmap_find(p)->big);
	rdma_free(p);
	cr_assert_fail("rdma_realloc returned %p", rdma_realloc(p, 252 * KiB));
}

Test(big, free_inside_aborts, .signal = SIGABRT, .init = cr_redirect_stderr)
{
	setup();
	char *p = rdma_malloc(256 * KiB);
	cr_assert(p);
	rdma_free(p + 4096);
}

static atomic_int makers_stop;

/* Make big blocks of new sizes (new chunks) until told to stop, eight
 * live at a time. */
static void *maker(void *arg)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * (uintptr_t)arg;
	void *live[8] = { 0 };
	for (unsigned i = 0; !atomic_load(&makers_stop); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rdma_free(live[i % 8]);
		live[i % 8] = rdma_malloc(64 * KiB + (size_t)(x % (4 * MiB)));
		cr_assert(live[i % 8]);
	}
	for (unsigned i = 0; i < 8; i++)
		rdma_free(live[i]);
	return NULL;
}

/* An attach ends while other threads make chunks faster than the new PD
 * registers them (each big block of a new size is a chunk; the PD's
 * registrations take 2 ms more): it owes what was there when it started,
 * and creators wait for its end once it has paid that.  Before, it
 * chased the new chunks for ever (the stress test with big blocks never
 * ended: its PD attach had not returned after 5 minutes). */
Test(big, attach_ends_while_chunks_are_made)
{
	fake_slow_reg_on(fake_pd(1), 2000);
	atomic_store(&makers_stop, 0);
	pthread_t t[2];
	for (uintptr_t i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, maker, (void *)(i + 1)), 0);
	struct timespec d = { 0, 100 * 1000 * 1000 };
	nanosleep(&d, NULL);
	double t0 = now_s();
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	double took = now_s() - t0;
	atomic_store(&makers_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	fake_slow_reg_on(NULL, 0);
	cr_assert_lt(took, 10.0, "the attach took %.1f s", took);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.mrs, fake_live_mrs());
	cr_assert_eq(st.chunks * 2, st.mrs, "chunks %llu, regions %llu: one without the new PD",
		     (unsigned long long)st.chunks, (unsigned long long)st.mrs);
	cr_assert_eq(rdma_malloc_detach_pd(fake_pd(1)), 0);
}

static void *attach_pd1(void *arg)
{
	*(int *)arg = rdma_malloc_attach_pd(fake_pd(1));
	return NULL;
}

static void let_held_go(void)
{
	fake_release_held();
}

/* A creator waits for a closing attach only so long: the attach's last
 * registration may wait for a lock the creating thread holds (a
 * provider's, taken before it called malloc), and both would wait for
 * ever.  After the wait it goes on, and the attach registers its chunk. */
Test(big, a_creator_stops_waiting_for_a_closing_attach, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_RESERVE", "0", 1);
	setup();
	rdmalloc_fill_wait_ns = 200 * 1000 * 1000;
	void *p0 = rdma_malloc(3 * MiB);
	cr_assert(p0);
	unsigned owed = (unsigned)stats().chunks;
	fake_block_next_reg_on(fake_pd(1));
	int attached = -1;
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, attach_pd1, &attached), 0);
	fake_wait_blocked(); /* its first registration, of those it owes */
	void *p1 = rdma_malloc(5 * MiB); /* a chunk it does not owe */
	cr_assert(p1);
	/* This thread now holds the provider's lock: the attach's first
	 * registration past what it owed (attach_closing set) waits for it. */
	fake_hold_regs_off_after(pthread_self(), owed - 1);
	fake_release_reg();
	double t0 = now_s();
	while (!fake_held_now())
		cr_assert_lt(now_s() - t0, 10.0, "the attach never reached a chunk it did not owe");
	struct watchdog w;
	cr_assert_eq(watchdog_start(&w, let_held_go), 0);
	void *p2 = rdma_malloc(7 * MiB);
	int fired = watchdog_done(&w);
	cr_assert(!fired, "the allocation waited for the attach, which waited for it");
	cr_assert(p2, "%s", strerror(errno));
	pthread_join(t, NULL);
	cr_assert_eq(attached, 0);
	cr_assert_geq(stats().reserve_wait_timeouts, 1);
	struct rdma_malloc_stats st = stats();
	cr_assert_eq(st.chunks * 2, st.mrs, "chunks %llu, regions %llu: one without the new PD",
		     (unsigned long long)st.chunks, (unsigned long long)st.mrs);
	void *ps[] = { p0, p1, p2 };
	for (int i = 0; i < 3; i++) {
		uint32_t l;
		cr_assert_eq(rdma_malloc_keys(ps[i], 1, fake_pd(1), &l, NULL), 0);
		rdma_free(ps[i]);
	}
}

/* Big blocks of sizes that never repeat, freed as fast as they are made:
 * every one a new chunk, the freed ones released unused.  After a window
 * of that, the heap's next big-sized allocations are jemalloc's (counted);
 * a heap that only grows, however many sizes, is never suspended. */
Test(big, churn_of_new_sizes_goes_to_jemalloc)
{
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h);
	uint64_t x = 88172645463325252ull;
	void *live[8] = { 0 };
	uint64_t before = stats().big_suspensions;
	for (unsigned i = 0; i < (RDMALLOC_BIG_WINDOWS + 1) * RDMALLOC_BIG_WINDOW; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rdma_free(live[i % 8]);
		live[i % 8] = rdma_heap_malloc(h, 64 * KiB + (size_t)(x % (2 * MiB)));
		cr_assert(live[i % 8]);
	}
	cr_assert_gt(stats().big_suspensions, before, "no suspension after %u blocks of new sizes",
		     (RDMALLOC_BIG_WINDOWS + 1) * RDMALLOC_BIG_WINDOW);
	void *p = rdma_heap_malloc(h, 300 * KiB);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	cr_assert(c && !c->big, "a big-sized block while suspended is jemalloc's");
	uint32_t l;
	cr_assert_eq(rdma_malloc_keys(p, 300 * KiB, NULL, &l, NULL), 0);
	rdma_free(p);
	for (unsigned i = 0; i < 8; i++)
		rdma_free(live[i]);
	cr_assert_eq(rdma_heap_destroy(h), 0);

	h = rdma_heap_create(NULL);
	cr_assert(h);
	before = stats().big_suspensions;
	enum { N = 600 };
	static void *grown[N];
	for (unsigned i = 0; i < N; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		grown[i] = rdma_heap_malloc(h, 64 * KiB + (size_t)(x % (256 * KiB)));
		cr_assert(grown[i]);
		c = rdmalloc_addrmap_find(grown[i]);
		cr_assert(c && c->big, "block %u of a growing heap is not big", i);
	}
	cr_assert_eq(stats().big_suspensions, before, "growth taken for churn");
	for (unsigned i = 0; i < N; i++)
		rdma_free(grown[i]);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* RDMALLOC_CHUNK_MAX=auto: where blocks of 64 KiB or more are chunks of
 * their own, jemalloc's chunks (of smaller blocks) are 2 MiB each, so a few
 * live blocks keep little pinned; without big blocks (the drop-in's heap,
 * RDMALLOC_BIG_BLOCK=0) jemalloc's series, which leaves no chunk mostly
 * empty beside a block of 1-2 MiB. */
static size_t chunks_for_small_blocks(rdma_heap_t *h)
{
	struct rdma_malloc_stats st0 = stats();
	enum { N = 96 * 1024 };
	for (int i = 0; i < N; i++)
		cr_assert(rdma_heap_malloc(h, 1024)); /* 96 MiB, kept: the heap goes */
	struct rdma_malloc_stats st = stats();
	cr_assert_geq(st.chunk_bytes - st0.chunk_bytes, 96 * MiB);
	return st.chunks - st0.chunks;
}

Test(big, small_blocks_are_in_2m_chunks)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(h);
	size_t n = chunks_for_small_blocks(h);
	cr_assert_geq(n, 48, "96 MiB of 1 KiB blocks in %zu chunks: not 2 MiB ones", n);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

Test(big, without_big_blocks_chunks_follow_jemallocs_series, .init = NULL)
{
	setenv("RDMALLOC_BIG_BLOCK", "0", 1);
	setenv("RDMALLOC_DECAY_MS", "-1", 1);
	fake_verbs_install(1);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(h);
	size_t n = chunks_for_small_blocks(h);
	cr_assert_lt(n, 24, "96 MiB of 1 KiB blocks in %zu chunks: capped at 2 MiB without big blocks", n);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* ---- fork ---- */

/* Set by the test's prepare handler, registered after the library's: it
 * runs first, as fork() begins. */
static atomic_int fork_began;

static void mark_fork(void)
{
	atomic_store(&fork_began, 1);
}

/* Releases the held registration once fork() has begun, and a while after:
 * a fork that does not wait for it has forked by then. */
static void *release_later(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000 && !atomic_load(&fork_began); i++)
		usleep(10 * 1000);
	usleep(200 * 1000);
	fake_release_reg();
	return NULL;
}

/* fork() now: the child's exit status, 0 when nothing was under way in
 * the backend there, 3 otherwise. */
static int fork_now(void)
{
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0)
		_exit(fake_calls_under_way() == 0 ? 0 : 3);
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return st;
}

static void setup_no_reserve(void)
{
	setenv("RDMALLOC_RESERVE", "0", 1); /* the registration held up is the block's */
	setup();
}

static void setup_no_reserve_quiet(void)
{
	cr_redirect_stderr();
	setup_no_reserve();
}

/* A big block's chunk registers outside every lock of jemalloc's: a fork()
 * meanwhile must wait for the registration, or the child inherits the
 * backend's (a provider's) locks as that call held them, with no thread to
 * release them.  The backend's count of calls under way, seen in the
 * child, must be zero.  The backend allocates and frees from jemalloc
 * inside the call, as libibverbs may: fork must not wait for the call
 * while it holds jemalloc's locks. */
Test(big, fork_waits_for_a_registration_under_way, .init = setup_no_reserve)
{
	void *warm = rdma_malloc(64); /* RDMA up, the default PD's */
	cr_assert(warm);
	cr_assert_eq(pthread_atfork(mark_fork, NULL, NULL), 0);
	fake_reenter_jemalloc(1);
	fake_block_next_reg();
	struct fake_alloc b;
	pthread_t r;
	size_t calls = fake_reg_calls();
	fake_alloc_start(&b, 1 * MiB);
	fake_wait_blocked();
	cr_assert_eq(fake_calls_under_way(), 1);
	cr_assert_eq(fake_reg_calls(), calls, "the block's registration is the one held up");
	cr_assert_eq(pthread_create(&r, NULL, release_later, NULL), 0);
	int st = fork_now();
	pthread_join(r, NULL);
	fake_alloc_join(&b);
	fake_reenter_jemalloc(0);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		  "the child was forked in the middle of a registration (status %#x)", st);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(b.p);
	cr_assert(b.p && c && c->big, "the block was made, a big one");
	rdma_free(b.p);
	rdma_free(warm);
}

/* A registration under way that outlasts fork()'s wait (30 s, shortened
 * here to 200 ms; fork.h): the fork goes ahead rather than hang, logged
 * once and counted in fallbacks, and the registration ends as it would. */
Test(big, fork_goes_ahead_once_a_registration_outlasts_its_wait, .init = setup_no_reserve_quiet)
{
	void *warm = rdma_malloc(64);
	cr_assert(warm);
	rdmalloc_fork_wait_ns = 200 * 1000 * 1000;
	fake_block_next_reg();
	struct fake_alloc b;
	fake_alloc_start(&b, 1 * MiB);
	fake_wait_blocked();
	struct rdma_malloc_stats s0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(s0) }, s1 = s0;
	cr_assert_eq(rdma_malloc_stats_get(&s0), 0);
	double t0 = now_s();
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0)
		_exit(fake_calls_under_way() == 1 ? 0 : 3); /* forked in the middle of it, as said */
	double waited = now_s() - t0;
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	cr_assert(waited >= 0.19 && waited < 20, "fork() returned after %.3f s, not after its 0.2 s wait", waited);
	cr_assert_eq(rdma_malloc_stats_get(&s1), 0);
	cr_assert_eq(s1.fallbacks, s0.fallbacks + 1, "not counted in fallbacks");
	fake_release_reg();
	fake_alloc_join(&b);
	cr_assert(b.p, "the block's registration did not end as it would");
	rdma_free(b.p);
	rdma_free(warm);
}

/* While fork() waits for a registration under way, a big block's chunk made
 * meanwhile on another thread waits for the fork before it registers (a
 * section, verbs.h): fork never happens in the middle of one that started
 * after its wait.  The second block's registration must not have begun in
 * the child, and nothing be under way there. */
static atomic_int second_began; /* its registration reached the backend during the fork's wait */
static struct fake_alloc second;

static void *second_block_during_the_wait(void *arg)
{
	unsigned long *before = arg;
	for (int i = 0; i < 1000 && !atomic_load(&fork_began); i++)
		usleep(10 * 1000);
	for (int i = 0; i < 1000 && !rdmalloc_verbs_fork_coming(); i++)
		usleep(1000);
	*before = fake_pd_calls(fake_pd(0));
	fake_alloc_start(&second, 2 * MiB); /* no kept chunk fits: a new one */
	for (int i = 0; i < 5000 && rdmalloc_verbs_parked() == 0; i++) {
		if (fake_pd_calls(fake_pd(0)) > *before) {
			atomic_store(&second_began, 1);
			break;
		}
		usleep(1000);
	}
	fake_release_reg();
	return NULL;
}

Test(big, a_section_started_during_a_fork_waits_for_it, .init = setup_no_reserve)
{
	void *warm = rdma_malloc(64);
	cr_assert(warm);
	cr_assert_eq(rdma_malloc_default_pd(), fake_pd(0));
	cr_assert_eq(pthread_atfork(mark_fork, NULL, NULL), 0);
	fake_block_next_reg();
	struct fake_alloc first;
	fake_alloc_start(&first, 1 * MiB);
	fake_wait_blocked();
	static unsigned long before;
	pthread_t h;
	cr_assert_eq(pthread_create(&h, NULL, second_block_during_the_wait, &before), 0);
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0)
		_exit(fake_pd_calls(fake_pd(0)) == before && fake_calls_under_way() == 0 ? 0 : 3);
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	pthread_join(h, NULL);
	void *p = fake_alloc_join(&first), *q = fake_alloc_join(&second);
	cr_assert(!atomic_load(&second_began), "the second block's registration began while fork waited");
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child saw a registration begun or under way (%#x)", st);
	cr_assert(p && q);
	rdma_free(p);
	rdma_free(q);
	rdma_free(warm);
}

/* A kept block that needs no verbs call is served at once, even while a
 * fork() waits for a registration under way: only the verbs calls of a
 * big block's chunk are a section (verbs.h), not its cache's hits, which
 * take no global lock of the fork's. */
static struct fake_alloc hit;
static atomic_int hit_parked; /* the hit waited for the fork */
static atomic_int hit_served; /* it was served while the fork still waited */

static void *kept_block_during_the_wait(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000 && !atomic_load(&fork_began); i++)
		usleep(10 * 1000);
	for (int i = 0; i < 1000 && !rdmalloc_verbs_fork_coming(); i++)
		usleep(1000);
	fake_alloc_start(&hit, 1 * MiB);
	for (int i = 0; i < 5000 && !__atomic_load_n(&hit.p, __ATOMIC_ACQUIRE); i++) {
		if (rdmalloc_verbs_parked()) {
			atomic_store(&hit_parked, 1);
			break;
		}
		usleep(1000);
	}
	atomic_store(&hit_served, __atomic_load_n(&hit.p, __ATOMIC_ACQUIRE) && rdmalloc_verbs_fork_coming());
	fake_release_reg();
	return NULL;
}

Test(big, a_kept_block_is_served_during_a_fork, .init = setup_no_reserve)
{
	void *warm = rdma_malloc(64);
	cr_assert(warm);
	void *kept = rdma_malloc(1 * MiB);
	cr_assert(kept);
	rdma_free(kept); /* kept, registered: the next 1 MiB block is it */
	cr_assert_eq(pthread_atfork(mark_fork, NULL, NULL), 0);
	fake_block_next_reg();
	struct fake_alloc first;
	fake_alloc_start(&first, 2 * MiB); /* too big for the kept one: registers */
	fake_wait_blocked();
	pthread_t h;
	cr_assert_eq(pthread_create(&h, NULL, kept_block_during_the_wait, NULL), 0);
	int st = fork_now();
	pthread_join(h, NULL);
	void *p = fake_alloc_join(&first), *q = fake_alloc_join(&hit);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child saw a registration under way (%#x)", st);
	cr_assert(!atomic_load(&hit_parked), "a kept block's hit waited for the fork");
	cr_assert(atomic_load(&hit_served), "the kept block was not served while the fork waited");
	cr_assert_eq(q, kept, "the 1 MiB block is the kept one");
	cr_assert(p);
	rdma_free(p);
	rdma_free(q);
	rdma_free(warm);
}

/* A kept block's chunk that is out of step with its heap (an access change
 * under way has moved the heap on) is brought in step by whichever comes
 * first, the walk or the block's resync, never by both at once: the two
 * would replace and deregister the same region twice.  The walk is held
 * inside its registration while the kept block is taken; afterwards every
 * deregistration must have succeeded and each chunk have one region. */
static rdma_heap_t *walk_heap;

static void *set_access_thread(void *arg)
{
	*(int *)arg = rdma_heap_set_access(walk_heap, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
					    RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL); /* registers anew */
	return NULL;
}

static void *walk_heap_alloc(void *arg)
{
	*(void *volatile *)arg = rdma_heap_malloc(walk_heap, 1 * MiB);
	return NULL;
}

Test(big, a_kept_block_and_an_access_change_never_both_register_it, .init = setup_no_reserve)
{
	walk_heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(walk_heap);
	void *kept = rdma_heap_malloc(walk_heap, 1 * MiB);
	cr_assert(kept);
	rdma_free(kept); /* kept, registered with the old access */
	size_t mrs = fake_live_mrs();
	fake_block_next_reg();
	pthread_t w, a;
	int werr = -1;
	void *volatile p = NULL;
	cr_assert_eq(pthread_create(&w, NULL, set_access_thread, &werr), 0);
	fake_wait_blocked(); /* the walk is inside a registration */
	cr_assert_eq(pthread_create(&a, NULL, walk_heap_alloc, (void *)&p), 0);
	usleep(200 * 1000); /* the kept block is taken meanwhile, or waits for the walk */
	fake_release_reg();
	pthread_join(w, NULL);
	pthread_join(a, NULL);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(werr, 0, "the access change: %s", strerror(werr));
	cr_assert_eq(p, kept, "the 1 MiB block is the kept one");
	cr_assert_eq(st.deregistration_failures, 0, "a region was deregistered twice (%llu failures)",
		     (unsigned long long)st.deregistration_failures);
	cr_assert_eq(fake_live_mrs(), mrs, "live regions: %zu, before the access change %zu", fake_live_mrs(), mrs);
	rdma_free(p);
	cr_assert_eq(rdma_heap_destroy(walk_heap), 0);
}
