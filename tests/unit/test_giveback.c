/* SPDX-License-Identifier: MIT */
/*
 * test_giveback.c - giving pinned memory back (issue 12), against the fake
 * backend: idle chunks deregistered and their pages returned, lookups of
 * them ENOENT, reuse with new registrations and zeroed memory, never under
 * a live block or a window, no registration churn at steady state, and
 * memory pressure cured by giving back.  What the NIC does with an old key
 * is tests/e2e's (test_giveback.c there).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <pthread.h>
#include <infiniband/verbs.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "addrmap.h"
#include "chunk.h"
#include "clock_now.h"
#include "fake_verbs.h"
#include "fork.h"
#include "reserve.h"
#include "heap.h"
#include "lock.h"
#include "own_stack.h"
#include "rdma_malloc.h"
#include "stderr_said.h"
#include "watchdog.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define LW IBV_ACCESS_LOCAL_WRITE
#define RR IBV_ACCESS_REMOTE_READ

/* These tests are about jemalloc's chunks: every block is jemalloc's
 * (big blocks, a chunk each, are test_big.c's). */
static void install(int with_device)
{
	setenv("RDMALLOC_BIG_BLOCK", "0", 1);
	fake_verbs_install(with_device);
}

static void setup(void)
{
	install(1);
}

TestSuite(giveback, .init = setup, .timeout = 120);

/* Once the reserve's thread is done: counts that hold still. */
static struct rdma_malloc_stats stats(void)
{
	rdmalloc_reserves_settle();
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

/* The same without waiting for the thread: a test that holds it up. */
static struct rdma_malloc_stats stats_now(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* jemalloc decays on its arena's ticks, and only there (no background
 * thread): blocks past the thread cache (1 MiB) tick it. */
static void tick(rdma_heap_t *h)
{
	for (int k = 0; k < 2000; k++)
		rdma_free(rdma_heap_malloc(h, 1536 * KiB));
}

/* @n blocks of @size bytes from @h into @p, each filled with @byte. */
static void alloc_each(rdma_heap_t *h, void **p, int n, size_t size, int byte)
{
	for (int i = 0; i < n; i++) {
		p[i] = rdma_heap_malloc(h, size);
		cr_assert(p[i], "block %d of %zu bytes: %s", i, size, strerror(errno));
		memset(p[i], byte, size);
	}
}

/* Sizes of a server's objects: small, page-sized, large. */
static size_t size_of(unsigned i)
{
	static const size_t sizes[] = { 48, 200, 1000, 4096, 24 * KiB, 300 * KiB, 2 * MiB };
	return sizes[i % 7];
}

/* Allocate about @total bytes from @h into @p (at most @max blocks), each
 * block's first bytes written.  Returns the count. */
static size_t fill(rdma_heap_t *h, void **p, size_t max, size_t total, unsigned seed)
{
	size_t n = 0, bytes = 0;
	while (bytes < total && n < max) {
		size_t s = size_of(seed + (unsigned)n);
		p[n] = rdma_heap_malloc(h, s);
		cr_assert(p[n], "allocation %zu of %zu bytes: %s", n, s, strerror(errno));
		memset(p[n], 0x5a, s < 4096 ? s : 4096);
		bytes += s;
		n++;
	}
	return n;
}

/* About @total bytes of blocks of every size allocated in @h and freed. */
static void burst(rdma_heap_t *h, size_t total)
{
	enum { MAXB = 1 << 14 };
	static void *b[MAXB];
	size_t n = fill(h, b, MAXB, total, 3);
	for (size_t i = 0; i < n; i++)
		rdma_free(b[i]);
}

/* The phase workload of the issue: 64 MiB long-lived, then bursts of
 * 400 MiB allocated and freed; after rdma_malloc_trim() the chunks held
 * are at most 1.5 times the live bytes, every region left is of a chunk
 * held, and an address of a given-back chunk is ENOENT.  Before issue 12
 * the chunks held stayed at the peak (about 7 times). */
Test(giveback, phases_held_follows_live)
{
	rdma_heap_t *h = rdma_heap_default();
	enum { MAXB = 1 << 16 };
	static void *keep[MAXB], *burst[MAXB];
	size_t nk = fill(h, keep, MAXB, 64 * MiB, 0);
	for (unsigned phase = 0; phase < 3; phase++) {
		size_t nb = fill(h, burst, MAXB, 400 * MiB, phase * 3 + 1);
		struct rdma_malloc_stats st = stats();
		cr_assert_gt(st.chunk_bytes, 400 * MiB);
		void *probe = burst[nb - 1];
		for (size_t i = 0; i < nb; i++)
			rdma_free(burst[i]);
		size_t back = rdma_malloc_trim();
		st = stats();
		double ratio = (double)st.chunk_bytes / (double)st.live_bytes;
		cr_log_info("phase %u: %zu MiB given back; held %llu MiB, live %llu MiB: %.2f", phase, back >> 20,
			    (unsigned long long)(st.chunk_bytes >> 20), (unsigned long long)(st.live_bytes >> 20),
			    ratio);
		cr_assert_gt(back, 0);
		cr_assert_leq(ratio, 1.5, "held/live %.2f after trim (held %llu, live %llu)", ratio,
			      (unsigned long long)st.chunk_bytes, (unsigned long long)st.live_bytes);
		cr_assert_eq(st.mrs, fake_live_mrs());
		cr_assert_eq(st.chunks, st.mrs, "one region per chunk held");
		cr_assert_gt(st.chunks_given_back, 0);
		cr_assert_eq(st.bytes_given_back >= back, 1);
		/* The last block of the burst sat in the last chunk: given back. */
		uint32_t lkey;
		int err = rdma_malloc_keys(probe, 1, NULL, &lkey, NULL);
		if (err != ENOENT)
			cr_assert(fake_find(fake_pd(0), probe), "lookup %d of a chunk with no region", err);
	}
	/* The long-lived blocks kept their chunks and their keys. */
	for (size_t i = 0; i < nk; i++) {
		uint32_t lkey;
		cr_assert_eq(rdma_malloc_keys(keep[i], 1, NULL, &lkey, NULL), 0);
		cr_assert(fake_find(fake_pd(0), keep[i]));
		cr_assert_eq(((unsigned char *)keep[i])[0], 0x5a);
		rdma_free(keep[i]);
	}
}

/* Memory allocated where a chunk was given back is registered again (new
 * region) and zeroed where the program asks for zeroes; memory jemalloc
 * decommitted inside a chunk that stayed registered is zeroed on reuse
 * (jemalloc takes decommitted memory for zeroed: calloc relies on it). */
Test(giveback, reuse_registers_again_and_zeroes)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	enum { N = 64 };
	void *p[N];
	alloc_each(h, p, N, 1 * MiB, 0xab);
	void *pin = rdma_heap_malloc(h, 64); /* keeps the first chunk registered */
	uint64_t gen = rdma_heap_key_generation(h);
	for (int i = 0; i < N; i++)
		rdma_free(p[i]);
	rdma_malloc_trim();
	struct rdma_malloc_stats before = stats();
	cr_assert_gt(before.chunks_given_back, 0);
	cr_assert_gt(rdma_heap_key_generation(h), gen, "keys went with the chunks: the generation must move");
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < N; i++) {
			unsigned char *q = rdma_heap_calloc(h, 1, 1 * MiB);
			cr_assert(q);
			for (size_t k = 0; k < 1 * MiB; k += 512)
				cr_assert_eq(q[k], 0, "calloc'ed byte %zu of a reused range is %#x", k, q[k]);
			cr_assert(fake_find(fake_pd(0), q), "reused memory has no region");
			uint32_t lkey;
			cr_assert_eq(rdma_malloc_keys(q, 1 * MiB, NULL, &lkey, NULL), 0);
			cr_assert_eq(fake_pd_of_lkey(lkey), fake_pd(0));
			memset(q, 0xcd, 1 * MiB);
			p[i] = q;
		}
		for (int i = 0; i < N; i++)
			rdma_free(p[i]);
		rdma_malloc_trim();
	}
	struct rdma_malloc_stats after = stats();
	cr_assert_gt(after.chunks_taken_back + after.chunks - before.chunks, 0);
	rdma_free(pin);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().mrs, fake_live_mrs());
}

/* With a decay time, idle chunks go without rdma_malloc_trim(): jemalloc
 * decommits pages free for that long as the heap is used. */
Test(giveback, decay_gives_back)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 20 });
	cr_assert(h);
	burst(h, 100 * MiB);
	for (int i = 0; i < 100 && stats().chunks_given_back == 0; i++) {
		sleep_ms(20);
		tick(h);
	}
	cr_assert_gt(stats().chunks_given_back, 0, "nothing given back after 2 s of 20 ms decay");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A program that stops calling the library still gets its idle chunks
 * given back: the background thread ticks jemalloc's decay (before, idle
 * memory stayed registered until the next allocations). */
static void idle_program_gives_back(void)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 100 });
	cr_assert(h);
	/* Blocks past the thread cache (1 MiB): none stays cached, live. */
	enum { N = 64 };
	void *b[N];
	for (int i = 0; i < N; i++) {
		b[i] = rdma_heap_malloc(h, 1536 * KiB);
		cr_assert(b[i]);
		memset(b[i], 0x5a, 4096);
	}
	for (int i = 0; i < N; i++)
		rdma_free(b[i]);
	struct rdma_malloc_stats st = stats();
	cr_assert_gt(st.pinned_bytes, 64 * MiB);
	for (int i = 0; i < 50 && stats().pinned_bytes > 16 * MiB; i++)
		sleep_ms(100); /* no call into the library but the stats */
	st = stats();
	cr_assert_gt(st.chunks_given_back, 0, "nothing given back after 5 s idle with a 100 ms decay");
	cr_assert_leq(st.pinned_bytes, 16 * MiB, "%llu bytes still pinned for nothing live",
		      (unsigned long long)st.pinned_bytes);
	cr_assert_eq(st.reserve_chunks, 0, "the idle heap's reserve stayed");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

Test(giveback, idle_program_gives_back)
{
	idle_program_gives_back();
}

static void setup_no_reserve(void)
{
	setenv("RDMALLOC_RESERVE", "0", 1);
	install(1);
}

/* Without the reserve, which is what first started the thread, the decay
 * still needs it (before, nothing ticked: all 96 MiB stayed pinned). */
Test(giveback, idle_program_gives_back_without_a_reserve, .init = setup_no_reserve)
{
	idle_program_gives_back();
	struct rdma_malloc_stats st = stats();
	cr_assert(st.reserve_hits == 0 && st.inline_chunks > 0, "RDMALLOC_RESERVE=0 did not hold");
}

/* peak_live_bytes while the program is quiet: before, live was read only
 * when the stats were (at exit, most is freed), and 64 MiB live for a
 * second showed as a peak of what was left at the end. */
Test(giveback, peak_live_is_seen_between_stats_reads)
{
	enum { N = 64 };
	cr_assert_lt(stats_now().peak_live_bytes, N * MiB, "a peak from before the test");
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 100 });
	cr_assert(h);
	void *b[N];
	for (int i = 0; i < N; i++) {
		b[i] = rdma_heap_malloc(h, MiB);
		cr_assert(b[i]);
		memset(b[i], 0x5a, 4096);
	}
	sleep_ms(1000); /* no call into the library: the decay ticks (every 100 ms) */
	for (int i = 0; i < N; i++)
		rdma_free(b[i]);
	struct rdma_malloc_stats st = stats();
	cr_assert_geq(st.peak_live_bytes, N * MiB, "peak_live_bytes %llu, with %zu MiB live for 1 s",
		      (unsigned long long)st.peak_live_bytes, (size_t)N);
	cr_assert_lt(st.live_bytes, N * MiB);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A thread that goes quiet after a burst: the blocks its cache holds kept
 * one chunk each registered (jemalloc collects a cache only while its
 * thread allocates).  The tick flushes a cache idle for the decay time. */
Test(giveback, idle_thread_cache_is_flushed)
{
	setenv("RDMALLOC_CHUNK_MAX", "2M", 1);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 100 });
	cr_assert(h);
	enum { SZ = 512, PER_CHUNK = 2 * MiB / SZ, CHUNKS = 32, N = PER_CHUNK * CHUNKS };
	void **b = calloc(N, sizeof(void *));
	cr_assert(b);
	for (int i = 0; i < N; i++) {
		b[i] = rdma_heap_malloc(h, SZ);
		cr_assert(b[i]);
		memset(b[i], 0x5a, SZ);
	}
	/* Everything but one block per chunk's worth, then those: the cache
	 * keeps the last ones freed, spread over the heap. */
	for (int i = 0; i < N; i++)
		if (i % PER_CHUNK)
			rdma_free(b[i]);
	uint64_t flushed0 = stats().idle_cache_flushes;
	for (int i = 0; i < N; i += PER_CHUNK)
		rdma_free(b[i]);
	free(b);
	/* The cache keeps chunks pinned, unless the flush of what it took
	 * last came already (a loaded machine may stop this thread for the
	 * decay time): counted from before those frees, not a flush of the
	 * loops before. */
	struct rdma_malloc_stats st0 = stats();
	cr_assert(st0.pinned_bytes > (CHUNKS / 2) * 2 * MiB || st0.idle_cache_flushes > flushed0,
		  "%llu bytes pinned after the frees and no cache flushed since: the cache kept nothing",
		  (unsigned long long)st0.pinned_bytes);
	for (int i = 0; i < 50 && stats().pinned_bytes > 8 * MiB; i++)
		sleep_ms(100); /* no call into the library but the stats */
	struct rdma_malloc_stats st = stats();
	cr_assert_leq(st.pinned_bytes, 8 * MiB, "%llu bytes still pinned after 5 s idle for nothing live",
		      (unsigned long long)st.pinned_bytes);
	cr_assert_gt(st.idle_cache_flushes, flushed0, "the cache that took the last frees was not flushed");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* Threads allocate, check and free without pause while another flushes
 * every cache it sees unused between two of its looks, for 3 s (a clock a
 * second ahead each time; the tick's own flushes run too): flushes land between
 * an owner's calls, and owners enter while a flush is under way.  Every
 * block keeps its bytes, jemalloc survives.  Flushing without the
 * handshake of heap.c (a cache in use) corrupts a cache within a second. */
struct owner {
	rdma_heap_t *h;
	unsigned seed;
	_Atomic int *stop;
};

static void *own_and_check(void *arg)
{
	struct owner *o = arg;
	enum { LIVE = 16 };
	unsigned char *b[LIVE];
	size_t len[LIVE];
	for (unsigned pass = 0; !atomic_load(o->stop); pass++) {
		int tag = (int)(pass & 0xff);
		for (int i = 0; i < LIVE; i++) {
			len[i] = 16 + (size_t)(rand_r(&o->seed) % 2000);
			b[i] = rdma_heap_malloc(o->h, len[i]);
			cr_assert(b[i]);
			memset(b[i], (i ^ tag) & 0xff, len[i]);
		}
		for (int i = 0; i < LIVE; i++) {
			for (size_t k = 0; k < len[i]; k++)
				if (b[i][k] != ((i ^ tag) & 0xff))
					cr_assert_fail("byte %zu of block %d, pass %u: %#x", k, i, pass, b[i][k]);
			rdma_free(b[i]);
		}
	}
	return NULL;
}

Test(giveback, flushes_race_with_their_owners)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 1 });
	cr_assert(h);
	enum { T = 3 };
	pthread_t th[T];
	struct owner o[T];
	_Atomic int stop = 0;
	for (int i = 0; i < T; i++) {
		o[i] = (struct owner){ h, 7u + (unsigned)i, &stop };
		cr_assert_eq(pthread_create(&th[i], NULL, own_and_check, &o[i]), 0);
	}
	uint64_t now = now_ns();
	for (double end = now_s() + 3; now_s() < end;)
		rdmalloc_heap_flush_idle_caches(now += 1000000000u);
	atomic_store(&stop, 1);
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	cr_assert_gt(stats().idle_cache_flushes, 50, "%llu flushes: the race was hardly run",
		     (unsigned long long)stats().idle_cache_flushes);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A fork child has one thread.  The idle-cache table still named the
 * others' caches, in their TLS, which glibc unmaps with their stacks once
 * the child's own threads come and go: the child's tick read unmapped
 * memory (SIGSEGV; found in review).  And jemalloc cannot flush or destroy
 * a cache made before the fork in the child (it unlinks it through links
 * into those same dead threads' caches): the child's tick, a thread's exit
 * and the heap's destruction all did.  Now the child forgets those caches
 * and makes new ones. */
enum { FORK_THREADS = 8 };
static rdma_heap_t *fork_heap;
static pthread_barrier_t fork_up, fork_down;

static void *use_then_wait(void *arg)
{
	(void)arg;
	rdma_free(rdma_heap_malloc(fork_heap, 64)); /* this thread's cache of the heap */
	pthread_barrier_wait(&fork_up);
	pthread_barrier_wait(&fork_down); /* alive across the fork */
	return NULL;
}

static void *nothing(void *arg)
{
	return arg;
}

static void *use_and_exit(void *arg)
{
	rdma_free(rdma_heap_malloc(fork_heap, 64));
	return arg;
}

Test(giveback, fork_child_forgets_other_threads_caches)
{
	fork_heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 100 });
	cr_assert(fork_heap);
	pthread_barrier_init(&fork_up, NULL, FORK_THREADS + 1);
	pthread_barrier_init(&fork_down, NULL, FORK_THREADS + 1);
	pthread_t th[FORK_THREADS];
	for (int i = 0; i < FORK_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, use_then_wait, NULL), 0);
	pthread_barrier_wait(&fork_up);
	pid_t pid = fork();
	if (pid == 0) {
		/* 8 dead threads' stacks (8 MiB each) are over glibc's 40 MiB
		 * cache: a thread created and joined makes it unmap some. */
		for (int i = 0; i < 2; i++) {
			pthread_t t;
			if (pthread_create(&t, NULL, nothing, NULL) == 0)
				pthread_join(t, NULL);
		}
		uint64_t now = now_ns();
		rdmalloc_heap_flush_idle_caches(now); /* what the child's tick does */
		rdmalloc_heap_flush_idle_caches(now + 10000000000u);
		rdma_free(rdma_heap_malloc(fork_heap, 64)); /* the child's own cache works */
		pthread_t t;
		if (pthread_create(&t, NULL, use_and_exit, NULL) == 0) /* its exit destroys its cache */
			pthread_join(t, NULL);
		_exit(rdma_heap_destroy(fork_heap)); /* destroys the child's caches of the heap */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	pthread_barrier_wait(&fork_down);
	for (int i = 0; i < FORK_THREADS; i++)
		pthread_join(th[i], NULL);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: %s %d",
		  WIFSIGNALED(st) ? "killed by signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	cr_assert_eq(rdma_heap_destroy(fork_heap), 0);
}

/* glibc runs a thread's key destructors for at most four rounds
 * (PTHREAD_DESTRUCTOR_ITERATIONS).  An rdma_free in the last one made the
 * thread a cache of the heap that the thread's exit handler (a key
 * destructor too, which had run or never would) did not destroy, and the
 * idle-cache table kept pointing into the thread's TLS, gone with its
 * stack: the tick read unmapped memory (SIGSEGV; found in review).  Two
 * ways there: a thread whose caches were destroyed in round 1 (arg 1: it
 * makes no cache any more), and one that had only read the stats (arg 0:
 * its first cache, made in round 4, stays until the heap is destroyed; the
 * tick flushes it).  The threads run on stacks of ours, which hold their
 * TLS, unmapped after the join.  (A thread whose
 * very first call into jemalloc comes in round 4 is not tested: jemalloc
 * then links its own thread cache, in that TLS, into an arena's list for
 * good, which is jemalloc's to mend.) */
static rdma_heap_t *late_heap;
static pthread_key_t late_key;
static void *late_block;
static _Atomic int late_rounds;

static void late_destructor(void *arg)
{
	uintptr_t round = (uintptr_t)arg;
	atomic_store(&late_rounds, (int)round);
	if (round < 4)
		pthread_setspecific(late_key, (void *)(round + 1));
	else
		rdma_free(late_block); /* a block of the heap: through a cache of it */
}

static void *late_thread(void *arg)
{
	if (arg) {
		rdma_free(rdma_heap_malloc(late_heap, 64));
	} else {
		struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
		rdma_malloc_stats_get(&st);
	}
	pthread_setspecific(late_key, (void *)1);
	return NULL;
}

Test(giveback, a_cache_made_in_the_last_destructor_round)
{
	late_heap = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 100 });
	cr_assert(late_heap);
	cr_assert_eq(pthread_key_create(&late_key, late_destructor), 0);
	unsigned base = rdmalloc_heap_live_caches();
	for (uintptr_t used = 0; used < 2; used++) {
		late_block = rdma_heap_malloc(late_heap, 64);
		cr_assert(late_block);
		unsigned before = rdmalloc_heap_live_caches();
		atomic_store(&late_rounds, 0);
		cr_assert_eq(run_on_own_stack(late_thread, (void *)used), 0);
		cr_assert_eq(atomic_load(&late_rounds), 4, "the destructor's last round was %d, not 4",
			     atomic_load(&late_rounds));
		cr_assert_eq(rdmalloc_heap_live_caches(), before + !used, "%s: %u caches, %u before",
			     used ? "a thread that ended with caches" : "a thread that only read the stats",
			     rdmalloc_heap_live_caches(), before);
		uint64_t now = now_ns();
		rdmalloc_heap_flush_idle_caches(now); /* what the tick does */
		rdmalloc_heap_flush_idle_caches(now + 10000000000u);
	}
	pthread_key_delete(late_key);
	cr_assert_eq(rdma_heap_destroy(late_heap), 0);
	cr_assert_eq(rdmalloc_heap_live_caches(), base, "the heap's destruction left caches");
}

/* decay_ms -1: nothing is given back until rdma_malloc_trim(). */
Test(giveback, never_until_trim)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = -1 });
	cr_assert(h);
	burst(h, 100 * MiB);
	sleep_ms(100);
	for (int k = 0; k < 10; k++)
		tick(h);
	cr_assert_eq(stats().chunks_given_back, 0);
	cr_assert_gt(rdma_malloc_trim(), 0);
	cr_assert_gt(stats().chunks_given_back, 0);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* @n blocks of 256 KiB of a heap that never decays, freed: a trim then
 * gives chunks back (with 64, from inside the purge of its arena). */
static rdma_heap_t *freed_heap(int n)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = -1 });
	cr_assert(h);
	void *p[64];
	cr_assert_leq(n, 64);
	alloc_each(h, p, n, 256 * KiB, 0xab);
	for (int i = 0; i < n; i++)
		rdma_free(p[i]);
	return h;
}

static void *trim_thread(void *arg)
{
	(void)arg;
	rdma_malloc_trim();
	return NULL;
}

/* A trim on a thread of its own, held inside its first ibv_dereg_mr
 * (until fake_release_reg()). */
static pthread_t trim_held(void)
{
	fake_block_next_dereg();
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, trim_thread, NULL), 0);
	fake_wait_blocked();
	return t;
}

/* An allocation that would use a chunk being given back waits for that
 * chunk's deregistration on another thread (a trim here, the decay tick on
 * the reserve's thread usually) at most rdmalloc_fill_wait_ns: that
 * ibv_dereg_mr may wait for a lock the allocating thread holds.  Then it
 * uses other memory (a new chunk), counted in fallbacks and said once,
 * and no allocation waits again until a give-back or take-back ends.  Before,
 * it waited for the deregistration without end (here until a 20 s
 * watchdog let it go). */
Test(giveback, a_commit_stops_waiting_for_a_stuck_give_back, .init = setup_no_reserve)
{
	cr_redirect_stderr();
	enum { N = 24 };
	rdma_heap_t *h = freed_heap(N);
	rdmalloc_fill_wait_ns = 200 * 1000 * 1000;
	struct rdma_malloc_stats s0 = stats_now();
	pthread_t t = trim_held(); /* the trim gives a chunk back, inside ibv_dereg_mr */
	struct watchdog w;
	cr_assert_eq(watchdog_start(&w, fake_release_reg), 0);
	double t0 = now_s();
	void *q[N];
	alloc_each(h, q, N, 256 * KiB, 0xcd); /* some into the chunks being given back */
	double took = now_s() - t0;
	int stuck = watchdog_done(&w);
	pthread_join(t, NULL);
	struct rdma_malloc_stats s1 = stats_now();
	rdmalloc_fill_wait_ns = RDMALLOC_FILL_WAIT_NS;
	cr_assert(!stuck, "the allocation waited for the give-back until it was let go (20 s)");
	cr_assert_geq(took, 0.19, "no allocation met the chunk being given back (%.3f s)", took);
	/* Once late, the stuck give-back is not waited for again (each of
	 * the batch's chunks was, 200 ms each: 2 s here). */
	cr_assert_lt(took, 1.0, "the stuck give-back was waited for more than once (%.3f s)", took);
	/* Two at least: one allocation gave up after its wait, the next
	 * at once. */
	cr_assert_geq(s1.fallbacks, s0.fallbacks + 2, "no allocation gave up at once after the first");
	/* jemalloc's first fit keeps choosing the stuck chunk's free
	 * ranges: each allocation placed there grows a chunk instead (10 of
	 * 24 here), one at most. */
	cr_assert_leq(s1.inline_chunks - s0.inline_chunks, s1.fallbacks - s0.fallbacks);
	char buf[4096];
	cr_assert(strstr(stderr_said(buf, sizeof(buf)), "stopped waiting for another thread"), "stderr: %s", buf);
	for (int i = 0; i < N; i++) {
		uint32_t lkey;
		cr_assert_eq(rdma_malloc_keys(q[i], 256 * KiB, NULL, &lkey, NULL), 0);
		rdma_free(q[i]);
	}
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().mrs, fake_live_mrs());
}

/* A trim (the decay tick alike) works on a heap's arenas without the
 * heap table's lock: while its give-back is held inside ibv_dereg_mr,
 * the stats, heap creation, and the destruction of a heap it is not
 * working on (made before it began) go on.  Before, they waited for that
 * deregistration (here until a 20 s watchdog let it go). */
Test(giveback, a_stuck_give_back_holds_up_no_other_call, .init = setup_no_reserve)
{
	rdma_heap_t *older = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(older);
	rdma_heap_t *h = freed_heap(64);
	pthread_t t = trim_held(); /* inside the purge of h's arena: a decommit gives back */
	struct watchdog w;
	cr_assert_eq(watchdog_start(&w, fake_release_reg), 0);
	struct rdma_malloc_stats st = stats_now();
	rdma_heap_t *other = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	int made = other != NULL;
	int destroyed = made && rdma_heap_destroy(other) == 0;
	int older_destroyed = rdma_heap_destroy(older) == 0;
	int stuck = watchdog_done(&w);
	pthread_join(t, NULL);
	cr_assert(!stuck, "a call waited for the trim's deregistration until it was let go");
	cr_assert(made && destroyed && older_destroyed);
	cr_assert_gt(st.chunks, 0);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().mrs, fake_live_mrs());
}

static void *release_in_300ms(void *arg)
{
	(void)arg;
	sleep_ms(300);
	fake_release_reg();
	return NULL;
}

/* A trim that waits for another's work on a heap (a stuck ibv_dereg_mr)
 * and is cancelled meanwhile ends its trim first: cancelled inside the
 * wait, it would have kept the heap table's lock, and every later trim,
 * stats call or fork waited for ever (here: the first trim's end). */
Test(giveback, a_trim_cancelled_in_its_wait_leaves_no_lock, .init = setup_no_reserve)
{
	rdma_heap_t *h = freed_heap(64);
	pthread_t stuck_trim = trim_held(), waiting_trim;
	cr_assert_eq(pthread_create(&waiting_trim, NULL, trim_thread, NULL), 0);
	sleep_ms(100); /* inside its wait for h */
	cr_assert_eq(pthread_cancel(waiting_trim), 0);
	sleep_ms(100);
	fake_release_reg();
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	cr_assert_eq(pthread_timedjoin_np(stuck_trim, NULL, &until), 0,
		     "the first trim never ended: the cancelled one kept the heap table's lock");
	cr_assert_eq(pthread_timedjoin_np(waiting_trim, NULL, &until), 0);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().mrs, fake_live_mrs());
}

/* fork() while a trim works on a heap's arenas waits for that work (a
 * slow ibv_dereg_mr here, 300 ms): the child inherits no arena half
 * purged, which jemalloc would never purge again, so a trim in the child
 * gives back a chunk that the heap uses and frees there. */
Test(giveback, a_fork_waits_for_a_trim_under_way, .init = setup_no_reserve)
{
	rdma_heap_t *h = freed_heap(64);
	pthread_t t = trim_held(), r;
	cr_assert_eq(pthread_create(&r, NULL, release_in_300ms, NULL), 0);
	struct rdma_malloc_stats s0 = stats_now();
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		rdma_malloc_trim(); /* what the parent's trim left */
		void *p = rdma_heap_malloc(h, 8 * MiB); /* a chunk of its own */
		if (!p)
			_exit(3);
		memset(p, 0x5a, 8 * MiB);
		rdma_free(p);
		struct rdma_malloc_stats c0 = stats_now();
		rdma_malloc_trim();
		struct rdma_malloc_stats c1 = stats_now();
		_exit(c1.bytes_given_back - c0.bytes_given_back >= 8 * MiB ? 0 : 5);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	pthread_join(r, NULL);
	pthread_join(t, NULL);
	cr_assert(WIFEXITED(status), "child: status %#x", status);
	cr_assert_neq(WEXITSTATUS(status), 5, "the child's trim gave nothing back: its arena was half purged");
	cr_assert_eq(WEXITSTATUS(status), 0, "child: exit %d", WEXITSTATUS(status));
	cr_assert_eq(stats_now().fallbacks, s0.fallbacks, "the fork went ahead");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* fork() while a trim is held inside a give-back's ibv_dereg_mr: the
 * fork waits for the trim's work on the heap's arenas at most its bound
 * (shortened here), then goes ahead, counted once; in the child nothing
 * works on that heap, which allocates, and whose destroy is refused at
 * once (EBUSY, said), there and in a grandchild: jemalloc, which marks its
 * arena as being purged for ever there, would destroy it half purged.  Before, the fork waited for
 * the trim without end. */
Test(giveback, a_fork_during_a_stuck_trim, .init = setup_no_reserve)
{
	cr_redirect_stderr();
	rdma_heap_t *h = freed_heap(64);
	pthread_t t = trim_held();
	struct watchdog w;
	cr_assert_eq(watchdog_start(&w, fake_release_reg), 0);
	rdmalloc_fork_wait_ns = 200 * 1000 * 1000;
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(20);
		void *q = rdma_heap_malloc(h, 256 * KiB);
		if (!q)
			_exit(3);
		memset(q, 0x5a, 256 * KiB);
		rdma_free(q);
		if (rdma_heap_destroy(h) != EBUSY)
			_exit(4);
		pid_t g = fork(); /* a grandchild inherits the half purge too */
		if (g == 0)
			_exit(rdma_heap_destroy(h) == EBUSY ? 0 : 4);
		int gs;
		if (g < 0 || waitpid(g, &gs, 0) != g || !WIFEXITED(gs))
			_exit(6);
		_exit(WEXITSTATUS(gs));
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	int stuck = watchdog_done(&w);
	pthread_join(t, NULL);
	rdmalloc_fork_wait_ns = RDMALLOC_FORK_WAIT_NS;
	cr_assert(!stuck, "fork() or the child waited for the trim until it was let go");
	cr_assert(WIFEXITED(status), "child: status %#x (14: SIGALRM, it hung)", status);
	cr_assert_neq(WEXITSTATUS(status), 4, "the child destroyed a heap whose purge the fork went ahead of");
	cr_assert_eq(WEXITSTATUS(status), 0, "child: exit %d", WEXITSTATUS(status));
	char buf[4096];
	stderr_said(buf, sizeof(buf));
	cr_assert(strstr(buf, "fork() went ahead with rdmalloc giving memory back"), "stderr: %s", buf);
	cr_assert(strstr(buf, "a heap cannot be destroyed in this fork child"), "stderr: %s", buf);
	cr_assert_eq(rdma_heap_destroy(h), 0);
	cr_assert_eq(stats().mrs, fake_live_mrs());
}

/* The bytes jemalloc has committed in the chunk owning @p. */
static size_t committed_in(const void *p)
{
	rdmalloc_lock(RDMALLOC_LOCK_CHUNK);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	size_t bytes = c ? c->committed : 0; /* given back */
	rdmalloc_unlock(RDMALLOC_LOCK_CHUNK);
	return bytes;
}

/* A heap that grows and shrinks around a chunk boundary does not register
 * anew each time: with the default decay nothing is given back while the
 * memory is reused, and with a short decay the smallest idle chunk stays.
 * Each round of the short decay waits until the decay has decommitted the
 * whole chunk (the tick comes every 0.1 s here): an allocation that meets
 * jemalloc's purge of that very chunk, which holds the free range out of
 * its reach meanwhile, can grow the heap, and that growth registers. */
Test(giveback, no_churn_at_a_boundary)
{
	for (int d = 0; d < 2; d++) {
		long decay = d ? 1 : 0;
		rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = decay });
		cr_assert(h);
		void *base = rdma_heap_malloc(h, 1 * MiB); /* most of the first chunk */
		unsigned long regs = 0;
		int rounds = d ? 12 : 300, counted = d ? 2 : 20;
		for (int i = 0; i < rounds; i++) {
			void *q = rdma_heap_malloc(h, 1536 * KiB); /* does not fit: the next chunk */
			cr_assert(q);
			rdma_free(q);
			for (int ms = 0; d && committed_in(q) && ms < 5000; ms++)
				sleep_ms(1);
			cr_assert(!d || !committed_in(q), "round %d: the decay left the chunk committed", i);
			if (i == counted) {
				rdmalloc_reserves_settle(); /* the reserve's own registration is not churn */
				regs = fake_reg_calls();
			}
		}
		rdmalloc_reserves_settle();
		cr_assert_eq(fake_reg_calls(), regs, "decay %ld: %lu registrations at steady state", decay,
			     fake_reg_calls() - regs);
		rdma_free(base);
		cr_assert_eq(rdma_heap_destroy(h), 0);
	}
}

/* The same with blocks past jemalloc's oversize threshold (8 MiB), whose
 * free purges at once when decay is on: two buffers of 24 MiB in turn,
 * each a chunk of its own, must not be registered again on every malloc. */
Test(giveback, no_churn_with_big_buffers)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	unsigned long regs = 0;
	for (int i = 0; i < 100; i++) {
		void *a = rdma_heap_malloc(h, 24 * MiB), *b = rdma_heap_malloc(h, 24 * MiB);
		cr_assert(a && b);
		rdma_free(a);
		rdma_free(b);
		if (i == 5) {
			rdmalloc_reserves_settle(); /* the reserve's own registration is not churn */
			regs = fake_reg_calls();
		}
	}
	rdmalloc_reserves_settle();
	cr_assert_eq(fake_reg_calls(), regs, "%lu registrations at steady state", fake_reg_calls() - regs);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A chunk with a window on it is never given back, even with its memory
 * freed; once the window goes, it is. */
Test(giveback, window_pins_its_chunk, .init = NULL)
{
	install(1);
	struct ibv_qp qp = { .pd = fake_pd(0) };
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .flags = RDMA_HEAP_MW_BIND });
	cr_assert(h);
	char *buf = rdma_heap_malloc(h, 3 * MiB);
	cr_assert(buf);
	struct ibv_mw *mw = rdma_malloc_mw_grant(&qp, buf, 100, RR, IBV_MW_TYPE_2, 1, 0);
	cr_assert(mw, "grant: %s", strerror(errno));
	rdma_free(buf);
	rdma_malloc_trim();
	cr_assert(fake_find(fake_pd(0), buf), "a chunk under a window was given back");
	cr_assert_eq(rdma_malloc_mw_free(mw), 0);
	rdma_malloc_trim();
	cr_assert_null(fake_find(fake_pd(0), buf), "the chunk stayed after its window went");
	uint32_t lkey;
	cr_assert_eq(rdma_malloc_keys(buf, 1, NULL, &lkey, NULL), ENOENT);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A pinned chunk (what the drop-in's elision does for a program's own
 * ibv_reg_mr): not given back with its memory freed, and its heap's
 * destruction is refused with EBUSY until it is unpinned (before, a later
 * unpin touched a recycled descriptor). */
/* A heap with one 3 MiB block *@buf, whose chunk *@c is pinned. */
static rdma_heap_t *heap_with_pinned_block(char **buf, struct rdmalloc_chunk **c)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	*buf = rdma_heap_malloc(h, 3 * MiB);
	cr_assert(*buf);
	*c = rdmalloc_addrmap_find(*buf);
	cr_assert(*c);
	cr_assert_eq(rdmalloc_chunk_pin(*c), 0);
	return h;
}

Test(giveback, pin_keeps_chunk_and_heap)
{
	char *buf;
	struct rdmalloc_chunk *c;
	rdma_heap_t *h = heap_with_pinned_block(&buf, &c);
	rdma_free(buf);
	rdma_malloc_trim();
	cr_assert(fake_find(fake_pd(0), buf), "a pinned chunk was given back");
	cr_assert_eq(rdma_heap_destroy(h), EBUSY);
	rdmalloc_chunk_unpin(c);
	rdma_malloc_trim();
	cr_assert_null(fake_find(fake_pd(0), buf), "the chunk stayed after its pin went");
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* The drop-in's elision pins the chunk that holds a range: found, checked
 * and pinned as one (under the chunk lock), so that a descriptor released
 * and made another chunk's between the lookup and the pin is never
 * pinned.  The pin holds the heap (EBUSY); a range past the chunk, more
 * access than it has, an address of no chunk, of a chunk given back or of
 * a destroyed heap pin nothing. */
Test(giveback, pin_at_pins_the_chunk_holding_the_range)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	char *buf = rdma_heap_malloc(h, 3 * MiB);
	cr_assert(buf);
	struct rdmalloc_chunk *c = NULL, *found = rdmalloc_addrmap_find(buf);
	cr_assert(found);
	cr_assert_eq(rdmalloc_chunk_pin_at(buf + 100, 4096, LW, &c), 0);
	cr_assert_eq(c, found);
	cr_assert_eq(rdma_heap_destroy(h), EBUSY, "the pin did not hold the heap");
	rdmalloc_chunk_unpin(c);
	size_t past = found->size - (size_t)((uintptr_t)buf - found->base) + 1;
	cr_assert_eq(rdmalloc_chunk_pin_at(buf, past, LW, &c), ERANGE);
	cr_assert_null(c);
	cr_assert_eq(rdmalloc_chunk_pin_at(buf, 64, LW | RR, &c), EACCES);
	cr_assert_null(c);
	int local;
	cr_assert_eq(rdmalloc_chunk_pin_at(&local, 1, 0, &c), ENOENT);
	cr_assert_null(c);
	rdma_free(buf);
	rdma_malloc_trim();
	cr_assert_null(fake_find(fake_pd(0), buf), "the chunk was not given back: nothing tested");
	cr_assert_eq(rdmalloc_chunk_pin_at(buf, 64, 0, &c), ENOENT, "a chunk given back was pinned");
	cr_assert_eq(rdma_heap_destroy(h), 0, "a refused pin was left counted");
	cr_assert_eq(rdmalloc_chunk_pin_at(buf, 64, 0, &c), ENOENT, "a chunk of a destroyed heap was pinned");
}

/* An access change would give a pinned chunk new keys (with NEW_KEYS, or
 * a device that cannot re-register in place), under the drop-in's elided
 * region that carries the old ones: refused with EBUSY while a chunk of the
 * heap is pinned, as while a window is allocated (issue 23, item 1). */
Test(giveback, access_change_refused_while_pinned)
{
	char *buf;
	struct rdmalloc_chunk *c;
	rdma_heap_t *h = heap_with_pinned_block(&buf, &c);
	uint32_t lkey0 = 0;
	cr_assert_eq(rdma_malloc_keys(buf, 64, NULL, &lkey0, NULL), 0);
	int r = rdma_heap_set_access(h, LW | RR, RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL);
	uint32_t lkey1 = 0;
	cr_assert_eq(rdma_malloc_keys(buf, 64, NULL, &lkey1, NULL), 0);
	cr_assert_eq(r, EBUSY, "access change under a pinned chunk: %d, keys %#x -> %#x", r, lkey0, lkey1);
	cr_assert_eq(lkey1, lkey0);
	rdmalloc_chunk_unpin(c);
	cr_assert_eq(rdma_heap_set_access(h, LW | RR, RDMA_HEAP_SET_ACCESS_NEW_KEYS, NULL, NULL), 0);
	rdma_free(buf);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* Memory pressure: under RDMALLOC_MAX_REGISTERED, phases whose sizes
 * differ each time (so that jemalloc cannot reuse the last phase's
 * extents as they are) keep working with live memory under the limit:
 * idle chunks are given back before a chunk is refused. */
Test(giveback, pressure_gives_back_first, .init = NULL)
{
	setenv("RDMALLOC_MAX_REGISTERED", "48M", 1);
	setenv("RDMALLOC_DECAY_MS", "-1", 1);
	install(1);
	rdma_heap_t *h = rdma_heap_default();
	enum { MAXB = 1 << 14 };
	static void *b[MAXB];
	for (unsigned phase = 0; phase < 24; phase++) {
		size_t n = 0, bytes = 0, s = (size_t)(phase % 6 + 1) * 3 * MiB + (phase % 5) * 4096;
		while (bytes < 24 * MiB) {
			b[n] = rdma_heap_malloc(h, s);
			cr_assert(b[n], "phase %u: allocation of %zu bytes with %zu live failed: %s", phase, s,
				  bytes, strerror(errno));
			bytes += s;
			n++;
		}
		for (size_t i = 0; i < n; i++)
			rdma_free(b[i]);
		/* What jemalloc has free is decommitted only when it decays
		 * or is trimmed; the program trims between phases. */
		rdma_malloc_trim();
	}
	struct rdma_malloc_stats st = stats();
	cr_assert_leq(st.chunk_bytes, 48 * MiB);
}

/* Under an 8 MiB limit, phases of 2 MiB live in blocks of a new size each
 * time, without the program's trims and with the default decay (10 s:
 * nothing decays during the test): a failed allocation gives back what
 * jemalloc holds free, as rdma_malloc_trim() would, and is tried once
 * more.  Without that relief phase 5 failed, with nothing live. */
Test(giveback, pressure_relieves_failed_allocations, .init = NULL)
{
	setenv("RDMALLOC_MAX_REGISTERED", "8M", 1); /* the common RLIMIT_MEMLOCK of containers */
	setenv("RDMALLOC_LOG_LEVEL", "error", 1);
	install(1);
	rdma_heap_t *h = rdma_heap_default();
	enum { MAXB = 1 << 14 };
	static void *b[MAXB];
	for (unsigned phase = 0; phase < 40; phase++) {
		/* 2 MiB live in blocks of one size per phase, 16 KiB to 1 MiB */
		size_t n = 0, bytes = 0, s = ((size_t)16 << 10) << (phase % 7);
		s += (phase % 3) * 4096;
		while (bytes < 2 * MiB) {
			b[n] = rdma_heap_malloc(h, s);
			cr_assert(b[n], "phase %u: allocation of %zu bytes with %zu live failed: %s", phase, s,
				  bytes, strerror(errno));
			memset(b[n], (int)phase, s);
			bytes += s;
			n++;
		}
		for (size_t i = 0; i < n; i++)
			rdma_free(b[i]);
	}
	struct rdma_malloc_stats st = stats();
	cr_log_info("%llu failed allocations relieved", (unsigned long long)st.pressure_trims);
	cr_assert_gt(st.pressure_trims, 0, "the relief was never needed: the test tried nothing");
	cr_assert_leq(st.chunk_bytes, 8 * MiB);
}

/* An ENOMEM from ibv_reg_mr (RLIMIT_MEMLOCK) gives idle chunks back (here
 * the one a heap kept) and tries once more. */
Test(giveback, enomem_gives_back_and_retries)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = -1 });
	cr_assert(h);
	enum { N = 40 };
	void *p[N];
	for (int i = 0; i < N; i++)
		cr_assert(p[i] = rdma_heap_malloc(h, 1 * MiB));
	for (int i = 0; i < N; i++)
		rdma_free(p[i]);
	/* What decay would do: every free page decommitted; every chunk but
	 * the smallest goes. */
	rdmalloc_heap_purge(h);
	unsigned long back = stats().chunks_given_back;
	cr_assert_gt(back, 0);
	rdma_heap_t *other = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(other);
	fake_fail_reg(fake_reg_calls() + 1, 1); /* the next registration: ENOMEM */
	void *q = rdma_heap_malloc(other, 8 * MiB);
	cr_assert(q, "allocation failed: %s", strerror(errno));
	cr_assert_gt(stats().chunks_given_back, back, "the kept idle chunk was not given back first");
	rdma_free(q);
	cr_assert_eq(rdma_heap_destroy(other), 0);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

static atomic_int trimmed;

static void *trim_and_say(void *arg)
{
	(void)arg;
	rdma_malloc_trim();
	atomic_store(&trimmed, 1);
	return NULL;
}

/* Two forks coming at once both stop the decay's and the trims' work on
 * the arenas (fork.c's outer prepare), and the first to end let that work
 * start again while the second still came: its child could inherit an
 * arena half purged.  The stop is a count of the forks coming now. */
Test(giveback, two_forks_keep_purges_stopped_until_both_end, .init = setup_no_reserve)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW });
	cr_assert(h);
	uint64_t far = now_ns() + 10000000000u;
	cr_assert_eq(rdmalloc_heap_fork_prepare(far), 0); /* fork A */
	cr_assert_eq(rdmalloc_heap_fork_prepare(far), 0); /* fork B */
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	rdmalloc_heap_fork_parent(); /* A ends */
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, trim_and_say, NULL), 0);
	for (int i = 0; i < 300 && !atomic_load(&trimmed); i++)
		usleep(1000);
	int early = atomic_load(&trimmed);
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	rdmalloc_heap_fork_parent(); /* B ends */
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	pthread_join(t, NULL);
	cr_assert_not(early, "a trim worked on the arenas while a fork was still coming");
	cr_assert(atomic_load(&trimmed));
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A chunk whose last pages were decommitted while a walk worked on it (an
 * attach registering it with a new PD: busy) was skipped by that give-back,
 * and no later decommit comes for it: a489e41 kept it registered until the
 * next trim or relief.  The background tick gives back what is idle. */
static void *attach_pd1(void *arg)
{
	*(int *)arg = rdma_malloc_attach_pd(fake_pd(1)); /* checked by the test's thread */
	return NULL;
}

Test(giveback, a_chunk_idle_while_a_walk_held_it_goes_later, .init = setup_no_reserve)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = LW, .decay_ms = 100 });
	cr_assert(h);
	enum { N = 12 };
	void *b[N];
	alloc_each(h, b, N, 1536 * KiB, 0x5a); /* past the thread cache: none stays cached */
	cr_assert_geq(stats().chunks, 2, "the test wants two chunks at least");
	fake_block_next_reg_on(fake_pd(1));
	pthread_t t;
	int attached = -1;
	pthread_create(&t, NULL, attach_pd1, &attached);
	fake_wait_blocked(); /* the attach registers a chunk: busy */
	for (int i = 0; i < N; i++)
		rdma_free(b[i]);
	sleep_ms(1500); /* jemalloc's decay decommits every page, ticked */
	fake_release_reg();
	pthread_join(t, NULL);
	cr_assert_eq(attached, 0);
	struct rdma_malloc_stats st = stats();
	for (int i = 0; i < 50 && st.chunks > 1; i++) {
		sleep_ms(100); /* no call into the library but the stats */
		st = stats();
	}
	cr_assert_leq(st.chunks, 1, "%llu chunks still registered for nothing live (one is kept)",
		      (unsigned long long)st.chunks);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* A pin of a call under way in another thread at a fork (an elision
 * between its pin and its record) is not the child's: the child starts
 * with none, so its chunk is given back when idle there.  It kept the
 * pin for ever, and the chunk. */
Test(giveback, a_fork_child_has_no_pin_of_the_parents_calls)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE });
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 100);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_find(p);
	cr_assert(c);
	cr_assert_eq(rdmalloc_chunk_pin(c), 0); /* as an elision holds it before its record */
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(c->pins == 0 ? 0 : 1);
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child inherited the parent's pin");
	rdmalloc_chunk_unpin(c);
	rdma_free(p);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}
