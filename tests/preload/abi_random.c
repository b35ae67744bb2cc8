/* SPDX-License-Identifier: MIT */
/*
 * abi_random.c - the LD_PRELOAD drop-in's whole allocation ABI under random
 * load, in several threads: malloc, calloc, realloc (NULL, grow, shrink, to
 * 0), reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
 * strdup, strndup, free, cfree, malloc_usable_size, glibc's __libc_* names,
 * the rdma_* allocation API, every C++ operator new and delete
 * (abi_random_new.cc), and frees in another thread than the allocating one.
 *
 * After every allocation: the usable size is at least what was asked, the
 * alignment holds, calloc's memory is zero, one key lookup covers the whole
 * usable size (0, or ENODEV where there is no device; never ENOENT or
 * ERANGE; when 0, rdma_malloc_mr() covers it too), and a pattern written
 * over the usable size is intact when the block is freed, reallocated
 * (prefix) or handed to another thread.
 *
 *   abi_random [OPS [THREADS [SEED]]]     (default 1000000 4 1)
 * Run it under the drop-in (LD_PRELOAD=librdmalloc-preload.so); without it
 * glibc's memory is not rdmalloc's and every lookup fails with ENOENT, which
 * this test reports as failures.  Prints one ok/FAIL line per function and
 * "N passed, M failed".
 */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "abi_random.h"
#include "rdma_malloc.h"

/* Every function exercised; the first ones allocate. */
#define FUNCS(X)                                                               \
	X(MALLOC, "malloc")                                                    \
	X(CALLOC, "calloc")                                                    \
	X(REALLOC_NULL, "realloc(NULL, n)")                                    \
	X(REALLOCARRAY_NULL, "reallocarray(NULL, n, m)")                       \
	X(POSIX_MEMALIGN, "posix_memalign")                                    \
	X(ALIGNED_ALLOC, "aligned_alloc")                                      \
	X(MEMALIGN, "memalign")                                                \
	X(VALLOC, "valloc")                                                    \
	X(PVALLOC, "pvalloc")                                                  \
	X(STRDUP, "strdup")                                                    \
	X(STRNDUP, "strndup")                                                  \
	X(LIBC_MALLOC, "__libc_malloc")                                        \
	X(LIBC_CALLOC, "__libc_calloc")                                        \
	X(LIBC_MEMALIGN, "__libc_memalign")                                    \
	X(LIBC_VALLOC, "__libc_valloc")                                        \
	X(LIBC_PVALLOC, "__libc_pvalloc")                                      \
	X(RDMA_MALLOC, "rdma_malloc")                                          \
	X(RDMA_CALLOC, "rdma_calloc")                                          \
	X(RDMA_ALIGNED_ALLOC, "rdma_aligned_alloc")                            \
	X(RDMA_POSIX_MEMALIGN, "rdma_posix_memalign")                          \
	X(NEW, "operator new(size_t)")                                         \
	X(NEW_ARR, "operator new[](size_t)")                                   \
	X(NEW_NT, "operator new(size_t, nothrow)")                             \
	X(NEW_ARR_NT, "operator new[](size_t, nothrow)")                       \
	X(NEW_AL, "operator new(size_t, align_val_t)")                         \
	X(NEW_ARR_AL, "operator new[](size_t, align_val_t)")                   \
	X(NEW_AL_NT, "operator new(size_t, align_val_t, nothrow)")             \
	X(NEW_ARR_AL_NT, "operator new[](size_t, align_val_t, nothrow)")       \
	/* ---- the rest do not allocate a new block from nothing ---- */      \
	X(REALLOC_GROW, "realloc grow")                                        \
	X(REALLOC_SHRINK, "realloc shrink")                                    \
	X(REALLOC_ZERO, "realloc(p, 0)")                                       \
	X(REALLOCARRAY, "reallocarray(p, n, m)")                               \
	X(LIBC_REALLOC, "__libc_realloc")                                      \
	X(RDMA_REALLOC, "rdma_realloc")                                        \
	X(FREE, "free")                                                        \
	X(CFREE, "cfree")                                                      \
	X(LIBC_FREE, "__libc_free")                                            \
	X(RDMA_FREE, "rdma_free")                                              \
	X(USABLE, "malloc_usable_size")                                        \
	X(RDMA_USABLE, "rdma_malloc_usable_size")                              \
	X(DELETE, "operator delete(void*)")                                    \
	X(DELETE_SIZED, "operator delete(void*, size_t)")                      \
	X(DELETE_NT, "operator delete(void*, nothrow)")                        \
	X(DELETE_ARR, "operator delete[](void*)")                              \
	X(DELETE_ARR_SIZED, "operator delete[](void*, size_t)")                \
	X(DELETE_ARR_NT, "operator delete[](void*, nothrow)")                  \
	X(DELETE_AL, "operator delete(void*, align_val_t)")                    \
	X(DELETE_SIZED_AL, "operator delete(void*, size_t, align_val_t)")      \
	X(DELETE_AL_NT, "operator delete(void*, align_val_t, nothrow)")        \
	X(DELETE_ARR_AL, "operator delete[](void*, align_val_t)")              \
	X(DELETE_ARR_SIZED_AL, "operator delete[](void*, size_t, align_val_t)") \
	X(DELETE_ARR_AL_NT, "operator delete[](void*, align_val_t, nothrow)")  \
	X(CROSS_THREAD, "free in another thread")

enum fn {
#define X(id, name) F_##id,
	FUNCS(X)
#undef X
	NFUNCS
};
static const char *const fn_name[NFUNCS] = {
#define X(id, name) name,
	FUNCS(X)
#undef X
};
#define NALLOC (F_NEW_ARR_AL_NT + 1)

/* Which deallocators a block may go to. */
enum family { FAM_C, FAM_RDMA, FAM_NEW, FAM_NEW_ARR, FAM_NEW_AL, FAM_NEW_ARR_AL };

struct block {
	void *p;
	size_t n;     /* bytes asked for */
	size_t u;     /* usable size found */
	size_t align; /* alignment asked for (0: malloc's) */
	uint64_t seed;
	int fam;
	int fn; /* the function that made it */
};

#define SLOTS 2048
#define MAILBOX 256
#define DENSE 65536 /* blocks up to this size are filled and checked whole */

struct mailbox {
	pthread_mutex_t mu;
	int n;
	struct block items[MAILBOX];
};

struct thread {
	int id;
	uint64_t rng;
	long ops;
	struct block slot[SLOTS];
	unsigned long calls[NFUNCS];
	unsigned long errors[NFUNCS];
	unsigned long lookups_ok, lookups_nodev;
	char str[8192];
	pthread_t tid;
};

static int nthreads;
static struct thread *threads;
static struct mailbox *mailboxes;
static size_t page;
static atomic_int messages;

/* Resolved at run time: not declared by glibc's headers (cfree), or glibc's
 * internal names.  Under the drop-in they are its definitions. */
static void (*p_cfree)(void *);
static void *(*p_libc_malloc)(size_t);
static void *(*p_libc_calloc)(size_t, size_t);
static void *(*p_libc_realloc)(void *, size_t);
static void (*p_libc_free)(void *);
static void *(*p_libc_memalign)(size_t, size_t);
static void *(*p_libc_valloc)(size_t);
static void *(*p_libc_pvalloc)(size_t);
/* Deprecated in glibc's header, called through a pointer. */
static void *(*p_pvalloc)(size_t);

static uint64_t rnd(struct thread *t)
{
	uint64_t x = t->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	t->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

__attribute__((format(printf, 3, 4))) static void fail(struct thread *t, int fn, const char *fmt, ...)
{
	t->errors[fn]++;
	if (atomic_fetch_add(&messages, 1) >= 20)
		return;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "FAIL [thread %d] %s: %s\n", t->id, fn_name[fn], buf);
}

static size_t rand_size(struct thread *t)
{
	unsigned c = (unsigned)(rnd(t) % 1000);
	uint64_t r = rnd(t);
	if (c < 700)
		return r % 257;
	if (c < 900)
		return 257 + r % 3840;
	if (c < 985)
		return 4097 + r % 61440;
	if (c < 999)
		return 65537 + r % (1u << 20);
	return (1u << 20) + r % (3u << 20);
}

static size_t rand_pow2(struct thread *t, unsigned lo_log, unsigned hi_log)
{
	return (size_t)1 << (lo_log + rnd(t) % (hi_log - lo_log + 1));
}

/* What malloc must give a block of n bytes: max_align_t, or less for an
 * object too small to need it. */
static size_t natural_align(size_t n)
{
	size_t a = 1;
	while (a < 16 && a * 2 <= n)
		a *= 2;
	return a;
}

/* ---- the pattern: byte i of a block is byte i%8 of word(seed, i/8) ---- */

static inline uint64_t word(uint64_t seed, size_t k)
{
	return (seed ^ (k * 0x9E3779B97F4A7C15ULL)) + k;
}

static void fill_range(unsigned char *p, size_t from, size_t to, uint64_t seed)
{
	size_t i = from;
	for (; i < to && i % 8; i++)
		p[i] = (unsigned char)(word(seed, i / 8) >> (i % 8 * 8));
	for (; i + 8 <= to; i += 8) {
		uint64_t w = word(seed, i / 8);
		memcpy(p + i, &w, 8);
	}
	for (; i < to; i++)
		p[i] = (unsigned char)(word(seed, i / 8) >> (i % 8 * 8));
}

/* The first offset in [from, to) that does not hold the pattern, or to. */
static size_t check_range(const unsigned char *p, size_t from, size_t to, uint64_t seed)
{
	size_t i = from;
	for (; i < to && i % 8; i++)
		if (p[i] != (unsigned char)(word(seed, i / 8) >> (i % 8 * 8)))
			return i;
	for (; i + 8 <= to; i += 8) {
		uint64_t w = word(seed, i / 8), v;
		memcpy(&v, p + i, 8);
		if (v != w)
			break;
	}
	for (; i < to; i++)
		if (p[i] != (unsigned char)(word(seed, i / 8) >> (i % 8 * 8)))
			return i;
	return to;
}

/* Fill [0, n): whole up to DENSE, else the first and last 4 KiB and 8 bytes
 * of every 4 KiB in between. */
static void fill(void *p, size_t n, uint64_t seed)
{
	if (n <= DENSE) {
		fill_range(p, 0, n, seed);
		return;
	}
	fill_range(p, 0, 4096, seed);
	for (size_t o = 4096; o + 4096 < n; o += 4096)
		fill_range(p, o, o + 8, seed);
	fill_range(p, n - 4096, n, seed);
}

/* The first offset in [0, keep) where what fill(p, n, seed) wrote is no
 * longer there, or keep (keep <= n: the prefix a realloc must preserve). */
static size_t check_prefix(const void *p, size_t keep, size_t n, uint64_t seed)
{
	if (n <= DENSE)
		return check_range(p, 0, keep, seed);
#define CLIP(x) ((x) < keep ? (x) : keep)
	size_t bad = check_range(p, 0, CLIP(4096), seed);
	if (bad != CLIP(4096))
		return bad;
	for (size_t o = 4096; o + 4096 < n && o < keep; o += 4096)
		if ((bad = check_range(p, o, CLIP(o + 8), seed)) != CLIP(o + 8))
			return bad;
	if (n - 4096 < keep && (bad = check_range(p, n - 4096, keep, seed)) != keep)
		return bad;
	return keep;
#undef CLIP
}

/* The first bad offset of fill()'s pattern over [0, n), or n. */
static size_t check(const void *p, size_t n, uint64_t seed)
{
	return check_prefix(p, n, n, seed);
}

/* The first nonzero offset of [0, n) (sampled like fill() above DENSE), or n. */
static size_t check_zero(const void *p, size_t n)
{
	const unsigned char *c = p;
	size_t step = n <= DENSE ? 1 : 509;
	for (size_t i = 0; i < n; i += step)
		if (c[i])
			return i;
	if (n && c[n - 1])
		return n - 1;
	return n;
}

static size_t usable_of(const struct block *b)
{
	return b->fam == FAM_RDMA ? rdma_malloc_usable_size(b->p) : malloc_usable_size(b->p);
}

/* One lookup must cover [p, p+u): 0 (then the region covers it too) or
 * ENODEV (no device: the range lies inside one unregistered chunk). */
static void check_keys(struct thread *t, int fn, void *p, size_t u)
{
	uint32_t lkey = 0, rkey = 0;
	int rc = rdma_malloc_keys(p, u, NULL, &lkey, &rkey);
	if (rc == ENODEV) {
		t->lookups_nodev++;
		return;
	}
	if (rc) {
		fail(t, fn, "rdma_malloc_keys(%p, %zu) = %s", p, u, strerror(rc));
		return;
	}
	t->lookups_ok++;
	struct ibv_mr *mr = rdma_malloc_mr(p, u, NULL);
	if (!mr) {
		fail(t, fn, "rdma_malloc_keys(%p, %zu) = 0 but rdma_malloc_mr: %s", p, u, strerror(errno));
		return;
	}
	uintptr_t lo = (uintptr_t)mr->addr, hi = lo + mr->length;
	if ((uintptr_t)p < lo || (uintptr_t)p + u > hi || mr->lkey != lkey || mr->rkey != rkey)
		fail(t, fn, "region [%#lx, %#lx) keys %#x/%#x does not cover [%p, +%zu) keys %#x/%#x",
		     (unsigned long)lo, (unsigned long)hi, mr->lkey, mr->rkey, p, u, lkey, rkey);
}

/* The checks of a new block b (made by b->fn); fills it. 0 when usable. */
static int admit(struct thread *t, struct block *b, size_t min_usable, int zeroed)
{
	int fn = b->fn;
	if (!b->p) {
		fail(t, fn, "NULL for %zu bytes (align %zu): %s", b->n, b->align, strerror(errno));
		return -1;
	}
	size_t align = b->align ? b->align : natural_align(b->n);
	if ((uintptr_t)b->p % align)
		fail(t, fn, "%p of %zu bytes is not aligned to %zu", b->p, b->n, align);
	b->u = usable_of(b);
	t->calls[b->fam == FAM_RDMA ? F_RDMA_USABLE : F_USABLE]++;
	if (b->u < min_usable) {
		fail(t, fn, "usable size %zu < %zu", b->u, min_usable);
		b->u = b->n; /* do not write past what was asked */
	}
	if (zeroed) {
		size_t z = check_zero(b->p, b->n);
		if (z != b->n)
			fail(t, fn, "byte %zu of %zu is not zero", z, b->n);
	}
	check_keys(t, fn, b->p, b->u);
	b->seed = rnd(t);
	fill(b->p, b->u, b->seed);
	return 0;
}

static void verify(struct thread *t, const struct block *b, int fn)
{
	size_t bad = check(b->p, b->u, b->seed);
	if (bad != b->u)
		fail(t, fn, "block %p of %zu (usable %zu, from %s) corrupt at byte %zu", b->p, b->n, b->u,
		     fn_name[b->fn], bad);
}

/* A deterministic string of length len in t->str. */
static const char *make_str(struct thread *t, size_t len)
{
	if (len >= sizeof(t->str))
		len = sizeof(t->str) - 1;
	uint64_t s = rnd(t);
	for (size_t i = 0; i < len; i++)
		t->str[i] = (char)('a' + (s + i * 7) % 26);
	t->str[len] = '\0';
	return t->str;
}

static void allocate(struct thread *t, struct block *b)
{
	static const int cxx_kind[] = {
		[F_NEW] = ABI_NEW,	       [F_NEW_ARR] = ABI_NEW_ARR,	[F_NEW_NT] = ABI_NEW_NT,
		[F_NEW_ARR_NT] = ABI_NEW_ARR_NT, [F_NEW_AL] = ABI_NEW_AL,	[F_NEW_ARR_AL] = ABI_NEW_ARR_AL,
		[F_NEW_AL_NT] = ABI_NEW_AL_NT,   [F_NEW_ARR_AL_NT] = ABI_NEW_ARR_AL_NT,
	};
	int fn;
	do { /* malloc twice as often as the others */
		fn = (int)(rnd(t) % (NALLOC + 1));
		if (fn == NALLOC)
			fn = F_MALLOC;
	} while ((fn == F_LIBC_MALLOC && !p_libc_malloc) || (fn == F_LIBC_CALLOC && !p_libc_calloc) ||
		 (fn == F_LIBC_MEMALIGN && !p_libc_memalign) || (fn == F_LIBC_VALLOC && !p_libc_valloc) ||
		 (fn == F_LIBC_PVALLOC && !p_libc_pvalloc) || (fn == F_PVALLOC && !p_pvalloc));
	memset(b, 0, sizeof(*b));
	b->fn = fn;
	b->fam = FAM_C;
	size_t n = rand_size(t), min_usable, k;
	int zeroed = 0;
	const char *s;
	switch (fn) {
	case F_MALLOC:
		b->p = malloc(n);
		break;
	case F_LIBC_MALLOC:
		b->p = p_libc_malloc(n);
		break;
	case F_CALLOC:
	case F_LIBC_CALLOC:
	case F_RDMA_CALLOC:
		k = 1 + rnd(t) % 8;
		n = n / k * k;
		b->p = fn == F_CALLOC	   ? calloc(k, n / k)
		       : fn == F_LIBC_CALLOC ? p_libc_calloc(k, n / k)
					     : rdma_calloc(k, n / k);
		zeroed = 1;
		break;
	case F_REALLOC_NULL:
		b->p = realloc(NULL, n);
		break;
	case F_REALLOCARRAY_NULL:
		k = 1 + rnd(t) % 8;
		n = n / k * k;
		b->p = reallocarray(NULL, k, n / k);
		break;
	case F_POSIX_MEMALIGN:
	case F_RDMA_POSIX_MEMALIGN: {
		b->align = rand_pow2(t, 3, rnd(t) % 16 ? 12 : 16);
		void *p = NULL;
		int rc = fn == F_POSIX_MEMALIGN ? posix_memalign(&p, b->align, n)
						: rdma_posix_memalign(&p, b->align, n);
		if (rc)
			errno = rc;
		b->p = rc ? NULL : p;
		break;
	}
	case F_ALIGNED_ALLOC:
	case F_RDMA_ALIGNED_ALLOC:
		b->align = rand_pow2(t, 0, rnd(t) % 16 ? 12 : 16);
		b->p = fn == F_ALIGNED_ALLOC ? aligned_alloc(b->align, n) : rdma_aligned_alloc(b->align, n);
		break;
	case F_MEMALIGN:
	case F_LIBC_MEMALIGN: {
		/* Any alignment: glibc rounds one that is not a power of two up. */
		size_t asked = 1 + rnd(t) % 4096;
		b->align = 1;
		while (b->align < asked)
			b->align *= 2;
		b->p = fn == F_MEMALIGN ? memalign(asked, n) : p_libc_memalign(asked, n);
		break;
	}
	case F_VALLOC:
	case F_LIBC_VALLOC:
		b->align = page;
		b->p = fn == F_VALLOC ? valloc(n) : p_libc_valloc(n);
		break;
	case F_PVALLOC:
	case F_LIBC_PVALLOC:
		b->align = page;
		b->p = fn == F_PVALLOC ? p_pvalloc(n) : p_libc_pvalloc(n);
		b->n = n;
		min_usable = (n + page - 1) / page * page; /* glibc: no page for 0 */
		if (admit(t, b, min_usable, 0))
			b->p = NULL;
		return;
	case F_STRDUP:
	case F_STRNDUP: {
		size_t len = n % 4096;
		s = make_str(t, len);
		/* strndup's limit: below, at or past the string's length */
		size_t lim = (size_t)(rnd(t) % (len + 16)), keep = lim < len ? lim : len;
		b->p = fn == F_STRDUP ? strdup(s) : strndup(s, lim);
		n = (fn == F_STRDUP ? len : keep) + 1;
		if (b->p && (memcmp(b->p, s, n - 1) || ((char *)b->p)[n - 1]))
			fail(t, fn, "copy of %zu bytes of a %zu-byte string differs", n - 1, len);
		break;
	}
	case F_RDMA_MALLOC:
		b->fam = FAM_RDMA;
		b->p = rdma_malloc(n);
		break;
	default: /* operator new */
		b->fam = fn == F_NEW || fn == F_NEW_NT		? FAM_NEW
			 : fn == F_NEW_ARR || fn == F_NEW_ARR_NT ? FAM_NEW_ARR
			 : fn == F_NEW_AL || fn == F_NEW_AL_NT	? FAM_NEW_AL
								: FAM_NEW_ARR_AL;
		if (b->fam == FAM_NEW_AL || b->fam == FAM_NEW_ARR_AL)
			b->align = rand_pow2(t, 4, rnd(t) % 16 ? 12 : 16);
		b->p = abi_new(cxx_kind[fn], n, b->align);
		break;
	}
	if (fn == F_RDMA_CALLOC || fn == F_RDMA_POSIX_MEMALIGN || fn == F_RDMA_ALIGNED_ALLOC)
		b->fam = FAM_RDMA;
	b->n = n;
	if (admit(t, b, n, zeroed))
		b->p = NULL;
}

/* Free b with one of the deallocators of its family. */
static void release(struct thread *t, struct block *b)
{
	int fn;
	uint64_t r = rnd(t) % 4;
	switch (b->fam) {
	case FAM_C:
		fn = r == 0 ? F_FREE : r == 1 ? F_CFREE : r == 2 ? F_LIBC_FREE : F_REALLOC_ZERO;
		if ((fn == F_CFREE && !p_cfree) || (fn == F_LIBC_FREE && !p_libc_free))
			fn = F_FREE;
		if (fn == F_FREE)
			free(b->p);
		else if (fn == F_CFREE)
			p_cfree(b->p);
		else if (fn == F_LIBC_FREE)
			p_libc_free(b->p);
		else {
			errno = 0;
			void *q = realloc(b->p, 0);
			if (q) { /* glibc frees and returns NULL */
				fail(t, fn, "returned %p, not NULL (glibc frees)", q);
				free(q);
			}
		}
		break;
	case FAM_RDMA:
		fn = F_RDMA_FREE;
		rdma_free(b->p);
		break;
	default: {
		static const int dk[][3] = {
			[FAM_NEW] = { ABI_DELETE, ABI_DELETE_SIZED, ABI_DELETE_NT },
			[FAM_NEW_ARR] = { ABI_DELETE_ARR, ABI_DELETE_ARR_SIZED, ABI_DELETE_ARR_NT },
			[FAM_NEW_AL] = { ABI_DELETE_AL, ABI_DELETE_SIZED_AL, ABI_DELETE_AL_NT },
			[FAM_NEW_ARR_AL] = { ABI_DELETE_ARR_AL, ABI_DELETE_ARR_SIZED_AL, ABI_DELETE_ARR_AL_NT },
		};
		int kind = dk[b->fam][r % 3];
		fn = F_DELETE + kind; /* the F_DELETE* follow enum abi_delete_kind */
		abi_delete(kind, b->p, b->n, b->align);
		break;
	}
	}
	t->calls[fn]++;
	b->p = NULL;
}

/* realloc, reallocarray, __libc_realloc or rdma_realloc of a live block. */
static void resize(struct thread *t, struct block *b)
{
	size_t n = rnd(t) % 2 ? b->n + 1 + rand_size(t) : b->n / (2 + rnd(t) % 8);
	int fn, via = (int)(rnd(t) % 4);
	void *q;
	size_t k = 1;
	if (b->fam == FAM_RDMA) {
		fn = F_RDMA_REALLOC;
		q = rdma_realloc(b->p, n ? n : 1);
		n = n ? n : 1;
	} else if (via == 0 && n) {
		fn = F_REALLOCARRAY;
		k = 1 + rnd(t) % 4;
		n = (n + k - 1) / k * k;
		q = reallocarray(b->p, k, n / k);
	} else if (via == 1 && p_libc_realloc && n) {
		fn = F_LIBC_REALLOC;
		q = p_libc_realloc(b->p, n);
	} else {
		if (!n)
			n = 1; /* realloc(p, 0) frees: release() does it */
		fn = n > b->n ? F_REALLOC_GROW : F_REALLOC_SHRINK;
		q = realloc(b->p, n);
	}
	t->calls[fn]++;
	if (!q) {
		fail(t, fn, "NULL for %zu -> %zu bytes: %s", b->n, n, strerror(errno));
		return; /* the old block is still live */
	}
	struct block nb = *b;
	nb.p = q;
	nb.n = n;
	nb.fn = fn;
	nb.align = 0; /* a resized block has malloc's alignment */
	size_t keep = b->n < n ? b->n : n;
	size_t bad = check_prefix(q, keep, b->u, b->seed);
	if (bad != keep)
		fail(t, fn, "%zu -> %zu bytes: prefix of %zu corrupt at byte %zu", b->n, n, keep, bad);
	/* admit() draws a new seed and refills the whole usable size. */
	if (admit(t, &nb, n, 0) == 0)
		*b = nb;
}

static void handoff(struct thread *t, struct block *b)
{
	if (nthreads < 2) {
		release(t, b);
		return;
	}
	int to = (t->id + 1 + (int)(rnd(t) % (uint64_t)(nthreads - 1))) % nthreads;
	struct mailbox *m = &mailboxes[to];
	pthread_mutex_lock(&m->mu);
	int put = m->n < MAILBOX;
	if (put)
		m->items[m->n++] = *b;
	pthread_mutex_unlock(&m->mu);
	if (put)
		b->p = NULL;
	else
		release(t, b);
}

static void drain(struct thread *t, struct mailbox *m)
{
	static __thread struct block items[MAILBOX];
	pthread_mutex_lock(&m->mu);
	int n = m->n;
	memcpy(items, m->items, (size_t)n * sizeof(items[0]));
	m->n = 0;
	pthread_mutex_unlock(&m->mu);
	for (int i = 0; i < n; i++) {
		t->calls[F_CROSS_THREAD]++;
		verify(t, &items[i], F_CROSS_THREAD);
		check_keys(t, F_CROSS_THREAD, items[i].p, items[i].u);
		release(t, &items[i]);
	}
}

/* Values the compiler must not reason about (it rightly warns about the
 * impossible sizes, and about using a pointer after a failed realloc). */
static size_t opaque_size(size_t n)
{
	__asm__("" : "+r"(n));
	return n;
}

static void *opaque_ptr(void *p)
{
	__asm__("" : "+r"(p));
	return p;
}

/* The cases with an answer fixed by the C library's contract. */
static void edges(struct thread *t)
{
	const size_t huge = opaque_size(SIZE_MAX - 8192), half = opaque_size(SIZE_MAX / 2);
	errno = 0;
	void *p = malloc(huge);
	t->calls[F_MALLOC]++;
	if (p || errno != ENOMEM)
		fail(t, F_MALLOC, "malloc(SIZE_MAX - 8192) = %p, errno %d (want NULL, ENOMEM)", p, errno);
	free(p);
	p = malloc(0);
	t->calls[F_MALLOC]++;
	if (!p)
		fail(t, F_MALLOC, "malloc(0) = NULL (glibc returns a unique pointer)");
	free(p);
	errno = 0;
	p = calloc(half, 3);
	t->calls[F_CALLOC]++;
	if (p || errno != ENOMEM)
		fail(t, F_CALLOC, "calloc(SIZE_MAX/2, 3) = %p, errno %d (want NULL, ENOMEM)", p, errno);
	free(p);

	struct block b = { .p = malloc(100), .n = 100, .fn = F_MALLOC, .fam = FAM_C };
	t->calls[F_MALLOC]++;
	if (admit(t, &b, 100, 0))
		return;
	errno = 0;
	p = reallocarray(opaque_ptr(b.p), half, 3);
	t->calls[F_REALLOCARRAY]++;
	if (p || errno != ENOMEM)
		fail(t, F_REALLOCARRAY, "reallocarray(p, SIZE_MAX/2, 3) = %p, errno %d (want NULL, ENOMEM)", p,
		     errno);
	errno = 0;
	p = realloc(opaque_ptr(b.p), huge);
	t->calls[F_REALLOC_GROW]++;
	if (p || errno != ENOMEM)
		fail(t, F_REALLOC_GROW, "realloc(p, SIZE_MAX - 8192) = %p, errno %d (want NULL, ENOMEM)", p,
		     errno);
	verify(t, &b, F_REALLOC_GROW); /* a failed realloc leaves the block alone */
	release(t, &b);

	void *q = &q;
	int rc = posix_memalign(&q, 3 * sizeof(void *), 64);
	int rc2 = posix_memalign(&q, sizeof(void *) / 2, 64);
	t->calls[F_POSIX_MEMALIGN] += 2;
	if (rc != EINVAL || rc2 != EINVAL || q != &q)
		fail(t, F_POSIX_MEMALIGN, "bad alignments gave %d and %d (want EINVAL) and %s *memptr", rc, rc2,
		     q != &q ? "changed" : "kept");
	if (p_pvalloc) {
		p = p_pvalloc(0);
		t->calls[F_PVALLOC]++;
		if (!p || (uintptr_t)p % page)
			fail(t, F_PVALLOC, "pvalloc(0) = %p (want a page-aligned pointer)", p);
		free(p);
	}
	t->calls[F_USABLE]++;
	if (malloc_usable_size(NULL) != 0)
		fail(t, F_USABLE, "malloc_usable_size(NULL) = %zu", malloc_usable_size(NULL));
	free(NULL);
	if (p_cfree)
		p_cfree(NULL);
	abi_delete(ABI_DELETE, NULL, 0, 0);
	abi_delete(ABI_DELETE_ARR_AL, NULL, 0, 64);
	abi_delete(ABI_DELETE_SIZED, NULL, 16, 0); /* the size of a null pointer means nothing */
	abi_delete(ABI_DELETE_ARR_SIZED, NULL, 0, 0);
	int bad = abi_new_exhaustion();
	t->calls[F_NEW]++;
	if (bad)
		fail(t, F_NEW, "%d operator new forms did not throw std::bad_alloc / return NULL for SIZE_MAX/2",
		     bad);
}

static void *worker(void *arg)
{
	struct thread *t = arg;
	edges(t);
	for (long op = 0; op < t->ops; op++) {
		if (op % 32 == 0)
			drain(t, &mailboxes[t->id]);
		struct block *b = &t->slot[rnd(t) % SLOTS];
		if (!b->p) {
			allocate(t, b);
			t->calls[b->fn]++;
			continue;
		}
		verify(t, b, b->fn);
		unsigned r = (unsigned)(rnd(t) % 100);
		if (r < 45)
			release(t, b);
		else if (r < 75)
			resize(t, b);
		else if (r < 90)
			handoff(t, b);
		else {
			size_t u = usable_of(b);
			t->calls[b->fam == FAM_RDMA ? F_RDMA_USABLE : F_USABLE]++;
			if (u != b->u)
				fail(t, b->fam == FAM_RDMA ? F_RDMA_USABLE : F_USABLE,
				     "usable size of %p changed from %zu to %zu", b->p, b->u, u);
			check_keys(t, b->fn, b->p, b->u);
		}
	}
	for (int i = 0; i < SLOTS; i++)
		if (t->slot[i].p) {
			verify(t, &t->slot[i], t->slot[i].fn);
			release(t, &t->slot[i]);
		}
	drain(t, &mailboxes[t->id]);
	return NULL;
}

static const char *lib_of(void *f)
{
	Dl_info info;
	if (!dladdr(f, &info) || !info.dli_fname)
		return "?";
	const char *s = strrchr(info.dli_fname, '/');
	return s ? s + 1 : info.dli_fname;
}

int main(int argc, char **argv)
{
	/* Each line out at once: a piped log keeps what came before a crash. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	long ops = argc > 1 ? atol(argv[1]) : 1000000;
	nthreads = argc > 2 ? atoi(argv[2]) : 4;
	uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
	if (ops < 1 || nthreads < 1 || nthreads > 64) {
		fprintf(stderr, "usage: abi_random [OPS [THREADS [SEED]]]\n");
		return 2;
	}
	page = (size_t)sysconf(_SC_PAGESIZE);
	p_cfree = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
	p_libc_malloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc");
	p_libc_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_DEFAULT, "__libc_calloc");
	p_libc_realloc = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "__libc_realloc");
	p_libc_free = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
	p_libc_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_DEFAULT, "__libc_memalign");
	p_libc_valloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_valloc");
	p_libc_pvalloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_pvalloc");
	p_pvalloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "pvalloc");
	void *opnew = dlsym(RTLD_DEFAULT, "_Znwm");
	printf("abi_random: malloc from %s, operator new from %s, cfree %s\n", lib_of((void *)malloc),
	       opnew ? lib_of(opnew) : "?", p_cfree ? lib_of((void *)p_cfree) : "not exported");
	/* The lookup must tell memory that is not rdmalloc's. */
	int local = 0;
	int rc = rdma_malloc_keys(&local, sizeof(local), NULL, NULL, NULL);
	int sanity = rc == ENOENT;
	if (!sanity)
		printf("FAIL rdma_malloc_keys(stack address) = %d (want ENOENT)\n", rc);

	threads = calloc((size_t)nthreads, sizeof(*threads));
	mailboxes = calloc((size_t)nthreads, sizeof(*mailboxes));
	if (!threads || !mailboxes)
		return 2;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < nthreads; i++) {
		pthread_mutex_init(&mailboxes[i].mu, NULL);
		threads[i].id = i;
		threads[i].rng = (seed + 1) * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)(i + 1) << 32);
		threads[i].ops = ops / nthreads + (i < ops % nthreads);
	}
	for (int i = 0; i < nthreads; i++)
		if (pthread_create(&threads[i].tid, NULL, worker, &threads[i])) {
			fprintf(stderr, "pthread_create failed\n");
			return 2;
		}
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i].tid, NULL);
	for (int i = 0; i < nthreads; i++) /* blocks handed over after their owner finished */
		drain(&threads[0], &mailboxes[i]);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	unsigned long calls[NFUNCS] = { 0 }, errors[NFUNCS] = { 0 }, lk_ok = 0, lk_nodev = 0;
	long total = 0;
	for (int i = 0; i < nthreads; i++) {
		for (int f = 0; f < NFUNCS; f++) {
			calls[f] += threads[i].calls[f];
			errors[f] += threads[i].errors[f];
		}
		lk_ok += threads[i].lookups_ok;
		lk_nodev += threads[i].lookups_nodev;
		total += threads[i].ops;
	}
	int passed = 0, failed = 0, skipped = 0;
	for (int f = 0; f < NFUNCS; f++) {
		int absent = (f == F_CFREE && !p_cfree) || (f == F_LIBC_MALLOC && !p_libc_malloc) ||
			     (f == F_LIBC_CALLOC && !p_libc_calloc) || (f == F_LIBC_REALLOC && !p_libc_realloc) ||
			     (f == F_LIBC_FREE && !p_libc_free) || (f == F_LIBC_MEMALIGN && !p_libc_memalign) ||
			     (f == F_LIBC_VALLOC && !p_libc_valloc) || (f == F_LIBC_PVALLOC && !p_libc_pvalloc) ||
			     (f == F_PVALLOC && !p_pvalloc);
		if (absent) {
			printf("SKIP %s: not exported by any loaded library\n", fn_name[f]);
			skipped++;
		} else if (errors[f] || !calls[f]) {
			printf("FAIL %s: %lu calls, %lu errors\n", fn_name[f], calls[f], errors[f]);
			failed++;
		} else {
			printf("ok   %s: %lu calls\n", fn_name[f], calls[f]);
			passed++;
		}
	}
	/* With a device every lookup succeeds; without, every one says ENODEV. */
	if (lk_ok && lk_nodev) {
		printf("FAIL lookups: %lu returned 0 but %lu ENODEV (a chunk without registration?)\n", lk_ok,
		       lk_nodev);
		failed++;
	} else if (!lk_ok && !lk_nodev) {
		printf("FAIL lookups: none succeeded\n");
		failed++;
	} else {
		printf("ok   lookups of the whole usable size: %lu returned 0 (registered), %lu ENODEV (no device)\n",
		       lk_ok, lk_nodev);
		passed++;
	}
	if (sanity)
		passed++;
	else
		failed++;
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("abi_random: %ld operations in %d threads (seed %llu), %.1f s%s\n", total, nthreads,
	       (unsigned long long)seed, secs, skipped ? "; some functions SKIPPED (not exported)" : "");
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
