/* SPDX-License-Identifier: MIT */
/* os.h - the kernel's memory calls: every mmap, mremap, munmap and madvise
 * of the library and the drop-in is here; and the clock of the *_ns stats. */
#ifndef RDMALLOC_OS_H
#define RDMALLOC_OS_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* Anonymous read-write memory of @len bytes: NULL with errno. */
RDMALLOC_TESTABLE void *rdmalloc_os_map(size_t len);
/* The same as address space only (MAP_NORESERVE): pages count as touched. */
void *rdmalloc_os_reserve(size_t len);

enum rdmalloc_os_pages {
	RDMALLOC_OS_PAGES = 0, /* ordinary pages */
	RDMALLOC_OS_HUGE_2M,   /* MAP_HUGETLB | MAP_HUGE_2MB */
	RDMALLOC_OS_HUGE_1G,   /* MAP_HUGETLB | MAP_HUGE_1GB */
};

/*
 * @len bytes (a multiple of the page size of @pages) at an address aligned
 * to @align (a power of two): mapped larger and trimmed when the kernel's
 * own alignment is not enough.  NULL with errno.  Ordinary pages pass the
 * MMAP fault site (fault.h).
 */
void *rdmalloc_os_map_aligned(size_t len, size_t align, enum rdmalloc_os_pages pages);
/* Grow or shrink a mapping of rdmalloc_os_map(), maybe moving it: NULL
 * with errno (the old one is then intact). */
RDMALLOC_TESTABLE void *rdmalloc_os_remap(void *old, size_t old_len, size_t new_len);
RDMALLOC_TESTABLE void rdmalloc_os_unmap(void *p, size_t len);
/* Give the pages of [p, p+len) back (MADV_DONTNEED): 0 or errno. */
RDMALLOC_TESTABLE int rdmalloc_os_dontneed(void *p, size_t len);
/* Fault the pages of [p, p+len) in, writable, as a registration would
 * (MADV_POPULATE_WRITE, Linux 5.14): 0 or errno (EINVAL: no such advice
 * here; ENOMEM, EFAULT: what a registration would have met). */
int rdmalloc_os_populate(void *p, size_t len);
/* From a /proc/PID/status file: *@cap the effective capabilities (CapEff,
 * 0 if absent) and *@pin_kb the kibibytes pinned (VmPin).  0, or -1 if it
 * cannot be read or has no VmPin.  open/read only, as above. */
RDMALLOC_TESTABLE int rdmalloc_os_read_status(const char *path, unsigned long long *cap,
					      unsigned long long *pin_kb);
/* Whether @len more bytes may be pinned by a registration, as the kernel
 * will judge it: CAP_IPC_LOCK, or RLIMIT_MEMLOCK unlimited or above the
 * pages pinned now (VmPin) plus @len.  Reads /proc/self/status: for big
 * registrations only.  1 when it cannot tell. */
RDMALLOC_TESTABLE int rdmalloc_os_may_pin(size_t len);
/* Ask for transparent huge pages on [p, p+len) (MADV_HUGEPAGE): 0 or errno. */
int rdmalloc_os_thp(void *p, size_t len);
/*
 * A full memory barrier on every running thread of the process
 * (membarrier(2), private expedited; registered on first use, and again
 * after a fork): the costly side of an asymmetric barrier whose cheap side
 * is a compiler barrier.  0, or errno (ENOSYS, EINVAL: no such call here).
 */
int rdmalloc_os_barrier_all_threads(void);
/*
 * Start @n detached threads running @fn(NULL), stopping at the first that
 * cannot start: 0 or its errno; *@started counts those that did.  They
 * start with every signal blocked (signals are the program's threads'
 * business) but the faults a thread raises itself (SIGSEGV, SIGBUS,
 * SIGILL, SIGFPE, SIGTRAP, SIGSYS: blocked, they would kill the process
 * past every handler, in silence), and a stack of @stack bytes: without a
 * size of our own glibc takes its default-attribute lock, which the
 * calling thread may hold already (it allocates inside
 * pthread_getattr_default_np's copy).  They serve the process, so each
 * first moves itself to the scheduling policy, priority, nice value and
 * CPUs the process had when this library was loaded, not the calling
 * thread's (a data-path thread pinned to one CPU under SCHED_FIFO or at
 * nice 19, maybe the main thread pinned since); a part the kernel refuses
 * stays as inherited, logged once and counted in fallbacks.  Nothing is
 * allocated here (a fork meanwhile finds no allocator lock of ours taken).
 * While a fork is coming none is started and EINTR is returned at once
 * (below), taking no lock that the fork holds; so it is, rarely, when
 * another start holds STARTS for long (preempted): the caller asks again
 * later, taking no lock either.  Never from a hook or with a lock
 * of ours held.
 */
int rdmalloc_os_start_threads(void *(*fn)(void *), unsigned n, size_t stack, unsigned *started);
/*
 * fork() and the threads being started: a thread is created by glibc and
 * set up by whatever intercepts pthread_create (a sanitizer's runtime)
 * before it runs our function, and that set-up may take locks of theirs
 * that no fork handler takes (ASan's allocator, in GCC 12).  A child
 * forked meanwhile inherits them taken and hangs at its first thread or
 * allocation.  So a fork waits, until @deadline_ns at most (api/fork.h
 * says why a bound), for the threads of ours created and not yet running.
 * None is started while it is coming, nor by the forking thread in a fork
 * handler: rdmalloc_os_start_threads returns EINTR rather than wait for
 * the fork, since its caller (a malloc of the drop-in) may hold a lock
 * that the fork needs (a FILE's, which glibc's fork takes after the
 * handlers).  The number left starting, which the caller says.  STARTS
 * lock taken and released.
 */
RDMALLOC_TESTABLE unsigned rdmalloc_os_threads_fork_prepare(uint64_t deadline_ns);
/* Whether a fork is coming (from its outer prepare to its end): a start
 * asked now is put off.  No lock. */
RDMALLOC_TESTABLE int rdmalloc_os_threads_fork_coming(void);
RDMALLOC_TESTABLE void rdmalloc_os_threads_fork_parent(void);
/* No lock taken: the child has one thread. */
void rdmalloc_os_threads_fork_child(void);
/* Note the calling thread's placement as the process's at load (the
 * library's constructor; tests, to stand for another start). */
RDMALLOC_TESTABLE void rdmalloc_os_note_placement(void);
/* CLOCK_MONOTONIC in nanoseconds (what the *_ns stats count). */
uint64_t rdmalloc_now_ns(void);
/* Sleep about @ns nanoseconds (a poll's pause: no lock held). */
void rdmalloc_os_nap(uint64_t ns);
/* 64 random bits from the kernel (getrandom(2)); without entropy yet, the
 * clock and an address mixed.  Never 0 from the kernel. */
uint64_t rdmalloc_os_random64(void);

#endif
