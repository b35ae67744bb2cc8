/* SPDX-License-Identifier: MIT */
/*
 * old_program.c - a program built against an old header (tests/abi/
 * header-658fbe8/: rdma_heap_attr without decay_ms, fewer stats) keeps
 * working with this library (doc/abi.md):
 *  - rdma_heap_create() of its 8-byte attr, followed in memory by bytes
 *    that are not 0, makes a heap (the library must not read them as
 *    decay_ms: out of range, that was EINVAL);
 *  - rdma_malloc_stats_get() of its smaller struct fills it and touches
 *    nothing past it (that was EINVAL: size differs).
 * Prints ok/FAIL per check and "N passed, M failed".
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rdma_malloc.h>

#ifdef RDMA_MALLOC_VERSION_PATCH
#error "built against the current header: must be tests/abi/header-658fbe8"
#endif

static int passed, failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	ok ? passed++ : failed++;
}

int main(void)
{
	/* The attr, then garbage where a newer struct has decay_ms. */
	union {
		struct rdma_heap_attr attr;
		unsigned char bytes[64];
	} mem;
	memset(mem.bytes, 0xab, sizeof(mem.bytes));
	mem.attr.access = 1; /* IBV_ACCESS_LOCAL_WRITE */
	mem.attr.flags = 0;
	errno = 0;
	rdma_heap_t *h = rdma_heap_create(&mem.attr);
	check(h != NULL, "rdma_heap_create() of a struct without decay_ms, garbage after it");
	if (!h)
		printf("#   errno %d (%s)\n", errno, strerror(errno));
	void *p = h ? rdma_heap_malloc(h, 1000) : NULL;
	check(!h || p != NULL, "the heap allocates");
	rdma_free(p);
	if (h)
		check(rdma_heap_destroy(h) == 0, "the heap is destroyed");

	void *q = rdma_malloc(1 << 20);
	union {
		struct rdma_malloc_stats st;
		unsigned char bytes[sizeof(struct rdma_malloc_stats) + 64];
	} s;
	memset(s.bytes, 0xcd, sizeof(s.bytes));
	s.st.version = RDMA_MALLOC_STATS_VERSION;
	s.st.size = sizeof(s.st);
	int err = rdma_malloc_stats_get(&s.st);
	check(err == 0, "rdma_malloc_stats_get() of the old, smaller struct");
	if (err)
		printf("#   returned %d (%s)\n", err, strerror(err));
	check(s.st.size == sizeof(s.st), "size says the whole old struct was filled");
	check(err || (s.st.chunks >= 1 && s.st.chunk_bytes >= (1 << 20) && s.st.live_bytes >= (1 << 20)),
	      "its fields hold the library's counts (chunks, chunk_bytes, live_bytes)");
	int untouched = 1;
	for (size_t i = sizeof(s.st); i < sizeof(s.bytes); i++)
		untouched &= s.bytes[i] == 0xcd;
	check(untouched, "nothing written past the old struct");
	rdma_free(q);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
