/* SPDX-License-Identifier: MIT */
/*
 * crew.c - the registration crew (crew.h): its workers, its queue of
 * jobs, and the one job every big registration starts with, populating
 * the chunk.
 *
 * Under the CREW lock: the queue (jobs with parts not yet taken), each
 * job's next and done, the workers' count of parts under way.  A job
 * lives on its caller's stack: the caller returns only once done ==
 * parts, and a worker touches a job only between taking a part (under
 * the lock) and counting it done (under the lock).
 */
#include "crew.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "counters.h"
#include "lock.h"
#include "log.h"
#include "options.h"
#include "os.h"
#include "tls.h"

#define CREW_STACK ((size_t)256 << 10)

atomic_int rdmalloc_crew_wanted;
static atomic_uint started;                /* workers running */
static atomic_int starting;                 /* 1 once a start was tried (0 again in a fork child) */
static struct rdmalloc_crew_job *queue;     /* jobs with parts to take */
static unsigned running;                    /* parts under way on workers */
static int forking;                         /* no worker takes a part */

/* The workers RDMALLOC_REG_THREADS asks for: 0 means one thread per online
 * CPU, at most RDMALLOC_CREW_MAX, the caller included. */
static unsigned wanted_workers(void)
{
	unsigned n = rdmalloc_opts.reg_threads;
	if (!n) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus < 1 ? 1 : cpus > RDMALLOC_CREW_MAX ? RDMALLOC_CREW_MAX : (unsigned)cpus;
	}
	return n - 1;
}

unsigned rdmalloc_crew_threads(void)
{
	return 1 + atomic_load_explicit(&started, memory_order_acquire);
}

/* Take the next part of the first job that has one (CREW lock held): its
 * index into *@i, or NULL.  A job whose last part is taken leaves the
 * queue. */
static struct rdmalloc_crew_job *take(unsigned *i)
{
	struct rdmalloc_crew_job *j = queue;
	if (!j)
		return NULL;
	*i = j->next++;
	if (j->next == j->parts)
		queue = j->queue_next;
	return j;
}

static void *worker(void *arg)
{
	(void)arg;
	/* Its parts call no verbs function (crew.h); marked as a hook is
	 * all the same, so that whatever it allocates comes from the
	 * drop-in's nest (preload/nest.c), never a heap whose growth lock
	 * our caller may hold. */
	rdmalloc_tl_in_verbs += RDMALLOC_TL_IN_HOOK;
	pthread_setname_np(pthread_self(), "rdmalloc-crew");
	rdmalloc_lock(RDMALLOC_LOCK_CREW);
	for (;;) {
		unsigned i;
		struct rdmalloc_crew_job *j = forking ? NULL : take(&i);
		if (!j) {
			rdmalloc_lock_wait(RDMALLOC_LOCK_CREW);
			continue;
		}
		running++;
		rdmalloc_unlock(RDMALLOC_LOCK_CREW);
		j->part(j, i);
		rdmalloc_lock(RDMALLOC_LOCK_CREW);
		running--;
		if (++j->done == j->parts || (forking && !running))
			rdmalloc_lock_broadcast(RDMALLOC_LOCK_CREW); /* its caller, or a fork, waits */
	}
	return NULL;
}

void rdmalloc_crew_start(void)
{
	if (rdmalloc_os_threads_fork_coming()) { /* asked again after the fork (os.h) */
		if (!atomic_load_explicit(&starting, memory_order_relaxed))
			atomic_store_explicit(&rdmalloc_crew_wanted, 1, memory_order_relaxed);
		return;
	}
	atomic_store_explicit(&rdmalloc_crew_wanted, 0, memory_order_relaxed);
	int no = 0;
	if (atomic_load_explicit(&starting, memory_order_relaxed) ||
	    !atomic_compare_exchange_strong(&starting, &no, 1))
		return;
	unsigned want = wanted_workers();
	if (!want)
		return;
	unsigned n;
	int err = rdmalloc_os_start_threads(worker, want, CREW_STACK, &n);
	if (err == EINTR) { /* put off (os.h): the next call outside every lock starts them */
		atomic_store(&starting, 0);
		atomic_store_explicit(&rdmalloc_crew_wanted, 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&started, n, memory_order_release);
	if (err) {
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "cannot start the registration crew's threads (%s): %u of %u "
				  "fault big chunks in (counted in fallbacks)", rdmalloc_strerror(err),
				  atomic_load(&started), want);
	}
}

void rdmalloc_crew_run(struct rdmalloc_crew_job *job)
{
	job->next = job->done = 0;
	job->queue_next = NULL;
	if (job->parts > 1 && !atomic_load_explicit(&starting, memory_order_relaxed))
		atomic_store_explicit(&rdmalloc_crew_wanted, 1, memory_order_relaxed);
	if (job->parts <= 1 || !atomic_load_explicit(&started, memory_order_acquire)) {
		for (unsigned i = 0; i < job->parts; i++)
			job->part(job, i);
		return;
	}
	rdmalloc_lock(RDMALLOC_LOCK_CREW);
	struct rdmalloc_crew_job **q = &queue;
	while (*q)
		q = &(*q)->queue_next;
	*q = job;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CREW);
	/* Ours first: a job of its own caller's never waits for a part nobody
	 * took.  Another job's parts are its caller's and the workers'. */
	while (job->next < job->parts) {
		unsigned i = job->next++;
		if (job->next == job->parts) { /* out of the queue, wherever it is */
			for (q = &queue; *q != job; q = &(*q)->queue_next)
				;
			*q = job->queue_next;
		}
		rdmalloc_unlock(RDMALLOC_LOCK_CREW);
		job->part(job, i);
		rdmalloc_lock(RDMALLOC_LOCK_CREW);
		job->done++;
	}
	while (job->done < job->parts)
		rdmalloc_lock_wait(RDMALLOC_LOCK_CREW);
	rdmalloc_unlock(RDMALLOC_LOCK_CREW);
}

/* ---- populating a chunk ---- */

struct populate_job {
	struct rdmalloc_crew_job job;
	char *base;
	size_t len, slice;
	atomic_int err; /* the first slice's failure */
};

static void populate_part(struct rdmalloc_crew_job *job, unsigned i)
{
	struct populate_job *pj = (struct populate_job *)job;
	size_t off = (size_t)i * pj->slice;
	size_t len = pj->len - off < pj->slice ? pj->len - off : pj->slice;
	int err = atomic_load_explicit(&pj->err, memory_order_relaxed) == EINVAL
			  ? EINVAL
			  : rdmalloc_os_populate(pj->base + off, len);
	int none = 0;
	if (err)
		atomic_compare_exchange_strong(&pj->err, &none, err);
}

static atomic_int no_populate; /* the kernel refused MADV_POPULATE_WRITE once: never again */

int rdmalloc_crew_populate(void *p, size_t len)
{
	if (rdmalloc_crew_threads() < 2) { /* the registration faults them in as fast */
		if (!atomic_load_explicit(&starting, memory_order_relaxed))
			atomic_store_explicit(&rdmalloc_crew_wanted, 1, memory_order_relaxed);
		return 0;
	}
	if (atomic_load_explicit(&no_populate, memory_order_relaxed))
		return EINVAL;
	/* A registration RLIMIT_MEMLOCK will refuse touches no page: neither
	 * does this, or a refused chunk would stay resident whole. */
	if (!rdmalloc_os_may_pin(len))
		return ENOMEM;
	struct populate_job pj = { .job = { .part = populate_part }, .base = p, .len = len,
				   .slice = RDMALLOC_CREW_SLICE };
	pj.job.parts = (unsigned)((len + pj.slice - 1) / pj.slice);
	rdmalloc_crew_run(&pj.job);
	int err = atomic_load(&pj.err);
	if (err == EINVAL) { /* a kernel before 5.14: no populating, ever */
		atomic_store_explicit(&no_populate, 1, memory_order_relaxed);
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "madvise(MADV_POPULATE_WRITE) is refused here (a kernel "
				  "before 5.14?): big chunks are registered by one thread each (counted in "
				  "fallbacks once)");
	} else if (!err) {
		STAT_INC(populated_chunks);
	}
	return err;
}

/* ---- fork ---- */

void rdmalloc_crew_fork_coming(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_CREW);
	forking = 1;
	rdmalloc_unlock(RDMALLOC_LOCK_CREW);
}

unsigned rdmalloc_crew_fork_prepare(uint64_t deadline_ns)
{
	rdmalloc_lock(RDMALLOC_LOCK_CREW);
	forking = 1;
	while (running && rdmalloc_now_ns() < deadline_ns)
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_CREW, deadline_ns);
	unsigned left = running;
	rdmalloc_unlock(RDMALLOC_LOCK_CREW);
	return left;
}

void rdmalloc_crew_fork_parent(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_CREW);
	forking = 0;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CREW);
	rdmalloc_unlock(RDMALLOC_LOCK_CREW);
}

/* No lock taken: the child has one thread, and the CREW lock is reset
 * with the others (lock.h). */
void rdmalloc_crew_fork_child(void)
{
	forking = 0;
	running = 0;
	queue = NULL; /* its callers are the parent's threads */
	atomic_store(&started, 0);
	atomic_store(&starting, 0);
	atomic_store(&rdmalloc_crew_wanted, 0);
}
