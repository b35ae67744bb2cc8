/* SPDX-License-Identifier: MIT */
/*
 * device_select.c - the device of the default PD (include/rdma_malloc.h,
 * rdmalloc(7)): the one RDMALLOC_DEVICE names, whatever its port state,
 * else the first device with an active port, past one that cannot be
 * opened or refuses a PD (said in a warning, one fallback); with none,
 * rdma_malloc_default_pd() gives ENODEV, memory is still allocated, its
 * lookups give ENODEV, and the warning says why (one fallback).
 * Run against stub_ibverbs.c's made-up devices (STUB_IBV_DEVICES,
 * LD_LIBRARY_PATH): the selection's logic, not registration.
 *   device_select DEVICE [MESSAGE] the default PD must be on DEVICE; a
 *                                  warning holds MESSAGE, or none is given
 *   device_select none MESSAGE     no default PD; the warning holds MESSAGE
 * With RDMALLOC_JOB_NOTED=device-passed-over (rdmalloc run --quiet), a
 * device passed over is still counted, and not warned about.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdma_malloc.h"

static int failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	failed |= !ok;
}

int main(int argc, char **argv)
{
	if (argc < 2 || (!strcmp(argv[1], "none") && argc < 3)) {
		fprintf(stderr, "usage: device_select DEVICE [MESSAGE] | none MESSAGE\n");
		return 2;
	}
	const char *want = argv[1];
	/* rdmalloc run --quiet told the job (read before the library adds what
	 * it says): counted, said at info only. */
	const char *noted = getenv("RDMALLOC_JOB_NOTED");
	int told = noted && strstr(noted, "device-passed-over");
	/* The library's messages, to read them back. */
	FILE *log = tmpfile();
	int saved = dup(2);
	if (!log || saved < 0 || dup2(fileno(log), 2) < 0) {
		perror("device_select: stderr to a file");
		return 2;
	}
	struct ibv_pd *pd = rdma_malloc_default_pd();
	int pd_err = pd ? 0 : errno;
	void *p = rdma_malloc(4096);
	uint32_t lkey = 0, rkey = 0;
	int keys = p ? rdma_malloc_keys(p, 4096, NULL, &lkey, &rkey) : -1;
	struct ibv_mr *mr = p ? rdma_malloc_mr(p, 4096, NULL) : NULL;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	int stats = rdma_malloc_stats_get(&st);
	fflush(stderr);
	dup2(saved, 2);
	char said[4096] = "";
	rewind(log);
	size_t n = fread(said, 1, sizeof(said) - 1, log);
	said[n] = '\0';
	if (n)
		printf("# the library said: %s", said);

	check(p != NULL, "rdma_malloc(4096) gives memory");
	/* A device passed over is said only when the PD went on another. */
	int warned = !strcmp(want, "none") || argc > 2;
	printf("# fallbacks %llu\n", (unsigned long long)st.fallbacks);
	check(stats == 0 && st.fallbacks == (uint64_t)warned, warned ? "one fallback counted" : "no fallback counted");
	if (!strcmp(want, "none")) {
		check(!pd && pd_err == ENODEV, "no default PD: rdma_malloc_default_pd() is NULL, errno ENODEV");
		check(keys == ENODEV && !mr, "its lookups give ENODEV");
		check(strstr(said, argv[2]) != NULL, "the warning says why");
		check(!strstr(said, "the default PD is on"), "no device said to be passed over for another");
	} else {
		const char *got = pd ? pd->context->device->name : "(none)";
		printf("# default PD on %s, %s wanted\n", got, want);
		check(pd && !strcmp(got, want), "the default PD is on the device wanted");
		check(keys == 0 && mr && mr->pd == pd && mr->lkey == lkey && mr->rkey == rkey,
		      "the block's keys are those of a region of that PD");
		char instead[96];
		snprintf(instead, sizeof(instead), ": the default PD is on %s instead", want);
		if (argc > 2 && told)
			check(!strstr(said, "rdmalloc: warning"), "the job was told: no warning");
		else if (argc > 2)
			check(strstr(said, argv[2]) && strstr(said, instead) && !strstr(strstr(said, instead) + 1, instead),
			      "one warning names the device passed over, and where the PD went");
		else
			check(!strstr(said, "rdmalloc: warning"), "no warning");
	}
	rdma_free(p);
	return failed;
}
