/* SPDX-License-Identifier: MIT */
/*
 * crew.h - the registration crew: threads that share out one big
 * registration's work, so that a chunk of a GiB waits for the machine's
 * page-fault rate times its threads, not for one thread's (doc/design.md,
 * "Registration in parallel").
 *
 * One ibv_reg_mr is one kernel thread's work, and most of it, on a chunk
 * nobody touched yet, is faulting its pages in.  So a chunk of at least
 * RDMALLOC_CREW_MIN bytes about to be registered is first populated in
 * slices by every thread of the crew (MADV_POPULATE_WRITE), then
 * registered with each PD once by the caller, one PD after another
 * (region.c): every block still lies inside one region per PD, whose keys
 * cover the chunk whole, and the pages are present by then, so a second
 * PD costs little.  No ibv_reg_mr runs on a worker: a provider's lock the
 * caller holds (the program called malloc holding it) would have the
 * caller wait for that worker for ever.
 *
 * The crew is the calling thread and RDMALLOC_REG_THREADS - 1 workers.  A
 * job's caller takes parts itself until none is left, then waits only for
 * parts that workers have under way: a job finishes without the workers,
 * alone when they are not started, stopped for a fork, or busy.  Workers
 * hold CREW (a leaf) only between parts; a part is a madvise, which takes
 * no lock of the program's, so a caller may wait for them inside an
 * extent hook, holding jemalloc's growth lock, or inside a malloc whose
 * caller holds its own.  Workers are started outside every lock, never in
 * a hook (reserve.h says why): by rdmalloc_crew_start().
 */
#ifndef RDMALLOC_CREW_H
#define RDMALLOC_CREW_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "rdma_malloc.h"

/* Chunks smaller than this are registered by the caller alone: handing
 * out parts costs a wake-up (tens of microseconds), populating 16 MiB a
 * few milliseconds. */
#define RDMALLOC_CREW_MIN ((size_t)16 << 20)
/* A slice of a chunk's population: parts of about this size, so that
 * threads that run slower (or start late) take fewer. */
#define RDMALLOC_CREW_SLICE ((size_t)8 << 20)

/* Whether a chunk of @len bytes in a heap of @flags (RDMA_HEAP_*) is the
 * crew's to populate before it is pinned: big enough to share out, and
 * pinned at all (an ODP registration pins nothing). */
static inline int rdmalloc_crew_serves(size_t len, unsigned int flags)
{
	return len >= RDMALLOC_CREW_MIN && !(flags & RDMA_HEAP_ODP);
}
#define RDMALLOC_CREW_MAX 16 /* RDMALLOC_REG_THREADS */

/* A job: @parts calls of @part(@job, i), for i from 0, in any order on
 * any thread of the crew.  The rest is the crew's. */
struct rdmalloc_crew_job {
	void (*part)(struct rdmalloc_crew_job *job, unsigned i);
	unsigned parts;
	unsigned next, done; /* parts taken, parts finished (CREW lock) */
	struct rdmalloc_crew_job *queue_next;
};

/* Run every part of @job, on this thread and on the crew's workers, and
 * return when all are done.  Takes the CREW lock: call it holding none of
 * ours that comes later (lock.h), and never while holding one that a part
 * takes. */
RDMALLOC_TESTABLE void rdmalloc_crew_run(struct rdmalloc_crew_job *job);
/* Threads a job may be shared among now: 1 + the workers started. */
RDMALLOC_TESTABLE unsigned rdmalloc_crew_threads(void);
/* Start the workers, if RDMALLOC_REG_THREADS wants any and they are not
 * started (once; a failure is logged once and counted in fallbacks, and
 * jobs run on their callers).  No lock held; never from a hook. */
RDMALLOC_TESTABLE void rdmalloc_crew_start(void);
/* Before a registration of a chunk of @len bytes in a heap of @flags,
 * outside every lock (an allocation, a first use): the workers, if the crew
 * serves such a chunk, so that the first one is shared out too. */
static inline void rdmalloc_crew_start_before(size_t len, unsigned int flags)
{
	if (__builtin_expect(rdmalloc_crew_serves(len, flags), 0))
		rdmalloc_crew_start();
}
/* Whether a job was run alone because the workers were not started: the
 * next call outside every lock starts them (rdmalloc_crew_start). */
extern atomic_int rdmalloc_crew_wanted;
static inline int rdmalloc_crew_start_wanted(void)
{
	return atomic_load_explicit(&rdmalloc_crew_wanted, memory_order_relaxed);
}

/* Populate [@p, @p+@len) (os.h) in slices shared out among the crew,
 * before its registration: 0 (counted in populated_chunks), or an errno
 * (the registration then says what is wrong).  The contents stay as they
 * are.  Nothing is populated without workers (the registration alone
 * faults the pages in as fast: 0), where RLIMIT_MEMLOCK would refuse the
 * registration (ENOMEM: a refused registration touches no page, and
 * neither must this), or where the kernel cannot populate (EINVAL, then
 * never again: logged once, counted in fallbacks). */
int rdmalloc_crew_populate(void *p, size_t len);

/* fork(): no worker takes a part (coming, in the outer prepare: callers
 * run their jobs' parts themselves meanwhile), and the workers' parts under
 * way end (prepare: until @deadline_ns at most, rdmalloc_now_ns()'s clock;
 * returns the parts still under way then, which the caller says); go on
 * (parent); the child has no workers, and no job. */
void rdmalloc_crew_fork_coming(void);
unsigned rdmalloc_crew_fork_prepare(uint64_t deadline_ns);
void rdmalloc_crew_fork_parent(void);
void rdmalloc_crew_fork_child(void);

#endif
