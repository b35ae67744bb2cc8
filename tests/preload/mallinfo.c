/* SPDX-License-Identifier: MIT */
/*
 * Under the drop-in, glibc's introspection calls answer from rdmalloc's
 * counts (issue 24, item 6): mallinfo2(), mallinfo(), malloc_info() and
 * malloc_stats() see the blocks the program holds.  glibc's own answer,
 * from its arena the drop-in leaves empty, was all zeros.  Run under
 * LD_PRELOAD; exits 1 with a message on the first wrong answer.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static int failed;

static void check(int ok, const char *what, size_t a, size_t b)
{
	if (!ok) {
		fprintf(stderr, "FAIL %s (%zu, %zu)\n", what, a, b);
		failed = 1;
	}
}

int main(void)
{
	struct mallinfo2 before = mallinfo2();
	enum { N = 64 };
	char *p[N];
	for (int i = 0; i < N; i++) { /* 16 MiB live, in blocks of 256 KiB */
		p[i] = malloc(MIB / 4);
		if (!p[i])
			return 2;
		memset(p[i], i, MIB / 4);
	}
	struct mallinfo2 held = mallinfo2();
	check(held.uordblks >= before.uordblks + 16 * MIB, "mallinfo2: uordblks counts 16 MiB more live",
	      before.uordblks, held.uordblks);
	check(held.arena >= held.uordblks, "mallinfo2: arena holds what is live", held.arena, held.uordblks);
	check(held.fordblks == held.arena - held.uordblks, "mallinfo2: fordblks is the rest", held.fordblks,
	      held.arena - held.uordblks);
	check(held.usmblks >= held.arena, "mallinfo2: usmblks is the most arena so far", held.usmblks, held.arena);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* glibc's mallinfo, still called */
	struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
	check((size_t)old.uordblks == held.uordblks || (size_t)old.uordblks + 4096 > held.uordblks,
	      "mallinfo: the same counts", (size_t)old.uordblks, held.uordblks);

	char *xml = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&xml, &len);
	check(f && malloc_info(0, f) == 0, "malloc_info returns 0", 0, 0);
	fclose(f);
	check(strstr(xml, "<malloc version=\"rdmalloc-") != NULL, "malloc_info: rdmalloc's XML", len, 0);
	char want[64];
	snprintf(want, sizeof(want), "<system type=\"current\" size=\"");
	char *at = strstr(xml, want);
	check(at && strtoull(at + strlen(want), NULL, 10) >= 16 * MIB, "malloc_info: current size", 0, 0);
	free(xml);
	errno = 0;
	check(malloc_info(1, stdout) == -1 && errno == EINVAL, "malloc_info(1, ...) fails with -1, EINVAL",
	      (size_t)errno, 0);

	/* Past INT_MAX bytes in chunks, mallinfo() saturates where glibc's
	 * wraps (3 GiB of address space, never touched). */
	enum { G = 4 };
	char *g[G];
	for (int i = 0; i < G; i++)
		if (!(g[i] = malloc(768 * MIB))) {
			printf("skipped: 3 GiB of address space refused (overcommit, ulimit -v)\n");
			return 77;
		}
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	struct mallinfo sat = mallinfo();
#pragma GCC diagnostic pop
	check(mallinfo2().arena >= 3072 * MIB, "mallinfo2: arena counts 3 GiB more", mallinfo2().arena, 0);
	check(sat.arena == INT_MAX && sat.uordblks == INT_MAX, "mallinfo: arena and uordblks saturate at INT_MAX",
	      (size_t)sat.arena, (size_t)sat.uordblks);
	for (int i = 0; i < G; i++)
		free(g[i]);
	/* Their pages go back (plain memory: at once, the chunks kept), and
	 * malloc_trim says so, as glibc's; once more, nothing is left. */
	int trimmed = malloc_trim(0), again = malloc_trim(0);
	check(trimmed == 1 && again == 0, "malloc_trim says 1 when it gave pages back, then 0", (size_t)trimmed,
	      (size_t)again);

	/* hblks: blocks that are chunks of their own, an rdma_* heap's big
	 * blocks (64 KiB or more by default). */
	void *(*rdma_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "rdma_malloc");
	void (*rdma_free)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "rdma_free");
	check(rdma_malloc && rdma_free, "the drop-in exports rdma_malloc and rdma_free", 0, 0);
	if (rdma_malloc && rdma_free) {
		size_t hblks = mallinfo2().hblks;
		void *b = rdma_malloc(MIB);
		check(b != NULL, "rdma_malloc(1 MiB)", 0, 0);
		check(mallinfo2().hblks == hblks + 1 && mallinfo2().hblkhd == 0,
		      "mallinfo2: hblks counts the big block (its bytes are in arena: hblkhd 0)", mallinfo2().hblks,
		      hblks);
		rdma_free(b);
	}

	for (int i = 0; i < N; i++)
		free(p[i]);
	struct mallinfo2 after = mallinfo2();
	check(after.uordblks + 15 * MIB <= held.uordblks, "mallinfo2: the 16 MiB freed are no longer live",
	      after.uordblks, held.uordblks);

	/* malloc_stats prints rdmalloc's report on stderr, as glibc does its. */
	int fds[2];
	if (pipe(fds))
		return 2;
	int saved = dup(2);
	dup2(fds[1], 2);
	malloc_stats();
	fflush(stderr);
	dup2(saved, 2);
	close(fds[1]);
	char buf[8192] = "";
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	check(strstr(buf, "rdmalloc") && strstr(buf, "chunk_bytes"), "malloc_stats: rdmalloc's report on stderr",
	      (size_t)n, 0);
	if (!failed)
		printf("ok: mallinfo2 %zu live of %zu in chunks, mallinfo, malloc_info, malloc_stats\n", held.uordblks,
		       held.arena);
	return failed;
}
