/* SPDX-License-Identifier: MIT */
/* os.c - the kernel's memory calls (os.h). */
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
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
#include "lock.h"
#include "log.h"
#include "maptrack.h"
#include "nocancel.h"

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
	if (m == MAP_FAILED)
		return NULL;
	rdmalloc_maps_add(m, len);
	return m;
}

/* Forgotten before the call, as in rdmalloc_os_remap.  A refused unmap
 * (ENOMEM: the split would pass vm.max_map_count) leaves the range mapped
 * and ours: said, not swallowed; nothing the caller could do instead. */
static void unmap(void *p, size_t len)
{
	rdmalloc_maps_check(p, len, "munmap", 1);
	if (munmap(p, len)) {
		int e = errno;
		rdmalloc_maps_add(p, len);
		STAT_INC(unmap_failures);
		rdmalloc_log_once(RDMALLOC_LOG_ERROR, "munmap(%p, %zu): %s: the range stays mapped "
				  "(further failures are counted in unmap_failures, not logged)", p, len, rdmalloc_strerror(e));
		errno = e;
	}
}

/* Whether this mapping of one of the library's own tables is refused
 * (fault.h's META site). */
static int meta_refused(size_t len)
{
	(void)len; /* (a plain build's site is the constant 0) */
	int ferr = rdmalloc_fault_hit(RDMALLOC_FAULT_META, NULL, len);
	if (ferr)
		errno = ferr;
	return ferr;
}

void *rdmalloc_os_map(size_t len)
{
	return meta_refused(len) ? NULL : map(len, 0);
}

void *rdmalloc_os_reserve(size_t len)
{
	return meta_refused(len) ? NULL : map(len, MAP_NORESERVE);
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
		unmap(m, (size_t)(p - m));
	if (m + len + extra > p + len)
		unmap(p + len, (size_t)(m + len + extra - (p + len)));
	return p;
}

void *rdmalloc_os_remap(void *old, size_t old_len, size_t new_len)
{
	/* Forgotten before the call: once it returns, the old range may be
	 * another thread's new mapping already. */
	if (meta_refused(new_len))
		return NULL;
	rdmalloc_maps_check(old, old_len, "mremap", 1);
	void *m = mremap(old, old_len, new_len, MREMAP_MAYMOVE);
	if (m == MAP_FAILED) {
		int e = errno;
		rdmalloc_maps_add(old, old_len);
		errno = e;
		return NULL;
	}
	rdmalloc_maps_add(m, new_len);
	return m;
}

void rdmalloc_os_unmap(void *p, size_t len)
{
	unmap(p, len);
}

int rdmalloc_os_dontneed(void *p, size_t len)
{
	rdmalloc_maps_check(p, len, "MADV_DONTNEED", 0);
	return madvise(p, len, MADV_DONTNEED) ? errno : 0;
}

/* The kernel may be older than the headers: EINVAL then. */
int rdmalloc_os_populate(void *p, size_t len)
{
	int ferr = rdmalloc_fault_hit(RDMALLOC_FAULT_POPULATE, p, len);
	if (ferr)
		return ferr;
	return madvise(p, len, MADV_POPULATE_WRITE) ? errno : 0;
}

int rdmalloc_os_read_status(const char *path, unsigned long long *cap, unsigned long long *pin_kb)
{
	int cancel = rdmalloc_cancel_off();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rdmalloc_cancel_on(cancel);
		return -1;
	}
	/* Line by line through a small buffer: a line longer than it (the
	 * Groups of a user in hundreds of groups) is skipped, never cut, so
	 * that the lines after it are still read whole. */
	char buf[256];
	size_t have = 0;
	int skipping = 0, seen = 0;
	*cap = 0;
	for (;;) {
		ssize_t r = read(fd, buf + have, sizeof(buf) - 1 - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		have += (size_t)r;
		buf[have] = '\0';
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			*nl = '\0';
			if (skipping)
				skipping = 0;
			else if (!strncmp(line, "CapEff:", 7))
				*cap = strtoull(line + 7, NULL, 16);
			else if (!strncmp(line, "VmPin:", 6)) {
				*pin_kb = strtoull(line + 6, NULL, 10);
				seen = 1;
			}
			line = nl + 1;
		}
		size_t rest = have - (size_t)(line - buf);
		if (rest == sizeof(buf) - 1) { /* no end of line in a full buffer */
			skipping = 1;
			rest = 0;
		}
		memmove(buf, line, rest);
		have = rest;
	}
	close(fd);
	rdmalloc_cancel_on(cancel);
	return seen ? 0 : -1;
}

int rdmalloc_os_may_pin(size_t len)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return 1;
	/* open/read, never stdio: this runs inside malloc, whose caller may
	 * hold a FILE's lock while fflush(NULL) in another thread holds
	 * stdio's list lock and waits for it (fopen takes the list lock). */
	unsigned long long cap, pin_kb;
	if (rdmalloc_os_read_status("/proc/self/status", &cap, &pin_kb))
		return 1;
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

/*
 * Where the process ran when this library was loaded (the thread running
 * the constructors: the main thread, or a dlopen()'s caller): the policy,
 * priority, nice value and CPUs our threads take, whichever thread starts
 * them.  Read at load, before a program pins its main thread to a polling
 * CPU.
 */
static struct {
	int policy; /* -1: unknown */
	struct sched_param param;
	int nice_known;
	int nice;
	int cpus_known;
	cpu_set_t cpus;
} at_load = { .policy = -1 };

__attribute__((constructor)) void rdmalloc_os_note_placement(void)
{
	int policy = sched_getscheduler(0);
	if (policy >= 0 && sched_getparam(0, &at_load.param) == 0)
		at_load.policy = policy & ~SCHED_RESET_ON_FORK;
	int saved = errno;
	errno = 0; /* -1 is a nice value */
	at_load.nice = getpriority(PRIO_PROCESS, 0); /* 0: the calling thread, on Linux */
	at_load.nice_known = errno == 0;
	errno = saved;
	at_load.cpus_known = sched_getaffinity(0, sizeof at_load.cpus, &at_load.cpus) == 0;
}

/* The new thread moves itself to where the process ran at load: no
 * attribute for pthread_create to apply (glibc allocates for a CPU set in
 * attributes, and its attributes cannot carry SCHED_BATCH, SCHED_IDLE or a
 * nice value).  Each part is tried; a refusal (EPERM: leaving SCHED_IDLE
 * past RLIMIT_NICE; EACCES: a lower nice value past it; EINVAL: CPUs no
 * longer allowed) leaves that part as it was inherited, and the first is
 * reported. */
static void place_self(void)
{
	const char *what = "scheduling, nice value and CPUs";
	int refused = rdmalloc_fault_hit(RDMALLOC_FAULT_THREAD, NULL, 0);
	if (refused)
		goto report; /* as if every part were refused */
	if (at_load.cpus_known && sched_setaffinity(0, sizeof at_load.cpus, &at_load.cpus)) {
		refused = errno;
		what = "CPUs";
	}
	/* The nice value counts under SCHED_OTHER and SCHED_BATCH only; a
	 * change of policy keeps it.  Raised before the policy (leaving
	 * SCHED_IDLE is judged by the nice value at the time), lowered after. */
	int nice = at_load.nice_known && (at_load.policy == SCHED_OTHER || at_load.policy == SCHED_BATCH);
	errno = 0;
	int now = nice ? getpriority(PRIO_PROCESS, 0) : 0;
	nice = nice && !errno && now != at_load.nice;
	if (nice && at_load.nice > now && setpriority(PRIO_PROCESS, 0, at_load.nice) && !refused) {
		refused = errno;
		what = "nice value";
	}
	if (at_load.policy >= 0 && sched_setscheduler(0, at_load.policy, &at_load.param) && !refused) {
		refused = errno;
		what = "scheduling";
	}
	if (nice && at_load.nice < now && setpriority(PRIO_PROCESS, 0, at_load.nice) && !refused) {
		refused = errno;
		what = "nice value";
	}
report:
	if (refused) {
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "a thread of rdmalloc's cannot take the %s of the process at "
				  "load (%s): it keeps those of the thread that started it (counted in fallbacks)",
				  what, rdmalloc_strerror(refused));
	}
}

/* The functions our threads run, each in a slot of its own, which the new
 * thread is given to find it (C has no portable cast of a function to a
 * void *). */
typedef void *(*thread_fn)(void *);
static _Atomic(thread_fn) entries[4];

/* Threads of ours counted for a start and not yet running their
 * function (counted in under STARTS, out without it), and whether a fork
 * is coming (set under STARTS); os.h says why fork() waits for them. */
static atomic_uint starting;
static atomic_int forking;

/* @n counted starts are over (running, or never created).  Never waits
 * for STARTS, which a fork holds across glibc's fork: the fork's wait
 * looks again every millisecond, and is woken here if the lock is free. */
static void started(unsigned n)
{
	if (atomic_fetch_sub(&starting, n) == n && atomic_load(&forking) &&
	    rdmalloc_lock_try(RDMALLOC_LOCK_STARTS)) {
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_STARTS);
		rdmalloc_unlock(RDMALLOC_LOCK_STARTS);
	}
}

static void *placed(void *slot)
{
	thread_fn fn = atomic_load_explicit((_Atomic(thread_fn) *)slot, memory_order_acquire);
	place_self();
	RDMALLOC_TEST_PAUSE(RDMALLOC_PAUSE_THREAD_START);
	started(1);
	return fn(NULL);
}

static _Atomic(thread_fn) *entry_of(thread_fn fn)
{
	for (unsigned i = 0; i < sizeof entries / sizeof entries[0]; i++) {
		thread_fn none = NULL;
		if (atomic_load_explicit(&entries[i], memory_order_acquire) == fn ||
		    atomic_compare_exchange_strong(&entries[i], &none, fn) || none == fn)
			return &entries[i];
	}
	rdmalloc_fatal("more kinds of threads than rdmalloc_os_start_threads has slots for");
}

int rdmalloc_os_start_threads(void *(*fn)(void *), unsigned n, size_t stack, unsigned *started_n)
{
	*started_n = 0;
	/* At once, as often as a thread asks during a fork; the forking thread
	 * itself may hold STARTS, taken with the inner locks. */
	if (atomic_load(&forking))
		return EINTR;
	_Atomic(thread_fn) *slot = entry_of(fn);
	/* Every signal blocked but the faults a thread raises itself: blocked,
	 * a fault would kill the process at once and in silence, past every
	 * handler (a sanitizer's report, the program's crash reporter).  And
	 * so no fork from a handler while the starts are counted. */
	sigset_t all, old;
	sigfillset(&all);
	static const int faults[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS };
	for (unsigned i = 0; i < sizeof faults / sizeof faults[0]; i++)
		sigdelset(&all, faults[i]);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* Counted before they exist, so that a fork that finds none starting
	 * has none half created either.  While a fork is coming none starts,
	 * and the caller is not made to wait for it: it may hold a lock that
	 * the fork needs (a FILE's, inside the drop-in's malloc).  The fork
	 * holds STARTS from its inner prepare on, with forking set since its
	 * outer prepare: STARTS is only tried, never waited for, a few times
	 * while another start holds it, then the start is put off (its
	 * holder may be preempted under a thread of higher priority). */
	int later = 1;
	for (int tries = 0; tries < 64 && !atomic_load(&forking); tries++) {
		if (rdmalloc_lock_try(RDMALLOC_LOCK_STARTS)) {
			if (!(later = atomic_load(&forking)))
				atomic_fetch_add(&starting, n);
			rdmalloc_unlock(RDMALLOC_LOCK_STARTS);
			break;
		}
		sched_yield();
	}
	int err = EINTR;
	if (!later) {
		pthread_attr_t attr;
		err = pthread_attr_init(&attr);
		if (!err) {
			pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
			pthread_attr_setstacksize(&attr, stack);
			for (pthread_t t; *started_n < n && !(err = pthread_create(&t, &attr, placed, (void *)slot));)
				++*started_n;
			pthread_attr_destroy(&attr);
		}
		if (*started_n < n)
			started(n - *started_n);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

unsigned rdmalloc_os_threads_fork_prepare(uint64_t deadline_ns)
{
	rdmalloc_lock(RDMALLOC_LOCK_STARTS);
	forking = 1;
	for (uint64_t now; atomic_load(&starting) && (now = rdmalloc_now_ns()) < deadline_ns;)
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_STARTS, now + 1000000u < deadline_ns ? now + 1000000u : deadline_ns);
	unsigned left = atomic_load(&starting);
	rdmalloc_unlock(RDMALLOC_LOCK_STARTS);
	return left;
}

int rdmalloc_os_threads_fork_coming(void)
{
	return atomic_load(&forking);
}

void rdmalloc_os_threads_fork_parent(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_STARTS);
	forking = 0;
	rdmalloc_unlock(RDMALLOC_LOCK_STARTS);
}

void rdmalloc_os_threads_fork_child(void)
{
	forking = 0;
	starting = 0; /* those threads are not in the child */
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

void rdmalloc_os_nap(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	int cancel = rdmalloc_cancel_off();
	nanosleep(&ts, NULL);
	rdmalloc_cancel_on(cancel);
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
