/* SPDX-License-Identifier: MIT */
/*
 * refused_populate.c - under the fake drop-in with every chunk registered
 * at creation (RDMALLOC_PRELOAD_REGISTER=eager) and the registration crew
 * on (RDMALLOC_REG_THREADS=2): a 512 MiB chunk whose registration is
 * refused, as RLIMIT_MEMLOCK refuses one before it touches a page, is left
 * plain and must not stay resident.  The crew populates big chunks before
 * registering them; at 511cd50 such a chunk kept its 512 MiB resident
 * (found in review: +640 MiB of RSS after one malloc).
 * Prints "N passed, M failed".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmRSS:", 6))
			v = atol(line + 6);
	if (f)
		fclose(f);
	return v;
}

int main(void)
{
	void (*fail_from)(unsigned long) = (void (*)(unsigned long))dlsym(RTLD_DEFAULT, "fake_fail_reg_from");
	unsigned long (*calls)(void) = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "fake_reg_calls");
	unsigned (*threads)(void) = (unsigned (*)(void))dlsym(RTLD_DEFAULT, "rdmalloc_crew_threads");
	if (!fail_from || !calls || !threads) {
		puts("refused_populate: run under the fake drop-in (librdmalloc-preload-fake.so)");
		return 2;
	}
	int passed = 0, failed = 0;
	/* A first big chunk registers alone and asks for the crew; the next
	 * allocation's errand starts it. */
	void *volatile first = malloc((size_t)32 << 20), *volatile v = malloc(16);
	free(v);
	unsigned t = threads();
	printf("%s the crew has %u threads\n", t >= 2 ? "ok  " : "FAIL", t);
	t >= 2 ? passed++ : failed++;
	long before = rss_kib();
	fail_from(calls() + 1); /* every registration from now on refused */
	char *volatile p = malloc((size_t)512 << 20);
	long grew = (rss_kib() - before) / 1024;
	int ok = p && grew < 64;
	printf("%s malloc(512 MiB) whose registration was refused: %s, RSS +%ld MiB\n", ok ? "ok  " : "FAIL",
	       p ? "plain memory" : "NULL", grew);
	ok ? passed++ : failed++;
	free(p);
	free(first);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
