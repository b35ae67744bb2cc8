/* SPDX-License-Identifier: MIT */
/*
 * test_rdma.c - the data path: RDMA WRITE/READ, SEND/RECV and atomics on
 * memory from every allocation function, and at the edges of a chunk.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "e2e.h"

static const size_t sizes[] = { 8, 4 * KiB, 1 * MiB, 64 * MiB };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/*
 * WRITE @a -> @b, then READ @b -> @a, @size bytes each, with every byte of
 * the destination checked, and the slack of the destination up to its usable
 * size untouched.
 */
static void write_read(void *a, void *b, size_t size, uint32_t seed, const char *what)
{
	char msg[256];
	size_t ua = rdma_malloc_usable_size(a), ub = rdma_malloc_usable_size(b);
	cr_assert(ua >= size && ub >= size, "%s: usable sizes %zu and %zu < %zu", what, ua, ub, size);

	e2e_fill(a, size, seed);
	memset(b, 0xa5, ub);
	snprintf(msg, sizeof(msg), "RDMA WRITE of %zu B into %s", size, what);
	E2E_ASSERT_WC_OK(e2e_write(&e2e, b, a, size), msg);
	E2E_ASSERT_PATTERN(b, size, seed, msg);
	snprintf(msg, sizeof(msg), "RDMA WRITE of %zu B into %s: slack past the end", size, what);
	E2E_ASSERT_CONST((char *)b + size, ub - size, 0xa5, msg);

	e2e_fill(b, size, seed ^ 0x5555u);
	memset(a, 0x5a, ua);
	snprintf(msg, sizeof(msg), "RDMA READ of %zu B from %s", size, what);
	E2E_ASSERT_WC_OK(e2e_read(&e2e, a, b, size), msg);
	E2E_ASSERT_PATTERN(a, size, seed ^ 0x5555u, msg);
	snprintf(msg, sizeof(msg), "RDMA READ of %zu B from %s: slack past the end", size, what);
	E2E_ASSERT_CONST((char *)a + size, ua - size, 0x5a, msg);
}

E2E_TEST(write_read_malloc, 120)
{
	for (size_t i = 0; i < NSIZES; i++) {
		char what[64];
		snprintf(what, sizeof(what), "rdma_malloc(%zu) buffers", sizes[i]);
		void *a = rdma_malloc(sizes[i]), *b = rdma_malloc(sizes[i]);
		cr_assert(a && b, "%s: %s", what, strerror(errno));
		write_read(a, b, sizes[i], (uint32_t)(100 + i), what);
		rdma_free(a);
		rdma_free(b);
	}
}

E2E_TEST(write_read_calloc, 120)
{
	for (size_t i = 0; i < NSIZES; i++) {
		char what[64];
		snprintf(what, sizeof(what), "rdma_calloc(%zu, 8) buffers", sizes[i] / 8);
		void *a = rdma_calloc(sizes[i] / 8, 8), *b = rdma_calloc(sizes[i] / 8, 8);
		cr_assert(a && b, "%s: %s", what, strerror(errno));
		E2E_ASSERT_CONST(a, sizes[i], 0, "rdma_calloc memory is not zero");
		E2E_ASSERT_CONST(b, sizes[i], 0, "rdma_calloc memory is not zero");
		write_read(a, b, sizes[i], (uint32_t)(200 + i), what);
		rdma_free(a);
		rdma_free(b);
	}
}

/*
 * A buffer of @size bytes obtained by growing a smaller patterned one with
 * rdma_realloc() so that it moves (a live allocation right after it blocks
 * growth in place); the grown buffer must keep the old bytes.  For 8 bytes
 * there is no smaller size class to grow from: it grows 1 -> 8 in place.
 */
static void *grown(size_t size, uint32_t seed, void **fences, size_t *nfences)
{
	size_t small = size > 8 ? size / 2 : 1;
	for (int attempt = 0; attempt < 8; attempt++) {
		void *p = rdma_malloc(small);
		cr_assert(p, "rdma_malloc(%zu): %s", small, strerror(errno));
		e2e_fill(p, small, seed);
		fences[(*nfences)++] = rdma_malloc(small);
		void *q = rdma_realloc(p, size);
		cr_assert(q, "rdma_realloc(%p, %zu): %s", p, size, strerror(errno));
		char msg[128];
		snprintf(msg, sizeof(msg), "rdma_realloc(%zu -> %zu) lost the old contents", small, size);
		E2E_ASSERT_PATTERN(q, small, seed, msg);
		if (q != p || size == 8)
			return q;
		fences[(*nfences)++] = q; /* grew in place: try again */
	}
	cr_assert_fail("rdma_realloc(%zu -> %zu) never moved the buffer in 8 attempts", small, size);
	return NULL;
}

E2E_TEST(write_read_realloc, 150)
{
	for (size_t i = 0; i < NSIZES; i++) {
		void *fences[32];
		size_t nf = 0;
		void *a = grown(sizes[i], (uint32_t)(300 + i), fences, &nf);
		void *b = grown(sizes[i], (uint32_t)(310 + i), fences, &nf);
		/* The keys are looked up again for the moved pointers. */
		uint32_t lk, rk;
		E2E_ASSERT_KEYS(a, sizes[i], NULL, &lk, &rk, "keys of a moved realloc buffer");
		struct ibv_mr *mr = rdma_malloc_mr(a, sizes[i], NULL);
		cr_assert(mr && mr->lkey == lk && mr->rkey == rk,
			  "rdma_malloc_mr of the moved buffer disagrees with rdma_malloc_keys");
		char what[64];
		snprintf(what, sizeof(what), "rdma_realloc'ed (moved) %zu-byte buffers", sizes[i]);
		write_read(a, b, sizes[i], (uint32_t)(320 + i), what);
		rdma_free(a);
		rdma_free(b);
		for (size_t f = 0; f < nf; f++)
			rdma_free(fences[f]);
	}
}

E2E_TEST(write_read_aligned_alloc, 120)
{
	static const size_t aligns[] = { 64, 4 * KiB, 2 * MiB, 4 * KiB };
	for (size_t i = 0; i < NSIZES; i++) {
		char what[80];
		snprintf(what, sizeof(what), "rdma_aligned_alloc(%zu, %zu) buffers", aligns[i], sizes[i]);
		void *a = rdma_aligned_alloc(aligns[i], sizes[i]);
		void *b = rdma_aligned_alloc(aligns[i], sizes[i]);
		cr_assert(a && b, "%s: %s", what, strerror(errno));
		cr_assert((uintptr_t)a % aligns[i] == 0 && (uintptr_t)b % aligns[i] == 0,
			  "%s: %p / %p misaligned", what, a, b);
		write_read(a, b, sizes[i], (uint32_t)(400 + i), what);
		rdma_free(a);
		rdma_free(b);
	}
}

E2E_TEST(write_read_posix_memalign, 120)
{
	static const size_t aligns[] = { 16, 256, 64 * KiB, 1 * MiB };
	for (size_t i = 0; i < NSIZES; i++) {
		char what[80];
		snprintf(what, sizeof(what), "rdma_posix_memalign(%zu, %zu) buffers", aligns[i], sizes[i]);
		void *a = NULL, *b = NULL;
		int ea = rdma_posix_memalign(&a, aligns[i], sizes[i]);
		int eb = rdma_posix_memalign(&b, aligns[i], sizes[i]);
		cr_assert(ea == 0 && eb == 0, "%s: %s / %s", what, strerror(ea), strerror(eb));
		cr_assert((uintptr_t)a % aligns[i] == 0 && (uintptr_t)b % aligns[i] == 0,
			  "%s: %p / %p misaligned", what, a, b);
		write_read(a, b, sizes[i], (uint32_t)(500 + i), what);
		rdma_free(a);
		rdma_free(b);
	}
}

/*
 * Allocations in a pthread key destructor that runs after jemalloc has
 * cleaned its thread up (a key made after the library's runs later):
 * jemalloc would serve them from its arena 0, memory of no chunk, so they
 * are big blocks, a chunk of their own each (api/alloc.c, alloc_ended).
 * The NIC writes into each and reads it back, from the main thread, every
 * byte checked.  One thread allocated before its end, one only read the
 * stats (its first allocation tells it has ended).
 */
enum { LATE_BLOCKS = 4 };
struct late {
	int allocated_before;
	void *p[LATE_BLOCKS];
};
static const size_t late_len[LATE_BLOCKS] = { 100, 4096, 300 * KiB, 3000 };
static pthread_key_t late_key;

static void late_destructor(void *arg)
{
	struct late *l = arg;
	l->p[0] = rdma_malloc(late_len[0]);
	l->p[1] = rdma_calloc(late_len[1] / 8, 8);
	l->p[2] = rdma_aligned_alloc(4096, late_len[2]);
	unsigned char *r = rdma_malloc(10);
	if (r) {
		memset(r, 0x3c, 10);
		l->p[3] = rdma_realloc(r, late_len[3]);
		if (!l->p[3])
			rdma_free(r);
	}
}

static void *late_thread(void *arg)
{
	struct late *l = arg;
	if (l->allocated_before) {
		rdma_free(rdma_malloc(64));
	} else {
		struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
		rdma_malloc_stats_get(&st);
	}
	pthread_setspecific(late_key, l);
	return NULL;
}

E2E_TEST(write_read_from_a_late_destructor, 60)
{
	cr_assert_eq(pthread_key_create(&late_key, late_destructor), 0);
	for (int before = 1; before >= 0; before--) {
		struct late l = { .allocated_before = before };
		struct rdma_malloc_stats st0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st0) };
		struct rdma_malloc_stats st1 = st0;
		cr_assert_eq(rdma_malloc_stats_get(&st0), 0);
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, late_thread, &l), 0);
		pthread_join(t, NULL);
		cr_assert_eq(rdma_malloc_stats_get(&st1), 0);
		/* The three small ones served as an ended thread's: counted in
		 * fallbacks (300 KiB is a big block anyway). */
		cr_assert_geq(st1.fallbacks - st0.fallbacks, 3, "%s: %llu fallbacks for 3 small late blocks",
			      before ? "allocated before" : "stats only",
			      (unsigned long long)(st1.fallbacks - st0.fallbacks));
		for (int i = 0; i < LATE_BLOCKS; i++) {
			char what[96];
			snprintf(what, sizeof(what), "block %d (%zu B) of a late destructor (%s)", i, late_len[i],
				 before ? "allocated before" : "stats only");
			cr_assert(l.p[i], "%s: %s", what, "NULL");
			if (i == 1)
				E2E_ASSERT_CONST(l.p[i], late_len[i], 0, "rdma_calloc in a late destructor: not zero");
			if (i == 3)
				E2E_ASSERT_CONST(l.p[i], 10, 0x3c, "rdma_realloc in a late destructor lost the bytes");
			void *b = rdma_malloc(late_len[i]);
			cr_assert(b, "rdma_malloc(%zu): %s", late_len[i], strerror(errno));
			write_read(l.p[i], b, late_len[i], (uint32_t)(500 + 10 * before + i), what);
			rdma_free(l.p[i]);
			rdma_free(b);
		}
	}
	pthread_key_delete(late_key);
}

E2E_TEST(send_recv, 60)
{
	static const size_t lens[] = { 8, 4 * KiB, 1 * MiB };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t len = lens[i], room = len + 64;
		uint8_t *src = rdma_malloc(len);
		uint8_t *dst = rdma_calloc(1, room);
		cr_assert(src && dst, "allocation: %s", strerror(errno));
		uint32_t seed = (uint32_t)(600 + i);
		e2e_fill(src, len, seed);
		memset(dst, 0xa5, room);
		size_t got = 0;
		char what[80];
		snprintf(what, sizeof(what), "SEND/RECV of %zu B between rdmalloc buffers", len);
		E2E_ASSERT_WC_OK(e2e_send_recv(&e2e, dst, room, src, len, &got), what);
		cr_assert(got == len, "%s: the receive completion says %zu bytes", what, got);
		E2E_ASSERT_PATTERN(dst, len, seed, what);
		E2E_ASSERT_CONST(dst + len, 64, 0xa5, "SEND/RECV wrote past the message");
		E2E_ASSERT_PATTERN(src, len, seed, "SEND changed its source buffer");
		rdma_free(src);
		rdma_free(dst);
	}
}

E2E_TEST(atomic_fetch_add, 60)
{
	/* A lone word, and every 8-byte-aligned word of a 4 KiB buffer's ends. */
	uint64_t *lone = rdma_malloc(8);
	uint64_t *arr = rdma_aligned_alloc(8, 4 * KiB);
	cr_assert(lone && arr, "allocation: %s", strerror(errno));
	cr_assert((uintptr_t)lone % 8 == 0, "rdma_malloc(8) = %p is not 8-byte aligned", (void *)lone);
	uint64_t *words[] = { lone, &arr[0], &arr[1], &arr[255] };
	for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
		memset(arr, 0x11, 4 * KiB);
		uint64_t start = 0x0123456789abcdefull + w;
		*words[w] = start;
		uint64_t expect = start;
		for (uint64_t k = 1; k <= 50; k++) {
			uint64_t add = k * 0x100000001ull, old = 0;
			int st = e2e_fetch_add(&e2e, words[w], add, &old);
			E2E_ASSERT_WC_OK(st, "atomic fetch-and-add");
			cr_assert(old == expect,
				  "fetch-and-add #%llu on word %zu (%p): returned old value 0x%llx, want 0x%llx",
				  (unsigned long long)k, w, (void *)words[w], (unsigned long long)old,
				  (unsigned long long)expect);
			expect += add;
		}
		cr_assert(*words[w] == expect, "after 50 fetch-and-adds word %zu holds 0x%llx, want 0x%llx",
			  w, (unsigned long long)*words[w], (unsigned long long)expect);
		if (words[w] != lone)
			for (size_t j = 0; j < 4 * KiB; j++)
				if (&arr[j / 8] != words[w])
					cr_assert(((uint8_t *)arr)[j] == 0x11,
						  "fetch-and-add on word %zu changed byte %zu of its buffer", w, j);
	}
	rdma_free(lone);
	rdma_free(arr);
}

E2E_TEST(atomic_cmp_swap, 60)
{
	uint64_t *arr = rdma_calloc(512, 8);
	cr_assert(arr, "rdma_calloc: %s", strerror(errno));
	size_t idx[] = { 0, 7, 511 };
	for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++) {
		uint64_t *w = &arr[idx[i]], old = 0;
		uint64_t a = 0xfeedfacecafebeefull ^ idx[i], b = 0x1122334455667788ull + idx[i];
		*w = a;
		/* Matching compare: swapped, old value returned. */
		E2E_ASSERT_WC_OK(e2e_cmp_swap(&e2e, w, a, b, &old), "compare-and-swap (match)");
		cr_assert(old == a, "CAS on word %zu returned 0x%llx, want 0x%llx", idx[i],
			  (unsigned long long)old, (unsigned long long)a);
		cr_assert(*w == b, "CAS (match) on word %zu left 0x%llx, want 0x%llx", idx[i],
			  (unsigned long long)*w, (unsigned long long)b);
		/* Stale compare: not swapped, current value returned. */
		E2E_ASSERT_WC_OK(e2e_cmp_swap(&e2e, w, a, 0, &old), "compare-and-swap (mismatch)");
		cr_assert(old == b, "failed CAS on word %zu returned 0x%llx, want 0x%llx", idx[i],
			  (unsigned long long)old, (unsigned long long)b);
		cr_assert(*w == b, "failed CAS on word %zu changed it to 0x%llx", idx[i],
			  (unsigned long long)*w);
	}
	for (size_t j = 0; j < 512; j++)
		if (j != 0 && j != 7 && j != 511)
			cr_assert(arr[j] == 0, "CAS changed the untouched word %zu", j);
	rdma_free(arr);
}

/*
 * Objects at the very start and the very end of a chunk: allocate 4 KiB
 * objects in a fresh heap until one starts within a page of its region's
 * first byte and one ends within a page of its region's last byte, then
 * RDMA-write both entirely (and the last 8 bytes of the region).
 */
E2E_TEST(chunk_edges, 90)
{
	const size_t obj = 4 * KiB, page = (size_t)sysconf(_SC_PAGESIZE);
	const size_t max_objs = (64 * MiB) / obj;
	rdma_heap_t *h = rdma_heap_create(NULL);
	cr_assert(h, "rdma_heap_create(NULL): %s", strerror(errno));
	uint8_t **objs = calloc(max_objs, sizeof(*objs));
	cr_assert(objs);
	uint8_t *first = NULL, *last = NULL;
	struct ibv_mr *first_mr = NULL, *last_mr = NULL;
	size_t n = 0;
	for (; n < max_objs && !(first && last); n++) {
		objs[n] = rdma_heap_malloc(h, obj);
		cr_assert(objs[n], "rdma_heap_malloc(%zu) #%zu: %s", obj, n, strerror(errno));
		struct ibv_mr *mr = rdma_malloc_mr(objs[n], 1, NULL);
		cr_assert(mr, "rdma_malloc_mr(%p, 1): %s", (void *)objs[n], strerror(errno));
		uintptr_t lo = (uintptr_t)mr->addr, hi = lo + mr->length;
		uintptr_t o = (uintptr_t)objs[n], oe = o + rdma_malloc_usable_size(objs[n]);
		cr_assert(o >= lo && oe <= hi, "object [%p, %p) is not inside its region [%p, %p)",
			  (void *)o, (void *)oe, (void *)lo, (void *)hi);
		if (!first && o - lo < page) {
			first = objs[n];
			first_mr = mr;
		}
		if (!last && hi - oe < page) {
			last = objs[n];
			last_mr = mr;
		}
	}
	cr_assert(first, "none of %zu objects of %zu B starts within a page of its chunk", n, obj);
	cr_assert(last, "none of %zu objects of %zu B ends within a page of its chunk", n, obj);

	cr_log_info("chunk edges after %zu objects: %p is %zu B into [%p, +%zu), %p ends %zu B before "
		    "the end of [%p, +%zu)", n, (void *)first, (size_t)(first - (uint8_t *)first_mr->addr),
		    first_mr->addr, first_mr->length, (void *)last,
		    (size_t)((uint8_t *)last_mr->addr + last_mr->length - last -
			     rdma_malloc_usable_size(last)),
		    last_mr->addr, last_mr->length);
	uint8_t *src = rdma_malloc(obj);
	cr_assert(src);
	uint8_t *targets[2] = { first, last };
	for (int t = 0; t < 2; t++) {
		size_t len = rdma_malloc_usable_size(targets[t]);
		uint32_t seed = 700u + (uint32_t)t;
		e2e_fill(src, len < obj ? len : obj, seed);
		memset(targets[t], 0xee, len);
		char what[160];
		snprintf(what, sizeof(what), "RDMA WRITE into the object at the %s of chunk [%p, +%zu)",
			 t ? "end" : "start", t ? last_mr->addr : first_mr->addr,
			 t ? last_mr->length : first_mr->length);
		E2E_ASSERT_WC_OK(e2e_write(&e2e, targets[t], src, len), what);
		E2E_ASSERT_PATTERN(targets[t], len, seed, what);
	}
	/* The region's last 8 bytes, addressed through the region itself. */
	{
		uint8_t *end = (uint8_t *)last_mr->addr + last_mr->length;
		if ((uintptr_t)end - ((uintptr_t)last + rdma_malloc_usable_size(last)) == 0) {
			e2e_fill(src, 8, 777);
			E2E_ASSERT_WC_OK(e2e_write(&e2e, end - 8, src, 8),
					 "RDMA WRITE of the chunk's last 8 bytes");
			E2E_ASSERT_PATTERN(end - 8, 8, 777, "the chunk's last 8 bytes");
			uint32_t rk;
			int err = rdma_malloc_keys(end - 8, 9, NULL, NULL, &rk);
			cr_assert(err == ERANGE,
				  "rdma_malloc_keys past the end of the chunk gave %s, want ERANGE",
				  strerror(err));
		}
	}
	rdma_free(src);
	free(objs);
	cr_assert(rdma_heap_destroy(h) == 0);
}
