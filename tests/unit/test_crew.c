/* SPDX-License-Identifier: MIT */
/*
 * test_crew.c - the registration crew (src/reg/crew.h), against the fake
 * backend: every part of every job runs once, whichever thread takes it,
 * with callers racing; a big chunk's pages are populated by the crew and
 * its PDs registered by the allocating thread, never waiting for a
 * worker's ibv_reg_mr, covering the chunk whole; RDMALLOC_REG_THREADS=1 keeps
 * it all on the caller; fork() while the crew works neither hangs nor
 * leaves the child without big registrations, and does not wait for ever
 * for a worker's part.
 */
#include <criterion/criterion.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crew.h"
#include "fork_window.h"
#include "os.h"
#include "fake_verbs.h"
#include "fork.h"
#include "rdma_malloc.h"
#include "clock_now.h"
#include "watchdog.h"

#define MiB ((size_t)1 << 20)

static void setup(void)
{
	setenv("RDMALLOC_REG_THREADS", "3", 1);
	setenv("RDMALLOC_RESERVE", "0", 1); /* no registration but the test's */
	setenv("RDMALLOC_DECAY_MS", "-1", 1);
	fake_verbs_install(1);
}

TestSuite(crew, .init = setup, .timeout = 120);

static struct rdma_malloc_stats stats(void)
{
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	return st;
}

/* ---- jobs ---- */

#define PARTS 37
#define JOBS 100
#define CALLERS 4

struct count_job {
	struct rdmalloc_crew_job job;
	pthread_t caller;
	atomic_uint runs[PARTS];
	atomic_uint by_others;
};

static void count_part(struct rdmalloc_crew_job *job, unsigned i)
{
	struct count_job *cj = (struct count_job *)job;
	struct timespec d = { 0, 20000 }; /* a part takes a while, as a slice of a chunk does */
	nanosleep(&d, NULL);
	atomic_fetch_add(&cj->runs[i], 1);
	if (!pthread_equal(pthread_self(), cj->caller))
		atomic_fetch_add(&cj->by_others, 1);
}

static atomic_uint total_by_others, total_bad;

static void *caller(void *arg)
{
	(void)arg;
	for (int n = 0; n < JOBS; n++) {
		struct count_job cj = { .job = { .part = count_part, .parts = PARTS }, .caller = pthread_self() };
		rdmalloc_crew_run(&cj.job);
		for (unsigned i = 0; i < PARTS; i++)
			if (atomic_load(&cj.runs[i]) != 1)
				atomic_fetch_add(&total_bad, 1);
		atomic_fetch_add(&total_by_others, atomic_load(&cj.by_others));
	}
	return NULL;
}

Test(crew, every_part_runs_once_whoever_takes_it)
{
	rdma_malloc_trim(); /* initialised */
	rdmalloc_crew_start();
	cr_assert_eq(rdmalloc_crew_threads(), 3, "RDMALLOC_REG_THREADS=3: the caller and 2 workers");
	pthread_t t[CALLERS];
	for (int i = 0; i < CALLERS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, caller, NULL), 0);
	for (int i = 0; i < CALLERS; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&total_bad), 0, "%u parts ran other than once", atomic_load(&total_bad));
	cr_assert_gt(atomic_load(&total_by_others), 0, "the workers took no part");
}

/* ---- a big chunk ---- */

static unsigned held_off; /* registrations made off the allocating thread */

static void release_held(void)
{
	held_off = fake_release_held();
}

/* A big chunk's pages are populated by the crew, and its registrations,
 * one per PD, made by the allocating thread itself: a worker's ibv_reg_mr
 * may wait for a lock that thread holds (a provider's, taken before the
 * program called malloc), and the thread would wait for the worker for
 * ever.  Here every registration off the allocating thread waits until a
 * watchdog lets it go after 20 s.  Before, the PDs were shared out among
 * the crew, and PD 1's waited on a worker. */
Test(crew, big_chunk_registers_its_pds_on_the_caller)
{
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	void *warm = rdma_malloc(64 * MiB); /* the crew's workers start after it */
	cr_assert(warm);
	cr_assert_eq(rdmalloc_crew_threads(), 3, "RDMALLOC_REG_THREADS=3: the caller and 2 workers");
	struct rdma_malloc_stats s0 = stats();
	/* PD 0's registration takes 200 ms: time for a worker to take PD 1's,
	 * were it shared out. */
	fake_slow_reg_on(fake_pd(0), 200 * 1000);
	fake_hold_regs_off(pthread_self());
	struct watchdog w;
	cr_assert_eq(watchdog_start(&w, release_held), 0);
	void *p = rdma_malloc(96 * MiB);
	int fired = watchdog_done(&w);
	fake_slow_reg_on(NULL, 0);
	cr_assert(!fired, "the allocation waited for a registration on another thread");
	cr_assert_eq(held_off, 0, "%u registrations ran off the allocating thread", held_off);
	cr_assert(p);
	for (int pd = 0; pd < 2; pd++) {
		const struct fake_mr_info *m = fake_find(fake_pd(pd), p);
		cr_assert(m && (char *)m->addr <= (char *)p && (char *)m->addr + m->len >= (char *)p + 96 * MiB,
			  "PD %d's region covers the block whole", pd);
		uint32_t l, rk;
		cr_assert_eq(rdma_malloc_keys(p, 96 * MiB, fake_pd(pd), &l, &rk), 0);
	}
	cr_assert_eq(stats().populated_chunks, s0.populated_chunks + 1, "its pages populated by the crew");
	rdma_free(p);
	rdma_free(warm);
}

Test(crew, one_thread_keeps_it_on_the_caller, .init = NULL)
{
	setup();
	setenv("RDMALLOC_REG_THREADS", "1", 1);
	void *p = rdma_malloc(64 * MiB);
	cr_assert(p);
	cr_assert_eq(rdmalloc_crew_threads(), 1);
	cr_assert_eq(stats().populated_chunks, 0, "no crew, no separate population");
	const struct fake_mr_info *m = fake_find(fake_pd(0), p);
	cr_assert(m && m->len >= 64 * MiB);
	rdma_free(p);
}

/* An ODP heap pins nothing, so the crew has nothing to do for it: its big
 * allocations start no worker (they did, as any of 16 MiB or more). */
Test(crew, an_odp_heap_starts_no_worker)
{
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){ .access = IBV_ACCESS_LOCAL_WRITE,
								      .flags = RDMA_HEAP_ODP });
	cr_assert(h);
	void *p = rdma_heap_malloc(h, 64 * MiB);
	cr_assert(p);
	memset(p, 1, 4096);
	cr_assert_eq(rdmalloc_crew_threads(), 1, "%u threads for an ODP heap", rdmalloc_crew_threads());
	rdma_free(p);
	cr_assert_eq(rdma_heap_destroy(h), 0);
}

/* ---- fork ---- */

static atomic_int stop;

static void *churn(void *arg)
{
	(void)arg;
	for (size_t n = 0; !atomic_load(&stop); n++) {
		void *p = rdma_malloc(RDMALLOC_CREW_MIN + (n % 16) * 4096 * 257);
		if (!p)
			abort();
		memset(p, 1, 4096);
		rdma_free(p);
		rdma_malloc_trim(); /* the next one a new chunk, registered anew */
	}
	return NULL;
}

/* In a fork child, which has none of the parent's PDs: one of its own, and
 * a big block registered with it, whole.  An exit status (0: done). */
static int child_registers_on_a_pd_of_its_own(void)
{
	if (rdma_malloc_attach_pd(fake_pd(2)))
		return 2;
	char *p = rdma_malloc(40 * MiB);
	uint32_t l, rk;
	if (!p || rdma_malloc_keys(p, 40 * MiB, fake_pd(2), &l, &rk))
		return 3;
	memset(p, 2, 40 * MiB);
	return 0;
}

/* Chunks made in jemalloc's alloc hook, whose growth lock fork() waits
 * for, and big blocks' chunks, registered outside every jemalloc lock,
 * whose verbs calls fork() waits for (verbs.h). */
Test(crew, fork_while_the_crew_works, .init = NULL)
{
	setup();
	cr_assert_eq(rdma_malloc_attach_pd(fake_pd(1)), 0);
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, churn, NULL), 0);
	int forks = 0;
	for (time_t end = time(NULL) + 5; time(NULL) < end; forks++) {
		pid_t pid = fork();
		cr_assert_neq(pid, -1);
		if (pid == 0) {
			alarm(60);
			_exit(child_registers_on_a_pd_of_its_own());
		}
		int st;
		cr_assert_eq(waitpid(pid, &st, 0), pid);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x", forks, st);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	cr_assert_gt(forks, 3);
	cr_assert_gt(stats().populated_chunks, 0);
}

/* A part on a worker that outlasts fork()'s wait (30 s in all, shortened
 * here to 200 ms; fork.h): whatever a part does (a madvise now; the wait
 * was made for the verbs calls the workers made before), the fork goes
 * ahead rather than hang, logged once and counted once in fallbacks.  The
 * child has no workers and registers on its own; the job ends in the
 * parent as it would. */
static atomic_int part_held, part_go;
static pthread_t job_caller;

static void held_part(struct rdmalloc_crew_job *job, unsigned i)
{
	(void)job;
	(void)i;
	if (pthread_equal(pthread_self(), job_caller)) { /* not all of them before a worker takes one */
		for (int n = 0; n < 5000 && !atomic_load(&part_held); n++)
			usleep(1000);
		return;
	}
	if (atomic_exchange(&part_held, 1))
		return;
	while (!atomic_load(&part_go))
		usleep(1000);
}

static void *run_held_job(void *arg)
{
	(void)arg;
	job_caller = pthread_self();
	struct rdmalloc_crew_job job = { .part = held_part, .parts = 8 };
	rdmalloc_crew_run(&job);
	return NULL;
}

static void *let_the_part_go(void *arg)
{
	(void)arg;
	sleep(5);
	atomic_store(&part_go, 1);
	return NULL;
}

Test(crew, fork_goes_ahead_once_a_part_outlasts_its_wait)
{
	rdma_malloc_trim(); /* initialised */
	rdmalloc_crew_start();
	cr_assert_eq(rdmalloc_crew_threads(), 3, "RDMALLOC_REG_THREADS=3: the caller and 2 workers");
	rdmalloc_fork_wait_ns = 200 * 1000 * 1000;
	pthread_t job, go;
	cr_assert_eq(pthread_create(&job, NULL, run_held_job, NULL), 0);
	for (int i = 0; i < 5000 && !atomic_load(&part_held); i++)
		usleep(1000);
	cr_assert(atomic_load(&part_held), "no worker took a part");
	struct rdma_malloc_stats s0 = stats();
	cr_assert_eq(pthread_create(&go, NULL, let_the_part_go, NULL), 0);
	double t0 = now_s();
	pid_t pid = fork();
	cr_assert_neq(pid, -1);
	if (pid == 0) {
		alarm(20);
		int st = child_registers_on_a_pd_of_its_own();
		_exit(st ? st : atomic_load(&part_go) ? 4 : 0);
	}
	double waited = now_s() - t0;
	int early = !atomic_load(&part_go);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(early && waited >= 0.19, "fork() returned after %.3f s, not after its 0.2 s wait", waited);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	cr_assert_eq(stats().fallbacks, s0.fallbacks + 1, "not counted once in fallbacks");
	pthread_join(go, NULL);
	pthread_join(job, NULL);
	rdmalloc_fork_wait_ns = RDMALLOC_FORK_WAIT_NS;
}

/* A status file of @groups ten-digit groups, then CapEff and VmPin (when
 * @vmpin), read back by the limit's check (os.h); its path in @path. */
static void status_file(char *path, unsigned groups, int vmpin)
{
	strcpy(path, "/tmp/rdmalloc-status.XXXXXX");
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	cr_assert(f);
	fprintf(f, "Name:\ttest\nUmask:\t0022\nGroups:\t");
	for (unsigned i = 0; i < groups; i++)
		fprintf(f, "%u ", 1000000000u + i);
	/* 255 bytes with its newline: the buffer's size but its NUL */
	fprintf(f, "\nX:%252s\nCapEff:\t0000000000004000\n", "");
	if (vmpin)
		fprintf(f, "VmPin:\t    1234 kB\n");
	fprintf(f, "Threads:\t1\n");
	cr_assert_eq(fclose(f), 0);
}

/* Before, the file was read whole into 4 KiB: a user in a few hundred
 * groups (common with LDAP) lost CapEff and VmPin, read as 0, and a chunk
 * the limit refuses was populated first. */
Test(crew, the_limit_check_reads_status_past_a_long_groups_line)
{
	char path[64];
	unsigned long long cap = 1, pin = 0;
	for (unsigned groups = 0; groups <= 1200; groups += 300) {
		status_file(path, groups, 1);
		int rc = rdmalloc_os_read_status(path, &cap, &pin);
		unlink(path);
		cr_assert_eq(rc, 0, "%u groups: VmPin not found", groups);
		cr_assert_eq(cap, 0x4000ull, "%u groups: CapEff %#llx", groups, cap);
		cr_assert_eq(pin, 1234ull, "%u groups: VmPin %llu", groups, pin);
	}
	status_file(path, 400, 0);
	cr_assert_eq(rdmalloc_os_read_status(path, &cap, &pin), -1, "no VmPin, and it says it read one");
	unlink(path);
	cr_assert_eq(rdmalloc_os_read_status("/nonexistent/status", &cap, &pin), -1);
	cr_assert_eq(rdmalloc_os_read_status("/proc/self/status", &cap, &pin), 0, "this process's");
}

/* A start was put off: the next allocation asks again, and the workers
 * come. */
static void a_later_allocation_starts_the_crew(void)
{
	rdma_free(rdma_malloc(64));
	for (int i = 0; i < 500 && rdmalloc_crew_threads() < 3; i++)
		usleep(10000);
	cr_assert_eq(rdmalloc_crew_threads(), 3, "the start put off was never made");
}

/* A fork holds the inner locks (STARTS among them) from its inner prepare
 * to its end, across glibc's own fork, which then takes the list lock of
 * every FILE: a start meanwhile (the drop-in's malloc asks, maybe under a
 * FILE's lock) waited for STARTS.  It is put off instead, taking no lock
 * the fork holds, and asked again by a later allocation. */
Test(crew, a_start_while_a_fork_holds_its_lock_is_put_off)
{
	rdma_malloc_trim(); /* initialised: RDMALLOC_REG_THREADS read, 2 workers wanted */
	cr_assert_eq(rdmalloc_crew_threads(), 1);
	int returned = returns_in_a_fork_window(rdmalloc_crew_start);
	cr_assert(returned, "the start waited for the lock a fork holds");
	cr_assert_eq(rdmalloc_crew_threads(), 1, "started under the fork's lock");
	a_later_allocation_starts_the_crew();
}

/* STARTS held for long by another start (its holder preempted under a
 * thread of higher priority, which yielding does not let run): a start
 * tries a few times, then is put off.  It spun until the lock was free. */
Test(crew, a_start_gives_up_on_a_busy_lock)
{
	rdma_malloc_trim(); /* initialised: RDMALLOC_REG_THREADS read, 2 workers wanted */
	cr_assert_eq(rdmalloc_crew_threads(), 1);
	rdmalloc_lock(RDMALLOC_LOCK_STARTS);
	pthread_t t;
	struct call_on_thread start = { .fn = rdmalloc_crew_start };
	int returned = called_within_a_second(&start, &t);
	rdmalloc_unlock(RDMALLOC_LOCK_STARTS);
	pthread_join(t, NULL);
	cr_assert(returned, "the start waited for the lock");
	cr_assert_eq(rdmalloc_crew_threads(), 1, "started under another's lock");
	a_later_allocation_starts_the_crew();
}
