/* SPDX-License-Identifier: MIT */
/*
 * first_use_crew.c - under the fake drop-in (chunks registered when RDMA
 * first needs them, the default) with RDMALLOC_REG_THREADS=2: the first
 * registration of a chunk the crew serves (crew.h), by a key lookup
 * (`keys`) or by the elision of the program's ibv_reg_mr (`elide`), starts
 * the crew's workers before it registers, so that it is shared out too.
 * At 626d711 only an allocation's errand after a hook started them: a
 * program whose chunks all register on first use never had them.
 * Prints "N passed, M failed".
 */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_malloc.h"

#define MiB ((size_t)1 << 20)

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "";
	unsigned (*threads)(void) = (unsigned (*)(void))dlsym(RTLD_DEFAULT, "rdmalloc_crew_threads");
	int (*keys_of)(const void *, size_t, struct ibv_pd *, uint32_t *, uint32_t *) =
		(int (*)(const void *, size_t, struct ibv_pd *, uint32_t *, uint32_t *))dlsym(RTLD_DEFAULT,
											      "rdma_malloc_keys");
	int (*stats_get)(struct rdma_malloc_stats *) =
		(int (*)(struct rdma_malloc_stats *))dlsym(RTLD_DEFAULT, "rdma_malloc_stats_get");
	if (!threads || !keys_of || !stats_get || (strcmp(how, "keys") && strcmp(how, "elide"))) {
		puts("usage: first_use_crew keys|elide, under the fake drop-in (librdmalloc-preload-fake.so)");
		return 2;
	}
	int passed = 0, failed = 0;
	char *volatile p = malloc(64 * MiB); /* a chunk of its own, not registered yet */
	struct rdma_malloc_stats s0 = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(s0) }, s1 = s0;
	stats_get(&s0);
	unsigned t0 = threads();
	printf("%s before its first use the crew has %u thread(s)\n", p && t0 == 1 ? "ok  " : "FAIL", t0);
	p && t0 == 1 ? passed++ : failed++;
	int ok;
	if (!strcmp(how, "keys")) {
		uint32_t lkey = 0, rkey = 0;
		ok = keys_of(p, 64 * MiB, NULL, &lkey, &rkey) == 0;
	} else {
		struct ibv_pd *pd = calloc(1, sizeof(*pd)); /* the stand-ins' PD */
		struct ibv_mr *mr = pd ? ibv_reg_mr(pd, p, 64 * MiB, IBV_ACCESS_LOCAL_WRITE) : NULL;
		ok = mr != NULL;
		if (mr)
			ibv_dereg_mr(mr);
	}
	printf("%s its first use (%s) registered it\n", ok ? "ok  " : "FAIL", how);
	ok ? passed++ : failed++;
	unsigned t1 = threads();
	stats_get(&s1);
	unsigned long long populated = (unsigned long long)(s1.populated_chunks - s0.populated_chunks);
	/* No allocation since: nothing else could have started them. */
	printf("%s it was populated by the crew (%llu chunk), of %u thread(s)\n",
	       t1 >= 2 && populated == 1 ? "ok  " : "FAIL", populated, t1);
	t1 >= 2 && populated == 1 ? passed++ : failed++;
	free(p);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
