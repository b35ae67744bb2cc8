/* SPDX-License-Identifier: MIT */
/*
 * invalid_pointer.c - under the drop-in, free(), realloc() and
 * malloc_usable_size() of memory it never handed out (on the stack, in an
 * mmap) abort with a message
 * naming the call, as glibc's free() and rdma_free() do, instead of
 * crashing inside jemalloc or returning garbage (issue 10, item 8; commit
 * 0c281c6 died of SIGSEGV).  The same for a page mapped in the part of a
 * 2 MiB granule past the end of a chunk that ends inside it (issue 23,
 * item 3: the granule's byte said "ours" and free() crashed in jemalloc),
 * or, since the drop-in's chunks map their last granule whole (issue 25),
 * that no such page can be mapped at all.
 * Each call runs in a child; prints one line per case and "N passed, M
 * failed".
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "in_child.h"

static volatile size_t sink;

struct one_call {
	int which;
	void *p;
};

/* In the child; returns only if the call accepted foreign memory. */
static void call(void *arg)
{
	int which = ((struct one_call *)arg)->which;
	void *p = ((struct one_call *)arg)->p;
	switch (which) {
	case 0:
		free(p);
		break;
	case 1:
		sink = (size_t)realloc(p, 100);
		break;
	default:
		sink = malloc_usable_size(p);
		break;
	}
}

#define GRANULE ((uintptr_t)2 << 20)

/* A page mapped right after the end of the chunk of a large block, in the
 * chunk's last granule (the chunk ends inside it); NULL if none could be
 * mapped: *@tried pages were tried, *@taken of them were already mapped
 * (EEXIST: the drop-in's chunks map the rest of their last granule too, so
 * that the granule's byte is true of all of it). */
static void *page_past_a_chunk(unsigned *tried, unsigned *taken)
{
	for (size_t mib = 3; mib < 40; mib++) {
		char *p = malloc((mib << 20) + (100 << 10));
		if (!p)
			return NULL;
		/* The chunk's mapping covers it whole: the first page after
		 * the block that mmap can take is the chunk's end. */
		uintptr_t last = (uintptr_t)p + malloc_usable_size(p) - 1;
		for (uintptr_t a = (last | 4095) + 1; a < ((last | (GRANULE - 1)) + 1); a += 4096) {
			void *m = mmap((void *)a, 4096, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
			++*tried;
			*taken += m == MAP_FAILED && errno == EEXIST;
			if (m == (void *)a)
				return m; /* p stays allocated: its chunk stays */
			if (m != MAP_FAILED)
				munmap(m, 4096);
		}
	}
	return NULL;
}

int main(void)
{
	static const char *names[] = { "free", "realloc", "malloc_usable_size" };
	char on_stack[64];
	void *mapped = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned tried = 0, taken = 0;
	void *past = page_past_a_chunk(&tried, &taken);
	void *targets[] = { on_stack + 16, (char *)mapped + 64, past };
	const char *where[] = { "the stack", "an mmap", "an mmap in a chunk's last granule" };
	int passed = 0, failed = 0;
	if (!past && tried && taken == tried) {
		printf("ok   a chunk's last granule is all its own: none of the %u pages past its blocks "
		       "could be mapped\n", tried);
		passed++;
	} else if (!past) {
		printf("FAIL no page past a chunk could be tried (%u tried, %u already mapped)\n", tried, taken);
		failed++;
	}
	for (int t = 0; t < (past ? 3 : 2); t++)
		for (int w = 0; w < 3; w++) {
			struct one_call c = { w, targets[t] };
			char out[1024], want[64], what[96];
			int st = in_child(call, &c, out, sizeof(out));
			snprintf(want, sizeof(want), "%s(%p): not memory from", names[w], targets[t]);
			snprintf(what, sizeof(what), "%s of %s", names[w], where[t]);
			int ok = aborted_saying(st, out, want, NULL);
			in_child_report(ok, what, st, out);
			passed += ok, failed += !ok;
		}
	/* Its own memory still works, of every kind. */
	void *a = malloc(10), *b = malloc(1 << 20), *c = realloc(NULL, 3);
	int mine = a && b && c && malloc_usable_size(a) >= 10 && malloc_usable_size(b) >= (1 << 20);
	free(a), free(b), free(c);
	printf("%s the drop-in's own blocks\n", mine ? "ok  " : "FAIL");
	passed += mine, failed += !mine;
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
