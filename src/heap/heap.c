/* SPDX-License-Identifier: MIT */
/*
 * heap.c - heaps: one jemalloc arena each (the LD_PRELOAD drop-in's heap
 * may have more, rdmalloc_heap_add_arenas), with our extent hooks, one set
 * of access flags, and one explicit thread cache per thread.
 *
 * Why explicit caches: jemalloc's automatic thread cache is shared by all
 * arenas, so memory freed from heap A could be handed out by a malloc of
 * heap B.  Each thread gets a cache of its own per heap (tcache.create),
 * used for allocations and frees of that heap only.  When jemalloc has no
 * cache left to give (about 4093), the thread runs that heap uncached
 * (logged once, counted in tcache_fallbacks).
 *
 * A cache id belongs to one heap generation (tc_owner); whoever destroys it
 * (the heap's destruction or the thread's exit) checks and clears that under
 * tc_mutex, so no id is destroyed twice or after reuse.  An ending thread
 * makes no cache (one made in glibc's last round of key destructors would
 * never be destroyed): it runs uncached.
 *
 * Idle caches are flushed.  A cached block keeps its chunk registered, and
 * jemalloc collects a cache's garbage only while its thread allocates: a
 * thread that went quiet after a burst would keep a chunk pinned for every
 * block its cache holds.  The background tick (heaps_tick) flushes the
 * cache of a thread that has not used a heap for the heap's decay time.  The
 * owner brackets every use of its cache (cache_enter/cache_leave: an odd
 * sequence number while inside, then a check of the flush flag: plain
 * stores and a compiler barrier); the tick raises the flag, makes every
 * thread pass a full barrier (membarrier(2)), and flushes only a cache whose
 * number is even and unchanged since it last looked.  Either the owner sees
 * the flag and waits, or the tick sees it inside and leaves the cache.
 */
#include "heap.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "big.h"
#include "calls.h"
#include "chunk.h"
#include "chunkset.h"
#include "fault.h"
#include "hooks.h"
#include "jemalloc.h"
#include "lock.h"
#include "log.h"
#include "nocancel.h"
#include "options.h"
#include "freed.h"
#include "os.h"
#include "addrmap.h"
#include "counters.h"
#include "tls.h"

struct rdmalloc_heap {
	extent_hooks_t hooks; /* first: a hook's self pointer is its heap */
	struct rdmalloc_chunk_spec spec; /* access (rdma_heap_set_access, PD lock) and flags */
	unsigned index; /* in heaps[] and heap_store[] */
	long decay_ms;  /* jemalloc's dirty_decay_ms of its arenas (-1: never) */
	uint32_t gen; /* unique per heap lifetime, never 0 */
	_Atomic int auto_tcache; /* RDMALLOC_HEAP_AUTO_CACHE */
	int check_frees; /* freed.h: every heap of the API; the drop-in's with RDMALLOC_HEAP_CHECK_FREES */
	/* arenas[0] from creation (mallocx's arena); more from
	 * rdmalloc_heap_add_arenas (heap_mutex) */
	_Atomic unsigned narenas;
	unsigned arenas[RDMALLOC_HEAP_MAX_ARENAS];
	struct rdmalloc_big_cache big; /* big.c's (its lock) */
	int destroying; /* a destroy is under way (HEAP lock): another is refused */
	int purging;    /* a tick or a trim works on its arenas (HEAP lock; purge_take) */
	int purge_lost; /* a fork child's: the fork went ahead of such work (never destroyed) */
};

#define TC_MAX 4096

static _Atomic(struct rdmalloc_heap *) heaps[RDMA_MALLOC_MAX_HEAPS];
/* Heap structs live here, one per index of heaps[], and are never unmapped: a stale
 * handle (a heap destroyed twice) reads valid memory and is refused while
 * its index stays free. */
static struct rdmalloc_heap heap_store[RDMA_MALLOC_MAX_HEAPS];

/* Is @h the start of one of heap_store's entries? */
static int in_store(const struct rdmalloc_heap *h)
{
	uintptr_t off = (uintptr_t)h - (uintptr_t)heap_store;
	return (uintptr_t)h >= (uintptr_t)heap_store && off < sizeof(heap_store) && off % sizeof(*h) == 0;
}
static struct rdmalloc_heap *default_heap;
static uint32_t gen_counter;

static uint32_t tc_owner[TC_MAX];
static pthread_key_t tc_key;

/* What a cache's owner and the tick share. */
struct tc_sync {
	_Atomic unsigned seq; /* odd while the owner uses the cache */
	_Atomic int flush;    /* the tick is flushing it: the owner waits */
};
/* Per cache id, in the library's memory, never in the owner's TLS: a
 * thread's TLS goes with its stack, and a cache made in glibc's last round
 * of key destructors outlives its thread (thread_exit never sees it). */
static struct {
	_Alignas(64) struct tc_sync s;
} tc_sync[TC_MAX];

struct tl_cache {
	uint32_t gen;
	int tcflag;	     /* MALLOCX_TCACHE(id) or MALLOCX_TCACHE_NONE */
	struct tc_sync *sync; /* tc_sync[id], or tl_none */
};
static RDMALLOC_TLS struct tl_cache tl[RDMA_MALLOC_MAX_HEAPS];
static unsigned purges;    /* heaps a tick or a trim works on (HEAP lock; purge_take) */
static unsigned purges_stopped; /* forks coming: no tick or trim starts (HEAP lock); a count,
				  * as two forks may have stopped them and one end */
/* The thread's uncached uses: no tick ever reads it. */
static RDMALLOC_TLS struct tc_sync tl_none;
/* thread_exit has run: the thread ends, and a cache made now would never
 * be destroyed (glibc runs key destructors a bounded number of rounds). */
static RDMALLOC_TLS int tl_exited;

/* Per cache id, under tc_mutex: whether a thread's cache has it, and its
 * heap's decay time (-1: never flushed); the tick's own view of it. */
static struct {
	int live; /* the id is a thread's cache of a heap */
	long decay_ms;
	unsigned seen;     /* seq at the tick that last saw it change */
	uint64_t since_ns; /* when */
	int flushed;       /* flushed since: nothing more to do */
} tc_idle[TC_MAX];
static unsigned tc_top; /* ids below it may be in use */
static int tc_no_barrier; /* membarrier(2) failed: idle caches stay */

struct rdmalloc_heap *rdmalloc_heap_of_hooks(void *hooks)
{
	return (struct rdmalloc_heap *)hooks;
}

unsigned int rdmalloc_heap_access_of(const struct rdmalloc_heap *h)
{
	return rdmalloc_spec_access(&h->spec);
}

unsigned int rdmalloc_heap_implied_access(unsigned int flags, unsigned int access)
{
	if (flags & RDMA_HEAP_MW_BIND)
		access |= IBV_ACCESS_MW_BIND_;
	if (flags & RDMA_HEAP_ODP)
		access |= IBV_ACCESS_ON_DEMAND_;
	return access;
}

unsigned int rdmalloc_heap_flags_of(const struct rdmalloc_heap *h)
{
	return h->spec.flags;
}

struct rdmalloc_chunk_spec *rdmalloc_heap_spec(struct rdmalloc_heap *h)
{
	return &h->spec;
}

struct rdmalloc_big_cache *rdmalloc_heap_big(struct rdmalloc_heap *h)
{
	return &h->big;
}

int rdmalloc_heap_has_big(const struct rdmalloc_heap *h)
{
	return !h->spec.auto_cache && !rdmalloc_spec_odp(&h->spec);
}

long rdmalloc_heap_decay_ms(const struct rdmalloc_heap *h)
{
	return h->decay_ms;
}

RDMALLOC_TESTABLE void rdmalloc_heap_set_policy(struct rdmalloc_heap *h, int policy)
{
	h->spec.policy = policy;
}

void rdmalloc_heap_store_access(struct rdmalloc_heap *h, unsigned int access)
{
	atomic_store_explicit(&h->spec.access, access, memory_order_release);
}

void rdmalloc_heap_bump_key_gen(struct rdmalloc_heap *h)
{
	atomic_fetch_add_explicit(&h->spec.key_gen, 1, memory_order_release);
}

struct rdmalloc_heap *rdmalloc_heap_live(const rdma_heap_t *heap)
{
	const struct rdmalloc_heap *h = (const struct rdmalloc_heap *)heap;
	if (!h)
		return default_heap;
	if (!in_store(h) || atomic_load_explicit(&heaps[h->index], memory_order_acquire) != h)
		return NULL;
	return (struct rdmalloc_heap *)h;
}

unsigned rdmalloc_heap_arena(const struct rdmalloc_heap *h)
{
	return h->arenas[0];
}

struct rdmalloc_heap *rdmalloc_heap_get_default(void)
{
	return default_heap;
}

unsigned rdmalloc_heap_count(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++)
		n += atomic_load_explicit(&heaps[i], memory_order_relaxed) != NULL;
	return n;
}




uint64_t rdmalloc_heap_live_bytes(void)
{
	uint64_t epoch = 1, total = 0;
	size_t sz = sizeof(epoch);
	je_mallctl("epoch", &epoch, &sz, &epoch, sz);
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++) {
		struct rdmalloc_heap *h = atomic_load_explicit(&heaps[i], memory_order_relaxed);
		if (!h)
			continue;
		static const char *const parts[] = { "small.allocated", "large.allocated" };
		unsigned n = atomic_load_explicit(&h->narenas, memory_order_relaxed);
		for (unsigned i = 0; i < n; i++)
			for (size_t k = 0; k < ARRAY_SIZE(parts); k++) {
				char name[64];
				size_t v = 0;
				sz = sizeof(v);
				snprintf(name, sizeof(name), "stats.arenas.%u.%s", h->arenas[i], parts[k]);
				if (je_mallctl(name, &v, &sz, NULL, 0) == 0)
					total += v;
			}
	}
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	return total + atomic_load_explicit(&rdmalloc_counters.big_bytes, memory_order_relaxed);
}

/* The cache id in MALLOCX_TCACHE(id) (jemalloc encodes it as id + 2). */
static unsigned tcache_id(int tcflag)
{
	return (unsigned)((tcflag >> 8) - 2);
}

/* tc_mutex held. */
static void tcache_destroy_locked(unsigned tc)
{
	tc_owner[tc] = 0;
	tc_idle[tc].live = 0;
	if (je_mallctl("tcache.destroy", NULL, NULL, &tc, sizeof(tc)))
		rdmalloc_log(RDMALLOC_LOG_ERROR, "tcache.destroy(%u) failed", tc);
}

static void thread_exit(void *arg)
{
	(void)arg;
	rdmalloc_lock(RDMALLOC_LOCK_TCACHE);
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++) {
		struct tl_cache *t = &tl[i];
		if (t->gen && t->tcflag != MALLOCX_TCACHE_NONE) {
			unsigned tc = tcache_id(t->tcflag);
			if (tc < TC_MAX && tc_owner[tc] == t->gen)
				tcache_destroy_locked(tc);
		}
		t->gen = 0;
	}
	tl_exited = 1;
	rdmalloc_unlock(RDMALLOC_LOCK_TCACHE);
}

static int __attribute__((noinline)) tcache_slow(struct rdmalloc_heap *h, struct tl_cache *t)
{
	unsigned tc = 0;
	size_t sz = sizeof(tc);
	int flag = MALLOCX_TCACHE_NONE;
	t->sync = &tl_none;
	/* An ending thread (its exit handler has run, or jemalloc has cleaned
	 * it up) goes uncached: a cache made now might never be destroyed. */
	if (tl_exited || rdmalloc_tl_watch == RDMALLOC_TL_ENDED || rdmalloc_tl.bound == RDMALLOC_TL_ENDED) {
		t->gen = h->gen;
		t->tcflag = flag;
		return flag;
	}
	rdmalloc_lock(RDMALLOC_LOCK_TCACHE);
	if (je_mallctl("tcache.create", &tc, &sz, NULL, 0) == 0) {
		if (tc < TC_MAX) {
			tc_owner[tc] = h->gen;
			t->sync = &tc_sync[tc].s;
			tc_idle[tc].live = 1;
			tc_idle[tc].decay_ms = h->decay_ms;
			tc_idle[tc].seen = atomic_load_explicit(&t->sync->seq, memory_order_relaxed);
			tc_idle[tc].since_ns = rdmalloc_now_ns();
			tc_idle[tc].flushed = 0;
			if (tc >= tc_top)
				tc_top = tc + 1;
			flag = MALLOCX_TCACHE(tc);
		} else {
			je_mallctl("tcache.destroy", NULL, NULL, &tc, sizeof(tc));
		}
	}
	rdmalloc_unlock(RDMALLOC_LOCK_TCACHE);
	if (flag == MALLOCX_TCACHE_NONE) {
		STAT_INC(tcache_fallbacks);
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "no jemalloc thread cache left: this thread "
				  "allocates from heap %u uncached (slower; counted in tcache_fallbacks)",
				  h->index);
	} else {
		pthread_setspecific(tc_key, (void *)1);
	}
	t->gen = h->gen;
	t->tcflag = flag;
	return flag;
}

/* The tick is flushing @t's cache: step out, wait, step in again. */
static __attribute__((noinline)) void cache_wait(struct tc_sync *t)
{
	do {
		unsigned s = atomic_load_explicit(&t->seq, memory_order_relaxed);
		atomic_store_explicit(&t->seq, s + 1, memory_order_release);
		while (atomic_load_explicit(&t->flush, memory_order_acquire))
			sched_yield();
		atomic_store_explicit(&t->seq, s + 2, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
	} while (atomic_load_explicit(&t->flush, memory_order_acquire));
}

/* The calling thread's cache of @h, entered: its MALLOCX_TCACHE flag. */
static inline int cache_enter(struct rdmalloc_heap *h, struct tc_sync **sp)
{
	struct tl_cache *c = &tl[h->index];
	if (unlikely(c->gen != h->gen))
		tcache_slow(h, c);
	struct tc_sync *t = c->sync;
	*sp = t;
	unsigned s = atomic_load_explicit(&t->seq, memory_order_relaxed);
	atomic_store_explicit(&t->seq, s + 1, memory_order_relaxed);
	/* The tick's membarrier(2) orders this store before the load below
	 * on the CPU; the compiler must not reorder them either. */
	atomic_signal_fence(memory_order_seq_cst);
	if (unlikely(atomic_load_explicit(&t->flush, memory_order_acquire)))
		cache_wait(t);
	return c->tcflag;
}

static inline void cache_leave(struct tc_sync *t)
{
	unsigned s = atomic_load_explicit(&t->seq, memory_order_relaxed);
	atomic_store_explicit(&t->seq, s + 1, memory_order_release);
}

#ifdef RDMALLOC_MUTATION_SHARED_TCACHE /* test-only: jemalloc's shared cache */
#define cache_enter(h, sp) ((void)(h), *(sp) = &tl_none, 0)
#define cache_leave(t) ((void)(t))
#endif

void *rdmalloc_heap_mallocx_first(struct rdmalloc_heap *h, size_t size, int flags, int *ended)
{
	*ended = rdmalloc_tl_watch == RDMALLOC_TL_ENDED;
	if (*ended)
		return NULL;
	rdmalloc_heap_watch_thread();
	/* Cleaned up before it was watched (a thread that had only freed,
	 * or read the stats, until a late destructor), jemalloc ignores the
	 * arena asked for: the block's chunk tells.  Uncached: the thread's
	 * cache of @h is not made yet. */
	void *p = rdmalloc_mallocx(size, flags | MALLOCX_ARENA(h->arenas[0]) | MALLOCX_TCACHE_NONE);
	if (!p)
		return NULL; /* no verdict: asked again next time */
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(p);
	if (c && c->heap == h) {
		rdmalloc_tl_watch = 1;
		return h->check_frees ? rdmalloc_freed_clear(p) : p;
	}
	int e = errno;
	rdmalloc_dallocx(p, MALLOCX_TCACHE_NONE);
	errno = e;
	rdmalloc_tl_watch = RDMALLOC_TL_ENDED; /* the drop-in's binding tells it itself */
	*ended = 1;
	return NULL;
}

void *rdmalloc_heap_mallocx(struct rdmalloc_heap *h, size_t size, int flags)
{
	struct tc_sync *t;
	flags |= MALLOCX_ARENA(h->arenas[0]) | cache_enter(h, &t);
	void *p = rdmalloc_mallocx(size, flags);
	cache_leave(t);
	return h->check_frees ? rdmalloc_freed_clear(p) : p;
}

/* Abort if @p, a jemalloc block of chunk @c, is free already, where its
 * heap checks. */
static void check_live(const struct rdmalloc_chunk *c, const void *p, const char *who)
{
	if (c->heap->check_frees)
		rdmalloc_freed_check_in(c, p, who);
}

void *rdmalloc_heap_rallocx(const struct rdmalloc_chunk *c, void *p, size_t size, const char *who)
{
	struct rdmalloc_heap *h = c->heap;
	struct tc_sync *t;
	check_live(c, p, who);
	int tcflag = cache_enter(h, &t);
	int flags = MALLOCX_ARENA(h->arenas[0]) | tcflag;
	void *q = h->check_frees ? rdmalloc_freed_realloc(p, size, flags, tcflag, who) : rdmalloc_rallocx(p, size, flags);
	cache_leave(t);
	return q;
}

void rdmalloc_heap_check_live(const struct rdmalloc_chunk *c, const void *p, const char *who)
{
	if (c->big)
		rdmalloc_big_check_live(c, p, who);
	else
		check_live(c, p, who);
}

void rdmalloc_heap_dallocx(const struct rdmalloc_chunk *c, void *p, const char *who)
{
	struct rdmalloc_heap *h = c->heap;
	struct tc_sync *t;
	if (h->check_frees)
		rdmalloc_freed_mark_in(c, p, who);
	int flags = cache_enter(h, &t);
	rdmalloc_dallocx(p, flags);
	cache_leave(t);
}

void rdmalloc_heap_fork_child(void)
{
	/* jemalloc's arena_postfork_child rebuilds each arena's list of
	 * caches with the forking thread's automatic cache alone: an explicit
	 * cache made before the fork is off that list but keeps its links, so
	 * flushing or destroying it would write through them into the
	 * parent's other threads' caches (in TLS the child may have unmapped,
	 * or given to a new thread).  The child forgets every such cache, the
	 * others' and this thread's alike: they are never flushed or
	 * destroyed here (their ids and blocks are lost to the child), and
	 * this thread makes new ones at its next use. */
	memset(tc_owner, 0, sizeof(tc_owner));
	memset(tc_idle, 0, sizeof(tc_idle));
	tc_top = 0;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++) {
		tl[i].gen = 0;
		/* No destroy is under way here: the parent's thread in one
		 * is not the child's, and its heap is in the child's table. */
		struct rdmalloc_heap *h = atomic_load_explicit(&heaps[i], memory_order_relaxed);
		if (h) {
			h->destroying = 0;
			/* The fork went ahead of a purge of its arenas: jemalloc
			 * marks them as being purged for ever here, and would
			 * destroy them half purged (rdmalloc_heap_destroy). */
			h->purge_lost |= h->purging; /* a grandchild's too */
			h->purging = 0;
			rdmalloc_reserve_fork_child_reopen(&h->spec.reserve);
		}
	}
	tl_exited = 0; /* forked from a late destructor: the child's main thread */
	purges = 0;
	purges_stopped = 0;
}

RDMALLOC_TESTABLE unsigned rdmalloc_heap_live_caches(void)
{
	unsigned n = 0;
	rdmalloc_lock(RDMALLOC_LOCK_TCACHE);
	for (unsigned tc = 0; tc < tc_top; tc++)
		n += tc_idle[tc].live;
	rdmalloc_unlock(RDMALLOC_LOCK_TCACHE);
	return n;
}

/* A line to @fd, formatted; for the crash report below (no locks, no
 * allocation: snprintf and write). */
static void dump_line(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dump_line(int fd, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0)
		(void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* Racy reads on purpose (a dying process, no locks): not ThreadSanitizer's
 * business. */
__attribute__((no_sanitize("thread"))) RDMALLOC_TESTABLE void rdmalloc_heap_caches_dump(int fd)
{
	static const char *const slot_names[] = { "unknown", "a cache", "flushed", "a free id" };
	unsigned top = tc_top < TC_MAX ? tc_top : TC_MAX;
	dump_line(fd, "thread caches: ids below %u; this thread's:", top);
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++) {
		if (!tl[i].gen)
			continue;
		if (tl[i].tcflag == MALLOCX_TCACHE_NONE)
			dump_line(fd, " heap %u gen %u uncached;", i, tl[i].gen);
		else
			dump_line(fd, " heap %u gen %u id %u;", i, tl[i].gen, tcache_id(tl[i].tcflag));
	}
	dump_line(fd, "\n");
	for (unsigned tc = 0; tc < top; tc++) {
		void *v;
		int slot = rdmalloc_heap_je_cache_slot(tc, &v);
		int ours = tc_owner[tc] != 0 || tc_idle[tc].live;
		/* What the report is for: a cache of ours that jemalloc has as
		 * a free id, or the reverse; a cache whose first word (its
		 * tcache_slow) is zero. */
		int odd = slot != RDMALLOC_JE_SLOT_UNKNOWN && ours != (slot != RDMALLOC_JE_SLOT_FREE);
		void *head = slot == RDMALLOC_JE_SLOT_CACHE ? *(void *volatile *)v : NULL;
		int zeroed = slot == RDMALLOC_JE_SLOT_CACHE && !head;
		if (!ours && !odd && !zeroed)
			continue;
		dump_line(fd, "  id %u: owner gen %u, live %d, seq %u, flush %d; jemalloc: %s %p (first word %p)%s%s\n",
			  tc, tc_owner[tc], tc_idle[tc].live, atomic_load_explicit(&tc_sync[tc].s.seq, memory_order_relaxed),
			  atomic_load_explicit(&tc_sync[tc].s.flush, memory_order_relaxed), slot_names[slot], v, head,
			  odd ? "  <-- MISMATCH" : "", zeroed ? "  <-- ZEROED" : "");
	}
}

RDMALLOC_TESTABLE void rdmalloc_heap_flush_idle_caches(uint64_t now)
{
	if (tc_no_barrier)
		return;
	rdmalloc_lock(RDMALLOC_LOCK_TCACHE);
	unsigned want = 0;
	for (unsigned tc = 0; tc < tc_top; tc++) {
		struct tc_sync *t = &tc_sync[tc].s;
		if (!tc_idle[tc].live || tc_idle[tc].decay_ms < 0)
			continue;
		unsigned s = atomic_load_explicit(&t->seq, memory_order_relaxed);
		if (s != tc_idle[tc].seen) { /* used since: idle from now */
			tc_idle[tc].seen = s;
			tc_idle[tc].since_ns = now;
			tc_idle[tc].flushed = 0;
		} else if (!(s & 1) && !tc_idle[tc].flushed &&
			   now - tc_idle[tc].since_ns >= (uint64_t)tc_idle[tc].decay_ms * 1000000u) {
			atomic_store_explicit(&t->flush, 1, memory_order_relaxed);
			want++;
		}
	}
	if (want) {
		int e = rdmalloc_os_barrier_all_threads();
		if (e) {
			tc_no_barrier = 1;
			STAT_INC(fallbacks);
			rdmalloc_log_once(RDMALLOC_LOG_WARN, "membarrier(2): %s: the caches of idle threads "
					  "are not flushed (their blocks keep chunks registered)", rdmalloc_strerror(e));
		}
		for (unsigned tc = 0; tc < tc_top; tc++) {
			struct tc_sync *t = &tc_sync[tc].s;
			if (!tc_idle[tc].live || !atomic_load_explicit(&t->flush, memory_order_relaxed))
				continue;
			if (!e && atomic_load_explicit(&t->seq, memory_order_acquire) == tc_idle[tc].seen) {
				if (je_mallctl("tcache.flush", NULL, NULL, &tc, sizeof(tc)))
					rdmalloc_log(RDMALLOC_LOG_ERROR, "tcache.flush(%u) failed", tc);
				else
					STAT_INC(idle_cache_flushes);
				tc_idle[tc].flushed = 1;
			}
			atomic_store_explicit(&t->flush, 0, memory_order_release);
		}
	}
	rdmalloc_unlock(RDMALLOC_LOCK_TCACHE);
}

/*
 * The growth step of @h's arenas (0: jemalloc's series).  auto: 2 MiB
 * chunks where blocks of RDMALLOC_BIG_BLOCK or more are chunks of their own,
 * so that jemalloc's chunks hold only smaller blocks and a chunk is pinned
 * for little more than its live blocks; elsewhere (the drop-in's heap, ODP
 * heaps, no big blocks) 2 MiB chunks would strand most of a chunk beside
 * each block of 1-2 MiB: the series.  doc/design.md, "Why 2 MiB chunks".
 */
static size_t chunk_max_of(const struct rdmalloc_heap *h)
{
	size_t v = rdmalloc_opts.chunk_max;
	if (v != RDMALLOC_CHUNK_MAX_AUTO)
		return v;
	return rdmalloc_opts.big_block && rdmalloc_heap_has_big(h) ? RDMALLOC_CHUNK_SMALL : 0;
}

/* A new arena for @h, with its hooks and settings (heap_mutex held):
 * 0, or -1 when jemalloc has no arena left. */
static int arena_new(struct rdmalloc_heap *h, unsigned *arena)
{
	/* Created without hooks, then given ours: the arena's own metadata
	 * stays on plain mmap, only data extents come from our chunks (so a
	 * peer with an rkey can never reach the allocator's bookkeeping). */
	size_t sz = sizeof(*arena);
#ifdef RDMALLOC_MUTATION_METADATA_IN_CHUNKS /* test-only: metadata in registered chunks */
	extent_hooks_t *with_hooks = &h->hooks;
	if (je_mallctl("arenas.create", arena, &sz, &with_hooks, sizeof(with_hooks)))
#else
	if (je_mallctl("arenas.create", arena, &sz, NULL, 0))
#endif
		return -1;
	extent_hooks_t *hooks = &h->hooks;
	/* Pages idle for the decay time are decommitted (our hook gives a
	 * chunk back once all of it is; an ODP chunk's pages at once), never
	 * purged lazily first (muzzy 0: the hooks refuse purges); -1: never. */
	ssize_t dirty = h->decay_ms, muzzy = h->decay_ms < 0 ? -1 : 0;
#ifdef RDMALLOC_MUTATION_PURGE /* test-only: decommit freed pages at once */
	dirty = muzzy = 0;
#endif
	size_t grow = chunk_max_of(h);
	if (rdmalloc_arena_ctl(*arena, "extent_hooks", NULL, NULL, &hooks, sizeof(hooks)) ||
	    rdmalloc_arena_ctl(*arena, "dirty_decay_ms", NULL, NULL, &dirty, sizeof(dirty)) ||
	    rdmalloc_arena_ctl(*arena, "muzzy_decay_ms", NULL, NULL, &muzzy, sizeof(muzzy)))
		rdmalloc_fatal("configuring jemalloc arena %u failed", *arena);
	if (grow && rdmalloc_arena_ctl(*arena, "retain_grow_limit", NULL, NULL, &grow, sizeof(grow))) {
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "jemalloc refuses RDMALLOC_CHUNK_MAX=%zu; heaps "
				  "grow by jemalloc's default series", grow);
	} else {
		h->spec.grow_limit = grow; /* the reserve predicts the series it caps */
	}
	return 0;
}

int rdmalloc_heap_auto_tcache(const struct rdmalloc_heap *h)
{
	return atomic_load_explicit(&h->auto_tcache, memory_order_acquire);
}

unsigned rdmalloc_heap_add_arenas(struct rdmalloc_heap *h, unsigned n)
{
	if (n > RDMALLOC_HEAP_MAX_ARENAS)
		n = RDMALLOC_HEAP_MAX_ARENAS;
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	unsigned have = atomic_load_explicit(&h->narenas, memory_order_relaxed);
	while (have < n && arena_new(h, &h->arenas[have]) == 0)
		atomic_store_explicit(&h->narenas, ++have, memory_order_release);
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	return have;
}

unsigned rdmalloc_heap_arena_at(const struct rdmalloc_heap *h, unsigned i)
{
	return h->arenas[i];
}

static struct rdmalloc_heap *heap_new(unsigned int access, unsigned int flags, long decay_ms, int *err)
{
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	struct rdmalloc_heap *h = NULL;
	unsigned index = 0;
	while (index < RDMA_MALLOC_MAX_HEAPS && atomic_load_explicit(&heaps[index], memory_order_relaxed))
		index++;
	if (index == RDMA_MALLOC_MAX_HEAPS) {
		*err = EAGAIN;
		goto out;
	}
	h = &heap_store[index];
	memset(h, 0, sizeof(*h));
	h->hooks = rdmalloc_extent_hooks;
	atomic_init(&h->spec.access, rdmalloc_heap_implied_access(flags, access));
	h->spec.flags = flags & ~(RDMALLOC_HEAP_AUTO_CACHE | RDMALLOC_HEAP_CHECK_FREES);
	/* Before its first arena: the chunk size depends on it (chunk_max_of). */
	h->check_frees = !(flags & RDMALLOC_HEAP_AUTO_CACHE) || (flags & RDMALLOC_HEAP_CHECK_FREES);
	h->spec.auto_cache = !(flags & RDMALLOC_HEAP_AUTO_CACHE) ? 0
			     : flags & RDMALLOC_HEAP_CHECK_FREES ? RDMALLOC_AUTO_CHECKED : RDMALLOC_AUTO_PLAIN;
	atomic_init(&h->auto_tcache, h->spec.auto_cache != 0);
	h->decay_ms = decay_ms;
	h->spec.decay_ms = decay_ms;
	h->index = index;
	if (++gen_counter == 0)
		++gen_counter;
	h->gen = gen_counter;
	if (arena_new(h, &h->arenas[0])) {
		h = NULL;
		*err = EAGAIN;
		goto out;
	}
	atomic_init(&h->narenas, 1);
	atomic_store_explicit(&heaps[index], h, memory_order_release);
out:
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	return h;
}

/*
 * Ticks and trims work on a heap's arenas without the HEAP lock: their
 * hooks give chunks back, and ibv_dereg_mr may take long or wait for a
 * lock that a thread of the program holds, while heap creation, the
 * stats and fork() take that lock.  purge_take marks @h as worked on
 * (HEAP lock held): one at a time per heap (jemalloc skips an arena whose
 * purge is under way: a trim would do nothing), none while @h is being
 * destroyed (the destroy waits for the one under way instead) or a fork
 * is coming (it waits for those under way: a child must not inherit a
 * purge half done, which jemalloc would never finish).  How it waits for
 * the work under way on @h and for a fork, by @how:
 */
enum purge_how {
	PURGE_TICK,    /* the decay: not for another's work (a trim gives back all), for a fork */
	PURGE_RELIEF,  /* inside an allocation: both until @deadline, then without @h; never
			* waiting on the HEAP lock itself (purge_begin) */
	PURGE_TRIM,    /* rdma_malloc_trim(): for both */
};

/* purge_take's answer to a relief that should look again later. */
#define PURGE_LATER (-1)

/* 1 if taken, 0 if not, PURGE_LATER (a relief, before @deadline) to
 * look again without the lock.  @deadline: a relief's, one for all the
 * heaps it goes through (rdmalloc_fill_wait_ns from its start); else 0. */
static int purge_take(struct rdmalloc_heap *h, enum purge_how how, uint64_t deadline)
{
	for (;;) {
		if (atomic_load_explicit(&heaps[h->index], memory_order_relaxed) != h || h->destroying)
			return 0;
		if (!h->purging && !purges_stopped)
			break;
		if (how == PURGE_TICK && h->purging)
			return 0;
		if (how == PURGE_RELIEF) /* a wait on HEAP's condition takes HEAP back unbounded */
			return rdmalloc_now_ns() < deadline ? PURGE_LATER : 0;
		rdmalloc_lock_wait(RDMALLOC_LOCK_HEAP);
	}
	h->purging = 1;
	purges++;
	return 1;
}

/* HEAP lock held. */
static void purge_drop(struct rdmalloc_heap *h)
{
	h->purging = 0;
	purges--;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_HEAP); /* a destroy, a trim or a fork may wait */
}

/* HEAP for a relief, tried until @deadline (and 10 times more past it,
 * for the heaps after the one that used it up), never waited for: a
 * relief runs inside the program's allocation, which waits for a fork
 * (HEAP held to its end) or a heap's creation no longer than that.
 * 1 if taken. */
static int relief_lock(uint64_t deadline)
{
	for (int late = 0; !rdmalloc_lock_try(RDMALLOC_LOCK_HEAP); rdmalloc_os_nap(1000000))
		if (rdmalloc_now_ns() >= deadline && ++late > 10)
			return 0;
	return 1;
}

/* The heap at @i taken for a tick, a trim or a relief (purge_take), or NULL; with
 * @decay_ms, only one whose idle memory goes back (*@decay_ms: its decay
 * time, read under the lock; else untouched). */
static struct rdmalloc_heap *purge_begin(unsigned i, enum purge_how how, uint64_t deadline, long *decay_ms)
{
	for (;;) {
		if (how != PURGE_RELIEF)
			rdmalloc_lock(RDMALLOC_LOCK_HEAP);
		else if (!atomic_load_explicit(&heaps[i], memory_order_relaxed) || !relief_lock(deadline))
			return NULL; /* no heap there: no lock tried (the relief goes through all) */
		struct rdmalloc_heap *h = atomic_load_explicit(&heaps[i], memory_order_relaxed);
		if (h && decay_ms) {
			if (h->decay_ms < 0)
				h = NULL;
			else
				*decay_ms = h->decay_ms;
		}
		int taken = h ? purge_take(h, how, deadline) : 0;
		rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
		if (taken != PURGE_LATER)
			return taken ? h : NULL;
		rdmalloc_os_nap(1000000);
	}
}

static void purge_end(struct rdmalloc_heap *h)
{
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	purge_drop(h);
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
}

unsigned rdmalloc_heap_fork_prepare(uint64_t deadline_ns)
{
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	purges_stopped++;
	while (purges && rdmalloc_now_ns() < deadline_ns)
		rdmalloc_lock_wait_until(RDMALLOC_LOCK_HEAP, deadline_ns);
	unsigned left = purges;
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	return left;
}

void rdmalloc_heap_fork_parent(void)
{
	purges_stopped--;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_HEAP);
}

/*
 * The background thread's tick (reserve.h): jemalloc's time-based decay of
 * every heap whose idle memory goes back (but one a trim works on, which
 * gives back all), then its big blocks kept past the decay time, then the
 * thread caches idle for the decay time, then a sample of the live bytes'
 * peak.  The next tick in a tenth of the shortest decay time, at least
 * 100 ms and at most 1 s apart; 0 when no heap decays.
 */
static uint64_t heaps_tick(void)
{
	long shortest = -1;
	uint64_t now = 0;
	int skipped = rdmalloc_give_back_skipped();
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++) {
		long decay_ms = -1;
		struct rdmalloc_heap *h = purge_begin(i, PURGE_TICK, 0, &decay_ms);
		if (decay_ms >= 0 && (shortest < 0 || decay_ms < shortest))
			shortest = decay_ms; /* a heap another works on too: it decays */
		if (!h)
			continue;
		now = rdmalloc_now_ns(); /* after a wait for a fork */
		unsigned n = atomic_load_explicit(&h->narenas, memory_order_acquire);
		for (unsigned k = 0; k < n; k++)
			rdmalloc_arena_ctl(h->arenas[k], "decay", NULL, NULL, NULL, 0);
		rdmalloc_big_decay(h, now, 0);
		/* An idle chunk a decommit skipped (a walk or a first use held
		 * it then) gets no decommit again: it goes here. */
		if (skipped)
			rdmalloc_give_back_idle(h, 1);
		purge_end(h);
	}
	rdmalloc_heap_flush_idle_caches(now ? now : rdmalloc_now_ns());
	/* The peak of live bytes, between the program's reads of the stats
	 * too: a program whose stats are read at exit has freed most. */
	STAT_MAX(peak_live_bytes, rdmalloc_heap_live_bytes());
	if (shortest < 0)
		return 0;
	uint64_t period = (uint64_t)shortest * 100000u; /* a tenth, in ns */
	return period < 100000000u ? 100000000u : period > 1000000000u ? 1000000000u : period;
}

void rdmalloc_heap_init(void)
{
	rdmalloc_reserve_set_tick(heaps_tick);
	rdmalloc_freed_init();
	int e = pthread_key_create(&tc_key, thread_exit);
	if (e)
		rdmalloc_fatal("pthread_key_create: %s", rdmalloc_strerror(e));
}

void rdmalloc_heap_init_default(unsigned int access)
{
	int err = 0;
	default_heap = heap_new(access, rdmalloc_opts.hugepages ? RDMA_HEAP_HUGEPAGES : 0, rdmalloc_opts.decay_ms, &err);
	if (!default_heap)
		rdmalloc_fatal("cannot create the default heap: %s", rdmalloc_strerror(err));
}

struct rdmalloc_heap *rdmalloc_heap_create(unsigned int access, unsigned int flags, long decay_ms, int *err)
{
	return heap_new(access, flags, decay_ms, err);
}

/* @h is in the table, no other destroy of it under way (the first call,
 * *@ours 0, marks it as this one's), and nothing pins its chunks: 0, with
 * the HEAP and PD locks taken; else EINVAL or EBUSY, with none, the mark
 * gone and @h's reserve opened again on EBUSY (a destroy that waited for
 * it and found the heap pinned meanwhile). */
static int destroy_lock(struct rdmalloc_heap *h, int *ours)
{
	rdmalloc_lock(RDMALLOC_LOCK_HEAP);
	if (atomic_load_explicit(&heaps[h->index], memory_order_relaxed) != h || (!*ours && h->destroying)) {
		rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
		return EINVAL; /* destroyed, or being destroyed: a second destroy */
	}
	*ours = h->destroying = 1;
	rdmalloc_lock(RDMALLOC_LOCK_PD); /* no attach/detach/window while chunks are released */
	/* Windows and the drop-in's elided regions (both pin their chunk):
	 * their owners free them first. */
	if (rdmalloc_chunks_pinned(h)) {
		h->destroying = 0;
		rdmalloc_reserve_reopen(&h->spec.reserve);
		rdmalloc_unlock(RDMALLOC_LOCK_PD);
		rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
		return EBUSY;
	}
	return 0;
}

static int heap_destroy(struct rdmalloc_heap *h);

/* Not cancelled midway: a thread cancelled in one of its waits would keep
 * the HEAP lock, or its heap marked as being destroyed. */
int rdmalloc_heap_destroy(struct rdmalloc_heap *h)
{
	int cancel = rdmalloc_cancel_off();
	int err = heap_destroy(h);
	rdmalloc_cancel_on(cancel);
	return err;
}

static int heap_destroy(struct rdmalloc_heap *h)
{
	/* The drop-in's heap: threads are bound to its arenas and automatic
	 * caches hold its memory (and its chunks must outlive the process). */
	if (!h || h == default_heap || !in_store(h) || rdmalloc_heap_auto_tcache(h))
		return EINVAL;
	int ours = 0;
	int err = destroy_lock(h, &ours);
	if (err)
		return err;
	if (h->purge_lost) { /* its arena's dirty pages could not be purged first */
		h->destroying = 0;
		rdmalloc_unlock(RDMALLOC_LOCK_PD);
		rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "a heap cannot be destroyed in this fork child: fork() went "
				  "ahead of rdmalloc giving its memory back, which jemalloc cannot finish here "
				  "(EBUSY; its memory stays with the process)");
		return EBUSY;
	}
	/* Its reserve first: no growth fills it any more, and the chunk being
	 * made for it is waited for with none of our locks held.  That
	 * ibv_reg_mr may take long (a big chunk, a slow provider), and every
	 * heap's creation, trim and pressure relief, every PD attach, detach
	 * and access change, window and elided region waited behind it.  A
	 * closed reserve stays closed: only a destroy refused reopens it.
	 * No tick or trim starts on it now (destroying): the one under way is
	 * waited for as the reserve is. */
	while (!rdmalloc_reserve_closed(&h->spec.reserve) || h->purging) {
		rdmalloc_unlock(RDMALLOC_LOCK_PD);
		while (h->purging) /* a tick's or a trim's work on its arenas (purge_take) */
			rdmalloc_lock_wait(RDMALLOC_LOCK_HEAP);
		rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
		rdmalloc_reserve_close(&h->spec.reserve);
		if ((err = destroy_lock(h, &ours)))
			return err;
	}
	atomic_store_explicit(&heaps[h->index], NULL, memory_order_release);
	/* jemalloc requires every cache that holds the arena's memory to be
	 * flushed before arena.<i>.destroy. */
	rdmalloc_lock(RDMALLOC_LOCK_TCACHE);
	for (unsigned tc = 0; tc < TC_MAX; tc++)
		if (tc_owner[tc] == h->gen)
			tcache_destroy_locked(tc);
	rdmalloc_unlock(RDMALLOC_LOCK_TCACHE);
	rdmalloc_big_forget(h); /* its big chunks go with the rest below */
	for (unsigned i = 0; i < atomic_load_explicit(&h->narenas, memory_order_relaxed); i++)
		if (rdmalloc_arena_ctl(h->arenas[i], "destroy", NULL, NULL, NULL, 0))
			rdmalloc_fatal("arena.%u.destroy failed", h->arenas[i]);
	size_t left = rdmalloc_chunk_release_heap(h);
	if (left)
		rdmalloc_log(RDMALLOC_LOG_DEBUG, "%zu chunks of heap %u released after arena destroy",
			     left, h->index);
	rdmalloc_unlock(RDMALLOC_LOCK_PD);
	rdmalloc_unlock(RDMALLOC_LOCK_HEAP);
	return 0;
}



void rdmalloc_heap_purge(rdma_heap_t *heap)
{
	struct rdmalloc_heap *h = (struct rdmalloc_heap *)heap;
	for (unsigned i = 0; i < atomic_load_explicit(&h->narenas, memory_order_acquire); i++)
		rdmalloc_arena_ctl(h->arenas[i], "purge", NULL, NULL, NULL, 0);
}

/* rdmalloc_heaps_trim's, or a relief's (@how).  Not cancelled midway: a
 * thread cancelled in a wait would keep the HEAP lock, or a heap marked as
 * worked on for ever. */
static size_t trim(enum purge_how how)
{
	int cancel = rdmalloc_cancel_off();
	uint64_t deadline = how == PURGE_RELIEF ? rdmalloc_now_ns() + rdmalloc_fill_wait_ns : 0;
	/* The calling thread's caches hold freed blocks jemalloc counts as in
	 * use: flushed first, so that their pages can go too. */
	je_mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
	uint64_t before = atomic_load(&rdmalloc_counters.bytes_given_back);
	rdmalloc_reserves_drop(0); /* registered memory nobody uses */
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_HEAPS; i++) {
		struct rdmalloc_heap *h = purge_begin(i, how, deadline, NULL);
		if (!h)
			continue;
		struct tl_cache *t = &tl[h->index];
		/* Its own cache, outside any use of it: no bracket.  A tick
		 * flushing the same id meanwhile is serialised by jemalloc
		 * (tcaches_flush takes the cache out under its mutex; the
		 * second finds it taken); a destroy waits for us. */
		if (t->gen == h->gen && t->tcflag != MALLOCX_TCACHE_NONE) {
			unsigned tc = tcache_id(t->tcflag);
			je_mallctl("tcache.flush", NULL, NULL, &tc, sizeof(tc));
		}
		rdmalloc_heap_purge((rdma_heap_t *)h);
		rdmalloc_big_decay(h, 0, 1);
		/* Every idle chunk, the kept ones too: jemalloc decommitted
		 * them all.  Here, so that a destroy waits for it holding none
		 * of our locks. */
		rdmalloc_chunks_give_back(h);
		purge_end(h);
	}
	rdmalloc_cancel_on(cancel);
	return (size_t)(atomic_load(&rdmalloc_counters.bytes_given_back) - before);
}

size_t rdmalloc_heaps_trim(void)
{
	return trim(PURGE_TRIM);
}

int rdmalloc_heaps_relieve(void)
{
	/* Inside a hook or a verbs call this thread may hold our locks or
	 * jemalloc's: no trim there (the hooks give idle chunks back). */
	if (rdmalloc_tl_in_verbs || !rdmalloc_tl_pressure)
		return 0; /* not memory pressure (a huge request, say): nothing to relieve */
	rdmalloc_tl_pressure = 0;
	rdmalloc_relief_begin();
	size_t back = trim(PURGE_RELIEF); /* inside an allocation: bounded waits */
	if (!back) {
		rdmalloc_relief_end();
		return 0;
	}
	RDMALLOC_TEST_PAUSE(RDMALLOC_PAUSE_HEAPS_RELIEVED);
	STAT_INC(pressure_trims);
	rdmalloc_log_once(RDMALLOC_LOG_INFO, "an allocation failed: %zu bytes of idle chunks given back, "
			  "tried once more (further ones are only counted in pressure_trims)", back);
	return 1;
}

void rdmalloc_heaps_relief_end(void)
{
	rdmalloc_relief_end();
}

uint64_t rdmalloc_heap_key_gen(const struct rdmalloc_heap *h)
{
	return atomic_load_explicit(&h->spec.key_gen, memory_order_acquire);
}
