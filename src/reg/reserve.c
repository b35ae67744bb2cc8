/* SPDX-License-Identifier: MIT */
/*
 * reserve.c - the reserves' bookkeeping and their registration thread
 * (reserve.h; doc/design.md, "The reserve").
 *
 * A growth of a heap (the alloc hook, chunk.c) predicts the size of the
 * next one from jemalloc's growth series and queues the heap's reserve;
 * one thread for the process makes the chunks, registering them off every
 * allocating thread, and chunk.c parks them until the hook asks for
 * exactly that size.  Everything here is under the chunk lock, which the
 * thread also waits on; it is never held across the thread's verbs calls.
 * A ready chunk is pinned memory nobody uses: the thread drops it when its
 * heap has not grown for the heap's decay time, or has given a chunk back.
 * When idle, the thread also ticks the heaps' decay (rdmalloc_reserve_set_tick),
 * with or without RDMALLOC_RESERVE: pinned memory freed by a program that
 * then goes quiet goes back after the decay time all the same.
 * The thread is started outside every lock (reserve.h says why), lazily:
 * a process that never pins memory never has it (a drop-in program that
 * does no RDMA stays single-threaded: unshare(2) and the like need it).
 * A fork child has no thread: nothing waits for one there, and a later
 * growth starts its own.
 */
#include "reserve.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "chunkset.h"
#include "counters.h"
#include "lock.h"
#include "log.h"
#include "options.h"
#include "os.h"
#include "tls.h"

#define RESERVE_STACK ((size_t)512 << 10)

/* 0 never wanted, 1 wanted (a growth happened), 2 started, 3 could not start */
atomic_int rdmalloc_reserve_thread_state;
static struct rdmalloc_reserve *reserves;          /* listed: heaps that grew */
static struct rdmalloc_reserve *queue, *queue_last; /* waiting for the thread, in order */
static unsigned fills;                              /* chunks being made or dropped */
static struct rdmalloc_reserve *working;            /* what fills counts (one at most), listed or not */
static uint64_t (*tick_fn)(void);                 /* the heap layer's decay tick */
static uint64_t tick_at;                           /* when it runs next (UINT64_MAX: never) */
static unsigned tick_asks;                         /* rdmalloc_reserve_want_tick() calls */
static int forking; /* fork() is under way: the thread starts no work (rdmalloc_reserves_fork_prepare) */
static unsigned relieving; /* allocations between a relief and their retry: no fill starts */

/* jemalloc's page size classes: multiples of the page up to 4 pages, then
 * 4 per doubling.  The class below or at @s (@up 0) or the next one above
 * it (@up 1). */
static size_t page_class(size_t s, int up)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), step = page;
	if (s >= 4 * page) {
		size_t group = (size_t)1 << (63 - __builtin_clzll((unsigned long long)s));
		step = group / 4;
	}
	return (s / step + (size_t)up) * step;
}

size_t rdmalloc_reserve_next_size(size_t last, size_t limit)
{
	size_t next = page_class(last, 1);
	if (limit) {
		size_t cap = page_class(limit, 0);
		if (cap && next > cap)
			next = cap;
	}
	return next;
}

/* Chunk lock held. */
static void enqueue(struct rdmalloc_reserve *r)
{
	if (r->queued)
		return;
	r->queued = 1;
	r->queue_next = NULL;
	if (queue_last)
		queue_last->queue_next = r;
	else
		queue = r;
	queue_last = r;
}

/* Chunk lock held. */
static struct rdmalloc_reserve *dequeue(void)
{
	struct rdmalloc_reserve *r = queue;
	if (r) {
		queue = r->queue_next;
		if (!queue)
			queue_last = NULL;
		r->queue_next = NULL;
		r->queued = 0;
	}
	return r;
}

/* Take @r off the queue and the list (chunk lock held). */
static void unlist(struct rdmalloc_reserve *r)
{
	struct rdmalloc_reserve *q = queue, *prev = NULL;
	for (; q && q != r; prev = q, q = q->queue_next)
		;
	if (q) {
		if (prev)
			prev->queue_next = r->queue_next;
		else
			queue = r->queue_next;
		if (queue_last == r)
			queue_last = prev;
		r->queued = 0;
	}
	struct rdmalloc_reserve **p = &reserves;
	while (*p && *p != r)
		p = &(*p)->list_next;
	if (*p)
		*p = r->list_next;
	r->listed = 0;
}

void rdmalloc_reserve_want_tick(const struct rdmalloc_chunk_spec *spec)
{
	if (spec->decay_ms < 0)
		return; /* nothing of it ever decays */
	tick_asks++;
	if (tick_at == UINT64_MAX) {
		tick_at = 0;
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* it may wait with no deadline */
	}
	int none = 0;
	atomic_compare_exchange_strong(&rdmalloc_reserve_thread_state, &none, 1);
}

void rdmalloc_reserve_grown(struct rdmalloc_chunk_spec *spec, struct rdmalloc_heap *heap, size_t size)
{
	struct rdmalloc_reserve *r = &spec->reserve;
	rdmalloc_reserve_want_tick(spec);
	if (!rdmalloc_opts.reserve || r->closed)
		return;
	if (!r->listed) {
		r->spec = spec;
		r->heap = heap;
		r->listed = 1;
		r->list_next = reserves;
		reserves = r;
	}
	r->grown_ns = rdmalloc_now_ns();
	size_t next = rdmalloc_reserve_next_size(size, spec->grow_limit);
	size_t held = atomic_load_explicit(&spec->bytes, memory_order_relaxed) - (r->ready ? r->ready->map_size : 0);
	if (next > held / RDMALLOC_RESERVE_SHARE && next > RDMALLOC_RESERVE_FLOOR)
		next = 0;
	r->next = next;
	if (r->ready ? r->ready->size == next : !next)
		return; /* the series stays at its limit: the one ready is next; or nothing to do */
	enqueue(r);
	int none = 0;
	atomic_compare_exchange_strong(&rdmalloc_reserve_thread_state, &none, 1);
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

void rdmalloc_reserve_shrunk(struct rdmalloc_reserve *r)
{
	r->grown_ns = 0;
	if (r->ready)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

/* When @r's ready chunk goes for want of use (UINT64_MAX: never; 0: now).
 * Chunk lock held. */
static uint64_t idle_deadline(const struct rdmalloc_reserve *r)
{
	if (!r->ready || r->closed || r->filling || r->spec->decay_ms < 0)
		return UINT64_MAX;
	return r->grown_ns ? r->grown_ns + (uint64_t)r->spec->decay_ms * 1000000u : 0;
}

/* The thread's work on @r, a fill of @size bytes or a drop (SIZE_MAX),
 * starts and ends (chunk lock held). */
static void work_started(struct rdmalloc_reserve *r, size_t size)
{
	r->filling = size;
	fills++;
	working = r;
}

static void work_ended(struct rdmalloc_reserve *r)
{
	r->filling = 0;
	fills--;
	working = NULL;
	r->late = 0;
}

void rdmalloc_reserve_late_locked(struct rdmalloc_reserve *r)
{
	r->cancelled = 1;
	if (r->filling && !r->late) {
		r->late = 1;
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* other growths waiting for it go on */
	}
}

/* Drop @r's ready chunk (chunk lock held; released meanwhile): marked as
 * work under way, so that a close or a fork waits for it. */
static void drop_ready(struct rdmalloc_reserve *r)
{
	work_started(r, SIZE_MAX);
	rdmalloc_chunk_unlock();
	rdmalloc_chunk_drop_reserve(r, NULL);
	rdmalloc_chunk_lock();
	work_ended(r);
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

void rdmalloc_reserve_set_tick(uint64_t (*tick)(void))
{
	tick_fn = tick;
}

/* The thread, when the queue is empty: drop the ready chunks that are idle
 * or whose heap shrank, tick the decay when due, else wait for work or
 * for the next of them.  Chunk lock held. */
static void idle(void)
{
	uint64_t now = rdmalloc_now_ns();
	if (tick_fn && tick_at <= now) {
		unsigned asks = tick_asks;
		rdmalloc_chunk_unlock();
		uint64_t delay = tick_fn();
		rdmalloc_chunk_lock();
		/* A heap that came meanwhile may have been missed: at once. */
		tick_at = delay ? rdmalloc_now_ns() + delay : asks != tick_asks ? 0 : UINT64_MAX;
		return; /* work may have come meanwhile */
	}
	uint64_t first = tick_at;
	for (struct rdmalloc_reserve *r = reserves; r; r = r->list_next) {
		uint64_t when = idle_deadline(r);
		if (when <= now) {
			drop_ready(r);
			return; /* the list may have changed meanwhile: look again */
		}
		if (when < first)
			first = when;
	}
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* settled (rdmalloc_reserves_settle) */
	if (first == UINT64_MAX)
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	else
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_CHUNK, first);
}

static void *registrar(void *arg)
{
	(void)arg;
	/* What it allocates (libibverbs, inside ibv_reg_mr) must never grow a
	 * heap it serves: marked as a hook is, the drop-in serves it from its
	 * nest (preload/nest.c). */
	rdmalloc_tl_in_verbs += RDMALLOC_TL_IN_HOOK;
	pthread_setname_np(pthread_self(), "rdmalloc-reserv"); /* 15 characters: the kernel's limit */
	rdmalloc_chunk_lock();
	for (;;) {
		if (forking || relieving) {
			rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
			rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
			continue;
		}
		struct rdmalloc_reserve *r = dequeue();
		if (!r) {
			idle();
			continue;
		}
		size_t size = r->next;
		if (r->closed || (r->ready && r->ready->size == size))
			continue;
		if (!size) { /* over the cap: the one ready was mispredicted */
			if (r->ready)
				drop_ready(r);
			continue;
		}
		int stale = r->ready != NULL; /* mispredicted: it goes */
		work_started(r, size);
		r->fill_seq++;
		r->cancelled = 0;
		rdmalloc_chunk_unlock();
		if (stale)
			rdmalloc_chunk_drop_reserve(r, NULL);
		int err = rdmalloc_chunk_fill_reserve(r, size);
		if (err) {
			STAT_INC(reserve_skipped);
			rdmalloc_log_once(RDMALLOC_LOG_WARN, "a %zu-byte reserve chunk could not be made (%s): the "
					  "heap's next growth registers inline (further ones are only counted "
					  "in reserve_skipped)", size, rdmalloc_strerror(err));
		}
		rdmalloc_chunk_lock();
		work_ended(r);
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* close and drop may wait for it */
	}
	return NULL;
}

void rdmalloc_reserve_start(void)
{
	if (rdmalloc_os_threads_fork_coming())
		return; /* still wanted: asked again after the fork (os.h) */
	int wanted = 1;
	if (!atomic_compare_exchange_strong(&rdmalloc_reserve_thread_state, &wanted, 2))
		return;
	unsigned n;
	int err = rdmalloc_os_start_threads(registrar, 1, RESERVE_STACK, &n);
	if (err == EINTR) { /* put off (os.h): asked again by a later allocation */
		atomic_store(&rdmalloc_reserve_thread_state, 1); /* no lock: the fork holds ours */
		return;
	}
	if (err) {
		atomic_store(&rdmalloc_reserve_thread_state, 3);
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "cannot start the reserve's registration thread (%s): every "
				  "chunk is registered by the allocation that needs it (counted in "
				  "inline_chunks), and idle memory decays only as the heaps are used",
				  rdmalloc_strerror(err));
	}
}

static unsigned closes_waiting; /* closes waiting for their reserve's thread (tests) */

/* No work of the thread's on @r under way: a fill, or a drop (the
 * thread's or a relief's).  Chunk lock held (released meanwhile). */
static void wait_idle(struct rdmalloc_reserve *r)
{
	if (!r->filling && !r->dropping)
		return;
	closes_waiting++;
	while (r->filling || r->dropping)
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	closes_waiting--;
}

void rdmalloc_reserve_close(struct rdmalloc_reserve *r)
{
	/* Listed until nothing of it is under way: a fork meanwhile (none of
	 * our locks is held) has the child forget that work as it forgets
	 * every listed reserve's (rdmalloc_reserves_forget). */
	rdmalloc_chunk_lock();
	r->closed = 1;
	wait_idle(r);
	rdmalloc_chunk_unlock();
	rdmalloc_chunk_drop_reserve(r, NULL);
	rdmalloc_chunk_lock();
	wait_idle(r); /* a relief's drop of the same chunk */
	unlist(r);
	rdmalloc_chunk_unlock();
}

int rdmalloc_reserve_closed(struct rdmalloc_reserve *r)
{
	rdmalloc_chunk_lock();
	int closed = r->closed && !r->listed && !r->filling && !r->dropping && !r->ready;
	rdmalloc_chunk_unlock();
	return closed;
}

void rdmalloc_reserve_reopen(struct rdmalloc_reserve *r)
{
	rdmalloc_chunk_lock();
	r->closed = 0; /* listed again by the heap's next growth */
	rdmalloc_chunk_unlock();
}

void rdmalloc_reserve_fork_child_reopen(struct rdmalloc_reserve *r)
{
	r->closed = 0;
}

RDMALLOC_TESTABLE unsigned rdmalloc_reserve_closes_waiting(void)
{
	rdmalloc_chunk_lock();
	unsigned n = closes_waiting;
	rdmalloc_chunk_unlock();
	return n;
}

RDMALLOC_TESTABLE uint64_t rdmalloc_fill_wait_ns = RDMALLOC_FILL_WAIT_NS;

int rdmalloc_fill_wait(uint64_t *deadline)
{
	uint64_t now = rdmalloc_now_ns();
	if (!*deadline)
		*deadline = now + rdmalloc_fill_wait_ns;
	else if (now >= *deadline)
		return 1;
	rdmalloc_lock_wait_until(RDMALLOC_LOCK_CHUNK, *deadline);
	return 0;
}

void rdmalloc_reserve_wait_timed_out(const char *what)
{
	STAT_INC(reserve_wait_timeouts);
	STAT_INC(fallbacks);
	rdmalloc_log_once(RDMALLOC_LOG_WARN, "an allocation stopped waiting for %s after %llu ms (its "
			  "ibv_reg_mr may wait for a lock the allocating thread holds) and went on without it "
			  "(further ones are only counted in reserve_wait_timeouts)",
			  what, (unsigned long long)(rdmalloc_fill_wait_ns / 1000000u));
}

size_t rdmalloc_reserves_drop(int wait)
{
	rdmalloc_chunk_lock();
	while (dequeue()) /* given up: the next growth asks again */
		;
	for (struct rdmalloc_reserve *r = reserves; r; r = r->list_next)
		r->cancelled |= r->filling != 0;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* a growth waiting for a cancelled fill goes on */
	int late = 0;
	if (wait && working && !working->late) {
		uint64_t deadline = 0;
		while (working && !working->late && !(late = rdmalloc_fill_wait(&deadline)))
			;
		if (late && working) /* listed or not: a closing heap's too */
			rdmalloc_reserve_late_locked(working);
	}
	size_t bytes = 0;
	int skipped = 0; /* then busy ready chunks are passed by */
	for (;;) {
		struct rdmalloc_reserve *r = reserves;
		while (r && (!r->ready || (skipped && r->ready->busy)))
			r = r->list_next;
		rdmalloc_chunk_unlock();
		if (late) {
			rdmalloc_reserve_wait_timed_out("the reserve's registration thread to drop its chunks");
			late = 0;
		}
		if (!r)
			return bytes;
		int skip = 0;
		bytes += rdmalloc_chunk_drop_reserve(r, &skip);
		if (skip == 2)
			rdmalloc_reserve_wait_timed_out("a reserve chunk an attach or a detach works on");
		skipped |= skip;
		rdmalloc_chunk_lock();
	}
}

void rdmalloc_reserves_hold_off_locked(void)
{
	relieving++;
}

void rdmalloc_reserves_resume_locked(void)
{
	if (--relieving == 0)
		rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
}

void rdmalloc_reserves_settle(void)
{
	rdmalloc_chunk_lock();
	/* Timed: a start put off for a fork turns state 2 back to 1 without
	 * our lock (rdmalloc_reserve_start). */
	while (fills || (queue && atomic_load(&rdmalloc_reserve_thread_state) == 2))
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_CHUNK, rdmalloc_now_ns() + 10000000u);
	rdmalloc_chunk_unlock();
}

void rdmalloc_reserves_fork_coming(void)
{
	rdmalloc_chunk_lock();
	forking = 1;
	rdmalloc_chunk_unlock();
}

unsigned rdmalloc_reserves_fork_prepare(uint64_t deadline_ns)
{
	rdmalloc_chunk_lock();
	forking = 1;
	while (fills && rdmalloc_now_ns() < deadline_ns)
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_CHUNK, deadline_ns);
	unsigned left = fills;
	rdmalloc_chunk_unlock();
	return left;
}

void rdmalloc_reserves_fork_parent(void)
{
	rdmalloc_chunk_lock();
	forking = 0;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK);
	rdmalloc_chunk_unlock();
}

size_t rdmalloc_reserves_forget(void)
{
	forking = 0;
	relieving = 0; /* the forking thread was not relieving: other threads' reliefs are not the child's */
	tick_at = 0; /* the child's thread, if it starts one, ticks at once */
	size_t held = 0;
	for (struct rdmalloc_reserve *r = reserves; r; r = r->list_next) {
		held += r->fill_held;
		r->fill_held = 0;
		/* A fork that stopped waiting (fork.h): left mapped, the
		 * parent's registrations may cover them. */
		for (struct rdmalloc_chunk *c = r->dropping, *next; c; c = next) {
			next = c->next;
			c->next = NULL;
			if (c->held)
				held += c->map_size;
			if (c->state == RDMALLOC_CHUNK_RESERVED) /* parked: counted as held (not a discarded fill) */
				rdmalloc_count_held(c, -1);
		}
		r->dropping = NULL;
		if (r->filling) { /* made again when the child grows */
			r->filling = 0;
			r->next = 0;
		}
		r->late = 0;
	}
	fills = 0;
	working = NULL;
	closes_waiting = 0;
	int state = atomic_load(&rdmalloc_reserve_thread_state);
	atomic_store(&rdmalloc_reserve_thread_state, state == 2 ? (queue ? 1 : 0) : state);
	return held;
}
