/* SPDX-License-Identifier: MIT */
/*
 * big.c - blocks of RDMALLOC_BIG_BLOCK bytes or more, each a chunk of its
 * own (big.h; doc/design.md, "Big blocks").
 *
 * Why: a registration covers a whole chunk, so in a chunk shared by many
 * blocks one live block keeps all of it pinned.  Most of the pinned bytes
 * of a program are in its big blocks; a chunk each makes pinned memory
 * follow live memory at the grain of the block (a page), and the keys of
 * a big block reach that block only.
 *
 * Why keep freed ones: registering costs far more than allocating, and
 * programs free and allocate buffers of the same sizes again and again.
 * A freed big block's chunk stays, registered, for its heap's decay time,
 * and serves a later block of its size or a little smaller (at most an
 * eighth larger than asked: bounded waste).  What is kept is bounded too:
 * an eighth of the heap's big bytes in use, but always the most recently
 * freed one, so that a buffer freed and allocated again is never
 * registered twice.  A trim releases all of it.
 *
 * The BIG lock (a leaf) guards every heap's list; chunks are made and
 * released outside it.  A block is free once its chunk is on the list
 * (owner_word: when it was freed, never 0): a second free of it aborts.
 */
#include "big.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "counters.h"
#include "freed.h"
#include "heap.h"
#include "lock.h"
#include "log.h"
#include "options.h"
#include "os.h"
#include "verbs.h"

#define PAGE ((size_t)4096)

size_t rdmalloc_big_min = SIZE_MAX;

void rdmalloc_big_init(void)
{
	rdmalloc_big_min = rdmalloc_opts.big_block ? rdmalloc_opts.big_block : SIZE_MAX;
}

/* Take @c off @k (BIG lock held). */
static void unlist(struct rdmalloc_big_cache *k, struct rdmalloc_chunk *c)
{
	if (c->owner_prev)
		c->owner_prev->owner_next = c->owner_next;
	else
		k->head = c->owner_next;
	if (c->owner_next)
		c->owner_next->owner_prev = c->owner_prev;
	else
		k->tail = c->owner_prev;
	c->owner_next = c->owner_prev = NULL;
	c->owner_word = 0;
	k->bytes -= c->size;
}

/* The kept chunk that serves @need bytes at @align best: the smallest at
 * least that large and at most an eighth larger.  Off the list, in use.
 * BIG lock held. */
static struct rdmalloc_chunk *take(struct rdmalloc_big_cache *k, size_t need, size_t align)
{
	struct rdmalloc_chunk *best = NULL;
	size_t most = need + need / 8;
	for (struct rdmalloc_chunk *c = k->head; c; c = c->owner_next) {
		if (c->size < need || c->size > most || (align && (c->base & (align - 1))))
			continue;
		if (!best || c->size < best->size)
			best = c;
		if (c->size == need)
			break;
	}
	if (best) {
		unlist(k, best);
		k->in_use += best->size;
		k->blocks++;
	}
	return best;
}

/* The bytes @k may keep: an eighth of those in use (the newest is kept
 * whatever its size, until its decay time). */
static size_t bound(const struct rdmalloc_big_cache *k)
{
	return k->in_use / 8;
}

/*
 * Take off @k, onto *@out (through owner_next), what must go at @now: the
 * oldest past @decay_ms (-1: never), and the oldest past the bound but the
 * newest; with @all, everything.  BIG lock held.
 */
static void choose(struct rdmalloc_big_cache *k, uint64_t now, long decay_ms, int all,
		   struct rdmalloc_chunk **out)
{
	uint64_t decay_ns = decay_ms < 0 ? UINT64_MAX : (uint64_t)decay_ms * 1000000u;
	while (k->tail) {
		struct rdmalloc_chunk *c = k->tail;
		int old = now - c->owner_word >= decay_ns;
		int over = c != k->head && k->bytes > bound(k);
		if (!all && !old && !over)
			break;
		k->window_churn += over && !old && !all;
		unlist(k, c);
		STAT_SUB(big_cached_bytes, c->size);
		c->owner_next = *out;
		*out = c;
	}
}

/* Put @c back on @k, as recently freed (BIG lock held). */
static void keep(struct rdmalloc_big_cache *k, struct rdmalloc_chunk *c, uint64_t now)
{
	c->owner_word = now ? now : 1;
	c->owner_prev = NULL;
	c->owner_next = k->head;
	if (k->head)
		k->head->owner_prev = c;
	else
		k->tail = c;
	k->head = c;
	k->bytes += c->size;
}

/* Release the chunks chained on @list: those pinned (an elided region or a
 * window on freed memory) are kept until they are not.  No lock of ours
 * held (the decay tick, a trim: the heap marked as theirs); in a section,
 * as a chunk is made (rdmalloc_big_alloc). */
static size_t release(struct rdmalloc_chunk *list, uint64_t now)
{
	if (!list)
		return 0;
	size_t bytes = 0;
	int cancel;
	rdmalloc_verbs_section_begin(&cancel);
	while (list) {
		struct rdmalloc_chunk *c = list;
		list = c->owner_next;
		c->owner_next = NULL;
		size_t size = c->size;
		struct rdmalloc_heap *h = c->heap;
		if (rdmalloc_chunk_release_big(c) == EBUSY) {
			rdmalloc_lock(RDMALLOC_LOCK_BIG);
			keep(rdmalloc_heap_big(h), c, now);
			rdmalloc_unlock(RDMALLOC_LOCK_BIG);
			STAT_ADD(big_cached_bytes, size);
			continue;
		}
		bytes += size;
	}
	rdmalloc_verbs_section_end(cancel);
	return bytes;
}

/* A big block's chunk registers (or, kept, registers again for a fork
 * child's PDs) outside every lock fork() takes: that is a section, so that
 * no fork happens in the middle (verbs.h).  A kept chunk is in step with
 * its heap's PDs and access but while a walk (an attach, a detach, an
 * access change) is at work on it; a hit on it takes no section, no global
 * lock and no wait for a fork, and only a chunk out of step takes the PD
 * lock to wait for the walk (rdmalloc_chunk_resync). */
void *rdmalloc_big_alloc(struct rdmalloc_heap *h, size_t size, size_t align, int zero)
{
	if (size > SIZE_MAX - PAGE) {
		errno = ENOMEM;
		return NULL;
	}
	size_t need = align_up(size ? size : 1, PAGE);
	struct rdmalloc_big_cache *k = rdmalloc_heap_big(h);
	rdmalloc_lock(RDMALLOC_LOCK_BIG);
	struct rdmalloc_chunk *c = take(k, need, align);
	int suspend = 0;
	if (++k->window == RDMALLOC_BIG_WINDOW) {
		k->churned = k->window_churn > RDMALLOC_BIG_WINDOW / 2 ? k->churned + 1 : 0;
		suspend = k->churned == RDMALLOC_BIG_WINDOWS;
		if (suspend)
			k->churned = 0;
		k->window = k->window_churn = 0;
	}
	rdmalloc_unlock(RDMALLOC_LOCK_BIG);
	if (suspend) {
		atomic_store_explicit(&k->suspended, RDMALLOC_BIG_SUSPEND, memory_order_relaxed);
		STAT_INC(big_suspensions);
		rdmalloc_log_once(RDMALLOC_LOG_INFO, "big blocks of sizes that seldom repeat: over %u of them, more than "
				  "half as many freed ones were released unused, so the heap's next %u go to "
				  "jemalloc's chunks (each time counted in big_suspensions)",
				  RDMALLOC_BIG_WINDOW * RDMALLOC_BIG_WINDOWS, RDMALLOC_BIG_SUSPEND);
	}
	if (c) {
		STAT_SUB(big_cached_bytes, c->size);
		/* After a fork, the child's PDs: registered again here. */
		if (rdmalloc_chunk_resync(c)) {
			rdmalloc_lock(RDMALLOC_LOCK_BIG);
			k->in_use -= c->size;
			k->blocks--;
			rdmalloc_unlock(RDMALLOC_LOCK_BIG);
			release(c, 0);
			c = NULL;
		} else {
			STAT_INC(big_cache_hits);
			if (zero)
				memset((void *)c->base, 0, c->size);
		}
	}
	if (!c) {
		int cancel;
		rdmalloc_verbs_section_begin(&cancel);
		c = rdmalloc_chunk_create_big(h, rdmalloc_heap_spec(h), need, align);
		rdmalloc_verbs_section_end(cancel);
		if (!c) {
			errno = ENOMEM;
			return NULL;
		}
		rdmalloc_lock(RDMALLOC_LOCK_BIG);
		k->in_use += c->size;
		k->blocks++;
		rdmalloc_unlock(RDMALLOC_LOCK_BIG);
	}
	STAT_INC(big_blocks);
	STAT_ADD(big_bytes, c->size);
	return (void *)c->base;
}

void rdmalloc_big_free(struct rdmalloc_chunk *c, const void *p, const char *who)
{
	if ((uintptr_t)p != c->base)
		rdmalloc_fatal("%s(%p): inside a block of rdmalloc's (at %p), not at its start", who, p,
			       (void *)c->base);
	struct rdmalloc_heap *h = c->heap;
	struct rdmalloc_big_cache *k = rdmalloc_heap_big(h);
	size_t size = c->size; /* once on the list, another thread may release @c */
	uint64_t now = rdmalloc_now_ns();
	struct rdmalloc_chunk *out = NULL;
	rdmalloc_lock(RDMALLOC_LOCK_BIG);
	if (c->owner_word) {
		rdmalloc_unlock(RDMALLOC_LOCK_BIG);
		rdmalloc_freed_abort(who, p);
	}
	k->in_use -= c->size;
	k->blocks--;
	keep(k, c, now);
	choose(k, now, rdmalloc_heap_decay_ms(h), 0, &out);
	rdmalloc_unlock(RDMALLOC_LOCK_BIG);
	STAT_SUB(big_blocks, 1);
	STAT_SUB(big_bytes, size);
	STAT_ADD(big_cached_bytes, size);
	int saved = errno; /* free() leaves it alone; deregistering may not */
	release(out, now);
	errno = saved;
}

void rdmalloc_big_check_live(const struct rdmalloc_chunk *c, const void *p, const char *who)
{
	if ((uintptr_t)p != c->base)
		rdmalloc_fatal("%s(%p): inside a block of rdmalloc's (at %p), not at its start", who, p,
			       (void *)c->base);
	rdmalloc_lock(RDMALLOC_LOCK_BIG);
	int freed = c->owner_word != 0;
	rdmalloc_unlock(RDMALLOC_LOCK_BIG);
	if (freed)
		rdmalloc_freed_abort(who, p);
}

void *rdmalloc_big_realloc(struct rdmalloc_chunk *c, void *p, size_t size,
			   void *(*small)(struct rdmalloc_heap *h, size_t size), const char *who)
{
	/* A freed block is on its heap's list: neither kept nor copied from
	 * (another thread may hold it already). */
	rdmalloc_big_check_live(c, p, who);
	int big = rdmalloc_big_wanted(c->heap, size, 0);
	if (size <= c->size && size > c->size / 2 && big)
		return p;
	big = big && rdmalloc_big_admit(rdmalloc_heap_big(c->heap));
	void *q = big ? rdmalloc_big_alloc(c->heap, size, 0, 0) : small(c->heap, size);
	if (!q)
		return NULL;
	memcpy(q, p, size < c->size ? size : c->size);
	rdmalloc_big_free(c, p, who);
	return q;
}

size_t rdmalloc_big_decay(struct rdmalloc_heap *h, uint64_t now_ns, int all)
{
	struct rdmalloc_chunk *out = NULL;
	rdmalloc_lock(RDMALLOC_LOCK_BIG);
	choose(rdmalloc_heap_big(h), now_ns, rdmalloc_heap_decay_ms(h), all, &out);
	rdmalloc_unlock(RDMALLOC_LOCK_BIG);
	return release(out, now_ns);
}

void rdmalloc_big_forget(struct rdmalloc_heap *h)
{
	rdmalloc_lock(RDMALLOC_LOCK_BIG);
	struct rdmalloc_big_cache *k = rdmalloc_heap_big(h);
	STAT_SUB(big_cached_bytes, k->bytes);
	STAT_SUB(big_bytes, k->in_use);
	STAT_SUB(big_blocks, k->blocks);
	*k = (struct rdmalloc_big_cache){ 0 };
	rdmalloc_unlock(RDMALLOC_LOCK_BIG);
}
