/* SPDX-License-Identifier: MIT */
/*
 * malloc.c - the C allocation ABI of glibc, on a registered heap.
 *
 * Every thread is bound (jemalloc's thread.arena) to one of the arenas of
 * the preload heap on its first allocation, so the fast path is jemalloc's own
 * malloc with its automatic thread cache.  What cannot come from a preload
 * chunk comes from nest.c's allocator, never from jemalloc's own arenas:
 *  - before the library is ready (the dynamic loader, libc start-up, other
 *    constructors, our own initialisation), for a thread that cannot be
 *    bound, and for one that ends, once jemalloc has cleaned its state up
 *    (its later key destructors: RDMALLOC_TL_ENDED);
 *  - inside one of rdmalloc's verbs calls (libibverbs allocates in
 *    ibv_reg_mr), hooks included: such a thread may hold a lock of
 *    libibverbs or a provider, or jemalloc's growth lock, that another
 *    thread's hook waits for; it must never wait for jemalloc (nest.c).
 * So every pointer the drop-in returns is in a chunk or in the nest, and
 * free, realloc and malloc_usable_size of anything else abort with a
 * message, as glibc's and rdma_free do.
 * Memory of the rdma_* heaps keeps its own per-heap caches (alloc.c).
 * doc/preload.md has the whole story: bootstrap, reentrancy, fork.
 */
#include <errno.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "big.h"
#include "chunk.h"
#include "compiler.h"
#include "fork.h"
#include "heap.h"
#include "init.h"
#include "calls.h"
#include "log.h"
#include "nest.h"
#include "options.h"
#include "preload.h"
#include "addrmap.h"
#include "rdma_malloc.h"
#include "counters.h"
#include "reserve.h"
#include "freed.h"
#include "verbs.h"

static struct rdmalloc_heap *pheap;
static unsigned parena;     /* the heap's first arena */
static unsigned pnarenas;   /* its arenas, threads bound round-robin */
static atomic_uint next_arena;
static atomic_int ready;
#define tl_bound (rdmalloc_tl.bound) /* 1 bound, -1 binding failed (tls.h) */

/* Memory of a preload chunk: one byte of the address map (addrmap.h), for
 * every chunk of the heap, whichever thread's arena it belongs to.  Preload
 * chunks are never released (the hooks refuse dalloc, and
 * rdma_heap_destroy refuses the preload heap), so a pointer the drop-in
 * returned keeps its byte for the life of the process.  The map's leaf
 * pointers are ours, in .bss (256 KiB): they exist before the first free(),
 * so the test loads no pointer to them first. */
static rdmalloc_auto_leaf_t auto_map[RDMALLOC_ADDRMAP_AUTO_LEAVES];

/* Its byte: RDMALLOC_AUTO_PLAIN, or _CHECKED with RDMALLOC_CHECK_FREE. */
static inline int preload_memory(const void *p)
{
	return rdmalloc_addrmap_is_auto_in(auto_map, p);
}

/*
 * RDMALLOC_CHECK_FREE (freed.h): its cost is on the slow paths only, and
 * nothing on the fast ones without it.  malloc's and calloc's fast path
 * wants the thread's word equal to fast_word, which no thread's word
 * equals when frees are checked; free's wants the granule's byte PLAIN,
 * which no granule's is then.
 */
static int check_free;
static int thread_cache = 1; /* not with MALLOC_CONF=tcache:false */
union tl_word {
	struct rdmalloc_tl_state st;
	uint64_t word;
};
#define BOUND_WORD { .st = { .in_verbs = 0, .bound = 1 } }
static const union tl_word bound_word = BOUND_WORD;
static union tl_word fast_word = BOUND_WORD;

struct rdmalloc_heap *rdmalloc_preload_heap(void)
{
	return atomic_load_explicit(&ready, memory_order_acquire) ? pheap : NULL;
}

__attribute__((constructor(101))) static void preload_init(void)
{
	rdmalloc_addrmap_auto_give(auto_map);
	rdmalloc_init_core();
	rdmalloc_preload_cxx_init();
	check_free = rdmalloc_opts.check_free;
	thread_cache = rdmalloc_preload_thread_cache_wanted();
	if (check_free) /* before any thread is bound (ready) */
		fast_word.st.bound = INT_MIN; /* no thread's */
	/* RDMA (libibverbs, the default PD) on first need (init.h), unless
	 * every chunk is to be registered as it is made. */
	if (rdmalloc_opts.preload_register == RDMALLOC_PRELOAD_EAGER)
		rdmalloc_init();
	/* Access flags the option parser has already checked: nothing of
	 * rdma_heap_create()'s checks applies.  Its memory is in automatic
	 * caches: never to be destroyed. */
	int err = 0;
	struct rdmalloc_heap *h = rdmalloc_heap_create(rdmalloc_opts.preload_access,
						       RDMALLOC_HEAP_AUTO_CACHE | (check_free ? RDMALLOC_HEAP_CHECK_FREES : 0),
						       rdmalloc_opts.decay_ms, &err);
	if (!h) {
		rdmalloc_log(RDMALLOC_LOG_ERROR, "cannot create the LD_PRELOAD heap: %s; "
			     "this program's mallocs get unregistered memory", rdmalloc_strerror(err));
		STAT_INC(fallbacks);
		return;
	}
	/* Most of a program's memory never meets a NIC: its chunks are
	 * registered when RDMA first needs them, unless asked otherwise, and
	 * a refused registration never fails a malloc (chunk.h). */
	rdmalloc_heap_set_policy(h, rdmalloc_opts.preload_register == RDMALLOC_PRELOAD_EAGER ? RDMALLOC_REG_EAGER_PLAIN
											  : RDMALLOC_REG_FIRST_USE);
	pheap = h;
	parena = rdmalloc_heap_arena_at(pheap, 0);
	/* Threads are bound round-robin to several arenas, as jemalloc does
	 * with its own (in one arena they would contend on its locks and
	 * interleave their extents, so that realloc could rarely grow in
	 * place).  Each arena grows chunks of its own: RDMALLOC_PRELOAD_ARENAS
	 * trades that registered memory for speed. */
	unsigned want = rdmalloc_opts.preload_arenas;
	if (!want) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		want = ncpu < 1 ? 1 : ncpu > RDMALLOC_ARENAS_MAX ? RDMALLOC_ARENAS_MAX : (unsigned)ncpu;
	}
	pnarenas = rdmalloc_heap_add_arenas(pheap, want);
	if (pnarenas < want) {
		STAT_INC(fallbacks);
		rdmalloc_log(RDMALLOC_LOG_WARN, "the LD_PRELOAD heap has %u of %u arenas: jemalloc has no more",
			     pnarenas, want);
	}
	atomic_store_explicit(&ready, 1, memory_order_release);
}

/* Bind this thread to the preload arena: 1 when it is, 0 when not (yet). */
static __attribute__((noinline)) int bind_thread(void)
{
	if (tl_bound || rdmalloc_tl_in_verbs || !atomic_load_explicit(&ready, memory_order_acquire))
		return tl_bound > 0;
	unsigned i = atomic_fetch_add_explicit(&next_arena, 1, memory_order_relaxed) % pnarenas;
	unsigned a = rdmalloc_heap_arena_at(pheap, i);
	tl_bound = -1; /* meanwhile (pthread_setspecific may calloc): the nest's */
	int err = rdmalloc_heap_bind_thread(a);
	if (err == ESRCH) { /* an ending thread's late destructor: the nest's */
		tl_bound = RDMALLOC_TL_ENDED;
		return 0;
	}
	if (err == 0) {
		tl_bound = 1;
		/* The thread's cache, associated with that arena only
		 * (jemalloc_conf.c).  If the mallctl fails, jemalloc serves
		 * the thread uncached: slower, still the preload heap's memory.
		 * (jemalloc 5.3 reports no failure to make the cache itself.) */
		int e = thread_cache ? rdmalloc_heap_thread_cache_on() : 0;
		if (e) {
			STAT_INC(tcache_fallbacks);
			STAT_INC(fallbacks);
			rdmalloc_log_once(RDMALLOC_LOG_WARN, "cannot give a thread jemalloc's thread cache (%s); its "
					  "mallocs go uncached (counted in tcache_fallbacks)", rdmalloc_strerror(e));
		}
		return 1;
	}
	tl_bound = -1;
	STAT_INC(fallbacks);
	rdmalloc_log_once(RDMALLOC_LOG_WARN, "cannot bind a thread to the preload arena; its "
			  "mallocs get unregistered memory (counted in fallbacks)");
	return 0;
}

static inline uint64_t tl_word(void)
{
	uint64_t st;
	memcpy(&st, &rdmalloc_tl, sizeof(st));
	return st;
}

/* Bound and not inside a verbs call, and frees not checked: one 64-bit
 * TLS compare. */
static inline int fast(void)
{
	return likely(tl_word() == fast_word.word);
}

/* The same whether frees are checked or not. */
static inline int fast_checked(void)
{
	return tl_word() == bound_word.word;
}

static inline int ready_thread(void)
{
	return fast() || bind_thread();
}

/* A growth wants the reserve's thread (tls.h): started here, on the
 * thread's next allocation of any kind, outside every lock.  A start put
 * off (a fork was coming: os.h) is asked again on the next one. */
static inline void errand(void)
{
	if (unlikely(tl_bound == RDMALLOC_TL_ERRAND)) {
		tl_bound = 1;
		rdmalloc_threads_start_wanted();
		if (rdmalloc_threads_wanted())
			tl_bound = RDMALLOC_TL_ERRAND;
	}
}

/* Every allocation but the fast path of malloc/calloc.  The very first
 * allocation of the process comes here, before jemalloc initialises: our
 * inner fork handler must be registered before jemalloc's (fork.c). */
static __attribute__((noinline)) void *alloc_any(size_t size, size_t align, int zero)
{
	int saved = errno; /* binding, the errand and a relief may set it */
	rdmalloc_fork_register_inner();
	if (rdmalloc_tl_in_verbs || !ready_thread()) {
		errno = saved;
		return rdmalloc_nest_alloc(size ? size : 1, align, zero);
	}
	errand();
	void *p;
	RDMALLOC_RELIEVED(p, rdmalloc_mallocx(size ? size : 1,
					      (align ? RDMALLOC_ALIGN(align) : 0) | (zero ? RDMALLOC_ZERO : 0)));
	errno = p ? saved : ENOMEM;
	return check_free ? rdmalloc_freed_clear(p) : p;
}

/* With RDMALLOC_CHECK_FREE, a bound thread's malloc: no key left in the
 * block (calloc's is zero). */
static __attribute__((noinline)) void *malloc_slow(size_t size)
{
	if (check_free && fast_checked())
		return rdmalloc_freed_clear(rdmalloc_auto_malloc(size));
	return alloc_any(size, 0, 0);
}

/*
 * malloc and calloc: the thread's word checked, then jemalloc's own call,
 * as a tail call.  Nothing is kept for after it: a failure inside
 * jemalloc's growth already gave reserves and idle chunks back and tried
 * again (chunk.c), and what is left is jemalloc's NULL with ENOMEM, as
 * plain jemalloc's.  jemalloc's calloc checks n * size for overflow.
 */
PRELOAD_API void *malloc(size_t size)
{
	if (likely(fast()))
		return rdmalloc_auto_malloc(size);
	return malloc_slow(size);
}

PRELOAD_API void *calloc(size_t n, size_t size)
{
	if (likely(fast()) || (check_free && fast_checked()))
		return rdmalloc_auto_calloc(n, size);
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return alloc_any(total, 0, 1);
}

/* Neither a chunk's nor the nest's: a bug of the program, which jemalloc
 * would turn into a crash far from here, or silent corruption. */
static __attribute__((noreturn, noinline, cold)) void not_ours(const char *who, const void *p)
{
	rdmalloc_freed_given_back(p, who); /* of an rdma_* heap's chunk given back */
	rdmalloc_fatal("%s(%p): not memory from this allocator", who, p);
}

/* A block of the drop-in's heap, whose malloc(@size) is known (0: not),
 * checked for a double free first with RDMALLOC_CHECK_FREE. */
static void free_auto(void *p, size_t size, const char *who)
{
	if (check_free)
		rdmalloc_freed_mark(p, who);
	if (size)
		rdmalloc_auto_free_sized(p, size);
	else
		rdmalloc_auto_free(p);
}

/* free() of anything the auto map does not mark PLAIN: the nest's blocks, the
 * rdma_* heaps' memory (their big blocks among it: the drop-in's heap has
 * none), and the drop-in's in a granule its chunk's mapping does not cover
 * whole (addrmap.h); all of the drop-in's with RDMALLOC_CHECK_FREE. */
static __attribute__((noinline)) void free_slow(void *p)
{
	if (preload_memory(p) == RDMALLOC_AUTO_CHECKED) {
		free_auto(p, 0, "free");
		return;
	}
	if (!p)
		return;
	if (rdmalloc_nest_owns(p)) {
		rdmalloc_nest_free(p, "free"); /* allocated inside a verbs call */
		return;
	}
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(p);
	if (!c)
		not_ours("free", p);
	else if (c->big)
		rdmalloc_big_free(c, p, "free");
	else if (c->heap == pheap)
		free_auto(p, 0, "free");
	else
		rdmalloc_heap_dallocx(c, p, "free"); /* an rdma_* heap */
}

/* C++ sized delete's slow path: the same with the size known. */
static __attribute__((noinline)) void free_sized_slow(void *p, size_t size)
{
	if (preload_memory(p) == RDMALLOC_AUTO_CHECKED)
		free_auto(p, size, "operator delete"); /* size 0: new(0), a block of 1 byte */
	else
		free_slow(p);
}

PRELOAD_API void free(void *p)
{
	/* NULL is in no chunk: it takes the slow path. */
	if (likely(preload_memory(p) == RDMALLOC_AUTO_PLAIN))
		rdmalloc_auto_free(p); /* the automatic cache may hold it */
	else
		free_slow(p);
}

void rdmalloc_preload_free_sized(void *p, size_t size)
{
	if (unlikely(preload_memory(p) != RDMALLOC_AUTO_PLAIN))
		free_sized_slow(p, size);
	else if (likely(size))
		rdmalloc_auto_free_sized(p, size);
	else
		rdmalloc_auto_free(p); /* new(0): malloc(0) made a block of 1 byte */
}

PRELOAD_API void cfree(void *p)
{
	free(p);
}

static size_t usable(void *p, const char *who)
{
	if (rdmalloc_nest_owns(p))
		return rdmalloc_nest_usable(p, who);
	if (preload_memory(p))
		return rdmalloc_auto_usable_size(p);
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(p);
	if (!c || (c->big && (uintptr_t)p != c->base))
		not_ours(who, p);
	return c->big ? rdmalloc_big_usable(c) : rdmalloc_auto_usable_size(p);
}

/* realloc() inside one of our verbs calls, of a block of the nest, or on an
 * ended thread: a new block (from the nest inside a verbs call, else as
 * malloc, which serves an ended thread from the nest too), the bytes, the
 * old freed. */
static __attribute__((noinline)) void *realloc_moving(void *p, size_t size)
{
	/* First, p checked for a double free where its heap checks: the new
	 * block could be p, handed out again. */
	struct rdmalloc_chunk *c;
	if (preload_memory(p)) {
		if (check_free)
			rdmalloc_freed_check(p, "realloc");
	} else if (!rdmalloc_nest_owns(p) && (c = rdmalloc_addrmap_lookup(p))) { /* the nest's usable() checks */
		rdmalloc_heap_check_live(c, p, "realloc");
	}
	size_t old = usable(p, "realloc");
	void *q = rdmalloc_tl_in_verbs ? rdmalloc_nest_alloc(size, 0, 0) : malloc(size);
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	free(p);
	return q;
}

PRELOAD_API void *realloc(void *p, size_t size)
{
	if (!p)
		return malloc(size);
	if (size == 0) { /* glibc frees and returns NULL */
		free(p);
		return NULL;
	}
	if (likely(fast() && preload_memory(p))) { /* never inside a hook, never the nest's */
		void *q;
		RDMALLOC_RELIEVED(q, rdmalloc_auto_realloc(p, size)); /* sets no errno */
		if (unlikely(!q))
			errno = ENOMEM;
		return q;
	}
	if (rdmalloc_tl_in_verbs || rdmalloc_nest_owns(p))
		return realloc_moving(p, size);
	struct rdmalloc_chunk *c = preload_memory(p) ? NULL : rdmalloc_addrmap_lookup(p);
	if (!preload_memory(p) && !c)
		not_ours("realloc", p);
	if (c && c->heap != pheap)
		return rdmalloc_api_realloc(c->heap, p, c, size); /* an rdma_* heap: stay in it */
	if (check_free)
		rdmalloc_freed_check(p, "realloc"); /* a moved block gets p's first bytes, not a key */
	int saved = errno; /* binding, the errand and a relief may set it */
	/* Bound first, as malloc binds: a thread that has only freed so far
	 * may be one jemalloc has cleaned up (RDMALLOC_TL_ENDED), whose every
	 * new block jemalloc would make in its arena 0, whatever the flags. */
	int bound = ready_thread(), unbound_flags = RDMALLOC_ARENA(parena) | RDMALLOC_TCACHE_NONE;
	if (tl_bound == RDMALLOC_TL_ENDED) {
		errno = saved;
		return realloc_moving(p, size);
	}
	errand();
	void *q;
	/* With RDMALLOC_CHECK_FREE, p is marked if it moves (freed.h). */
	RDMALLOC_RELIEVED(q, check_free ? rdmalloc_freed_realloc(p, size, bound ? 0 : unbound_flags,
								 bound ? 0 : RDMALLOC_TCACHE_NONE, "realloc")
			     : likely(bound) ? rdmalloc_auto_realloc(p, size) /* sets no errno */
					     : rdmalloc_rallocx(p, size, unbound_flags));
	errno = q ? saved : ENOMEM;
	return q;
}

PRELOAD_API void *reallocarray(void *p, size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, total);
}

PRELOAD_API int posix_memalign(void **out, size_t align, size_t size)
{
	if (!is_pow2(align) || align % sizeof(void *))
		return EINVAL;
	int saved = errno;
	void *p = alloc_any(size, align, 0);
	errno = saved;
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* glibc's memalign rounds an alignment that is not a power of two up. */
static void *memalign_any(size_t align, size_t size)
{
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	size_t a = 1;
	while (a < align)
		a <<= 1;
	return alloc_any(size, a, 0);
}

PRELOAD_API void *memalign(size_t align, size_t size)
{
	return memalign_any(align, size);
}

/* Whether the glibc the drop-in replaces refuses an aligned_alloc
 * alignment that is not a power of two, or 0: 2.38 and later do (C17),
 * with EINVAL; before, aligned_alloc was memalign (tests/preload/edge_args.c). */
static int aligned_alloc_strict(void)
{
	static _Atomic int strict = -1; /* not known yet; every thread finds the same */
	int s = atomic_load_explicit(&strict, memory_order_relaxed);
	if (s < 0) {
		unsigned major = 0, minor = 0;
		s = sscanf(gnu_get_libc_version(), "%u.%u", &major, &minor) == 2 &&
		    (major > 2 || (major == 2 && minor >= 38));
		atomic_store_explicit(&strict, s, memory_order_relaxed);
	}
	return s;
}

/* As glibc: an alignment that is not a power of two, or 0, is memalign's
 * before 2.38 (0 is malloc's), EINVAL from 2.38 on.  memalign_any, not
 * memalign: a program's own memalign must not answer it. */
PRELOAD_API void *aligned_alloc(size_t align, size_t size)
{
	if (unlikely(!is_pow2(align))) {
		if (aligned_alloc_strict()) {
			errno = EINVAL;
			return NULL;
		}
		return memalign_any(align, size);
	}
	return alloc_any(size, align, 0);
}

PRELOAD_API void *valloc(size_t size)
{
	return alloc_any(size, (size_t)sysconf(_SC_PAGESIZE), 0);
}

PRELOAD_API void *pvalloc(size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (size > SIZE_MAX - page) {
		errno = ENOMEM;
		return NULL;
	}
	return alloc_any(size ? align_up(size, page) : page, page, 0);
}

PRELOAD_API size_t malloc_usable_size(void *p)
{
	return p ? usable(p, "malloc_usable_size") : 0;
}

/* glibc's internal names, used by some programs and by older interposers. */
/* glibc's malloc_trim(): our chunks are what can be given back; glibc's
 * own heap holds only what was allocated before the drop-in took over.
 * @pad is ignored (jemalloc keeps nothing free that we could bound).
 * 1 if memory was given back, as glibc says: registered chunks, or the
 * free pages of plain ones, which go back as the trim decommits them
 * (other threads' meanwhile included). */
PRELOAD_API int malloc_trim(size_t pad)
{
	(void)pad;
	uint64_t discarded = atomic_load_explicit(&rdmalloc_counters.discarded_bytes, memory_order_relaxed);
	return rdma_malloc_trim() > 0 ||
	       atomic_load_explicit(&rdmalloc_counters.discarded_bytes, memory_order_relaxed) != discarded;
}

void *rdmalloc_preload_malloc(size_t) RDMALLOC_ALIAS(malloc);
void *rdmalloc_preload_aligned_alloc(size_t, size_t) RDMALLOC_ALIAS(aligned_alloc);
void rdmalloc_preload_free(void *) RDMALLOC_ALIAS(free);
PRELOAD_API void *__libc_malloc(size_t) RDMALLOC_ALIAS(malloc);
PRELOAD_API void *__libc_calloc(size_t, size_t) RDMALLOC_ALIAS(calloc);
PRELOAD_API void *__libc_realloc(void *, size_t) RDMALLOC_ALIAS(realloc);
PRELOAD_API void __libc_free(void *) RDMALLOC_ALIAS(free);
PRELOAD_API void *__libc_memalign(size_t, size_t) RDMALLOC_ALIAS(memalign);
PRELOAD_API void *__libc_valloc(size_t) RDMALLOC_ALIAS(valloc);
PRELOAD_API void *__libc_pvalloc(size_t) RDMALLOC_ALIAS(pvalloc);
