/* SPDX-License-Identifier: MIT */
/*
 * Under the drop-in, glibc's introspection calls answer from rdmalloc's
 * counts (issue 24, item 6): mallinfo2(), mallinfo(), malloc_info() and
 * malloc_stats() see the blocks the program holds.  glibc's own answer,
 * from its arena the drop-in leaves empty, was all zeros.  Run under
 * LD_PRELOAD; exits 1 with a message on the first wrong answer.
 */
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
	check(malloc_info(1, stdout) != 0, "malloc_info(1, ...) fails (man page: -1, EINVAL)", 0, 0);

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
