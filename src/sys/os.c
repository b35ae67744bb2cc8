/* SPDX-License-Identifier: MIT */
/* os.c - the kernel's memory calls (os.h). */
#include "os.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include "counters.h"
#include "fault.h"
#include "log.h"

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif

static void *map(size_t len, int flags)
{
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

void *rdmalloc_os_map(size_t len)
{
	return map(len, 0);
}

void *rdmalloc_os_reserve(size_t len)
{
	return map(len, MAP_NORESERVE);
}

void *rdmalloc_os_map_aligned(size_t len, size_t align, enum rdmalloc_os_pages pages)
{
	size_t page = pages == RDMALLOC_OS_HUGE_1G ? (size_t)1 << 30
		      : pages == RDMALLOC_OS_HUGE_2M ? (size_t)2 << 20
						     : 4096;
	int flags = pages == RDMALLOC_OS_HUGE_1G ? MAP_HUGETLB | MAP_HUGE_1GB
		    : pages == RDMALLOC_OS_HUGE_2M ? MAP_HUGETLB | MAP_HUGE_2MB
						   : 0;
	/* Huge pages come aligned to their size; ordinary chunks are always
	 * over-mapped (jemalloc asks for more than a page of alignment). */
	size_t extra = pages == RDMALLOC_OS_PAGES || align > page ? align : 0;
	if (len > SIZE_MAX - extra) {
		errno = ENOMEM;
		return NULL;
	}
	if (pages == RDMALLOC_OS_PAGES) {
		int ferr = rdmalloc_fault_hit(RDMALLOC_FAULT_MMAP, NULL, len + extra);
		if (ferr) {
			errno = ferr;
			return NULL;
		}
	}
	char *m = map(len + extra, flags);
	if (!m || !extra)
		return m;
	char *p = (char *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (m + len + extra > p + len)
		munmap(p + len, (size_t)(m + len + extra - (p + len)));
	return p;
}

void *rdmalloc_os_remap(void *old, size_t old_len, size_t new_len)
{
	void *m = mremap(old, old_len, new_len, MREMAP_MAYMOVE);
	return m == MAP_FAILED ? NULL : m;
}

void rdmalloc_os_unmap(void *p, size_t len)
{
	munmap(p, len);
}

int rdmalloc_os_dontneed(void *p, size_t len)
{
	return madvise(p, len, MADV_DONTNEED) ? errno : 0;
}

/* The kernel may be older than the headers: EINVAL then. */
int rdmalloc_os_populate(void *p, size_t len)
{
	return madvise(p, len, MADV_POPULATE_WRITE) ? errno : 0;
}

int rdmalloc_os_may_pin(size_t len)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return 1;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 1;
	char line[256];
	unsigned long long cap = 0, pin_kb = 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "CapEff:", 7))
			cap = strtoull(line + 7, NULL, 16);
		else if (!strncmp(line, "VmPin:", 6))
			pin_kb = strtoull(line + 6, NULL, 10);
	}
	fclose(f);
	if (cap & (1ull << 14)) /* CAP_IPC_LOCK: the limit does not apply */
		return 1;
	return (unsigned long long)len <= rl.rlim_cur && pin_kb << 10 <= rl.rlim_cur - len;
}

int rdmalloc_os_thp(void *p, size_t len)
{
	return madvise(p, len, MADV_HUGEPAGE) ? errno : 0;
}

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

/* @attr for a thread of the process's, not of the thread starting it: the
 * main thread's scheduling policy, priority and CPUs.  0 or an errno. */
static int as_main_thread(pthread_attr_t *attr)
{
	pid_t main_tid = getpid();
	struct sched_param sp;
	int policy = sched_getscheduler(main_tid);
	if (policy < 0 || sched_getparam(main_tid, &sp))
		return errno;
	cpu_set_t cpus;
	if (sched_getaffinity(main_tid, sizeof cpus, &cpus))
		return errno; /* EINVAL: more CPUs than a cpu_set_t holds */
	int err = pthread_attr_setinheritsched(attr, PTHREAD_EXPLICIT_SCHED);
	if (!err)
		err = pthread_attr_setschedpolicy(attr, policy & ~SCHED_RESET_ON_FORK);
	if (!err)
		err = pthread_attr_setschedparam(attr, &sp);
	if (!err)
		err = pthread_attr_setaffinity_np(attr, sizeof cpus, &cpus);
	return err;
}

/* Start up to @n threads with @attr (made by the caller, detached, with its
 * stack size); the first error stops it. */
static int start(pthread_attr_t *attr, void *(*fn)(void *), unsigned n, unsigned *started)
{
	int err = 0;
	for (pthread_t t; *started < n && !(err = pthread_create(&t, attr, fn, NULL));)
		++*started;
	return err;
}

static int new_attr(pthread_attr_t *attr, size_t stack)
{
	int err = pthread_attr_init(attr);
	if (!err) {
		pthread_attr_setdetachstate(attr, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(attr, stack);
	}
	return err;
}

int rdmalloc_os_start_threads(void *(*fn)(void *), unsigned n, size_t stack, unsigned *started)
{
	*started = 0;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	int err = new_attr(&attr, stack);
	if (!err) {
		int why = rdmalloc_fault_hit(RDMALLOC_FAULT_THREAD, NULL, 0);
		if (!why)
			why = as_main_thread(&attr);
		if (!why)
			err = start(&attr, fn, n, started);
		pthread_attr_destroy(&attr);
		if (why || err == EPERM || err == EINVAL) { /* the main thread's were refused: the starter's */
			if (!why)
				why = err;
			if (!(err = new_attr(&attr, stack))) {
				err = start(&attr, fn, n, started);
				pthread_attr_destroy(&attr);
			}
			if (*started) {
				STAT_INC(fallbacks);
				rdmalloc_log_once(RDMALLOC_LOG_WARN, "rdmalloc's threads cannot take the main "
						  "thread's scheduling and CPUs (%s): they run with those of the "
						  "thread that starts them (counted in fallbacks)", strerror(why));
			}
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

int rdmalloc_os_barrier_all_threads(void)
{
	/* EPERM: not registered in this process (first use, or a fork child
	 * whose kernel does not carry the registration over). */
	for (int tries = 0; tries < 2; tries++) {
		if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
			return 0;
		if (errno != EPERM || membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0)
			return errno;
	}
	return errno;
}

uint64_t rdmalloc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t rdmalloc_os_random64(void)
{
	uint64_t v = 0;
	/* Never waits: a malloc must not block on the entropy pool. */
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v)
		return v;
	/* No entropy yet (early boot): the clock and an address, mixed
	 * (splitmix64's finaliser).  Not secret, still unlikely in data. */
	v = rdmalloc_now_ns() ^ (uint64_t)(uintptr_t)&v ^ ((uint64_t)getpid() << 32);
	v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ull;
	v = (v ^ (v >> 27)) * 0x94d049bb133111ebull;
	return v ^ (v >> 31);
}
