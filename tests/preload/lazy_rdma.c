/* SPDX-License-Identifier: MIT */
/*
 * lazy_rdma.c - under the drop-in, RDMA comes up on first need (init.h):
 * a program that allocates, in several threads, loads no libibverbs (nor
 * libnl, nor a provider), opens no device and takes no fallback; its first
 * rdma_malloc_default_pd() loads libibverbs and opens the device (on the
 * host: none, ENODEV and one fallback; in the guest: rxe0), and the first
 * key lookup of a malloc'd block with the default PD answers as it would
 * have with the device opened at start.
 *
 * Built without libibverbs or librdmalloc: the rdma_* calls are looked up
 * in the drop-in, as an unmodified program's would be.
 *   lazy_rdma [host|guest]
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_malloc.h"

static int failed;

#define CHECK(cond, ...)                                  \
	do {                                              \
		if (!(cond)) {                            \
			fprintf(stderr, "lazy_rdma: ");   \
			fprintf(stderr, __VA_ARGS__);     \
			fputc('\n', stderr);              \
			failed = 1;                       \
		}                                         \
	} while (0)

/* 1 if a mapping of this process names @lib. */
static int mapped(const char *lib)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f) {
		perror("/proc/self/maps");
		exit(2);
	}
	char line[4096];
	int found = 0;
	while (fgets(line, sizeof(line), f))
		found |= strstr(line, lib) != NULL;
	fclose(f);
	return found;
}

static void *sym(const char *name)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	if (!f) {
		fprintf(stderr, "lazy_rdma: %s not found: run under the drop-in\n", name);
		exit(2);
	}
	return f;
}

static struct rdma_malloc_stats stats(void)
{
	int (*get)(struct rdma_malloc_stats *) = sym("rdma_malloc_stats_get");
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	int err = get(&st);
	if (err) {
		fprintf(stderr, "lazy_rdma: rdma_malloc_stats_get: %s\n", strerror(err));
		exit(2);
	}
	return st;
}

static void *churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < 10000; i++) {
		void *p = malloc((size_t)(i % 4096) + 1);
		void *q = calloc(1, 100);
		p = realloc(p, 8192);
		free(q);
		free(p);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	/* Each line out at once: a piped log keeps what came before a crash. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	int guest = argc > 1 && strcmp(argv[1], "guest") == 0;
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	churn(NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	(void)sym("rdma_malloc"); /* under the drop-in */

	struct rdma_malloc_stats st = stats();
	CHECK(!mapped("libibverbs"), "libibverbs is mapped before any RDMA call");
	CHECK(!mapped("libnl"), "libnl is mapped before any RDMA call");
	CHECK(!mapped("rdmav"), "a verbs provider is mapped before any RDMA call");
	CHECK(st.pds == 0, "%llu PDs attached before any RDMA call", (unsigned long long)st.pds);
	CHECK(st.fallbacks == 0, "%llu fallbacks before any RDMA call (the device probe?)",
	      (unsigned long long)st.fallbacks);
	CHECK(st.heaps == 1, "%llu heaps before any RDMA call: the drop-in's only",
	      (unsigned long long)st.heaps);

	/* The first RDMA call brings it up. */
	struct ibv_pd *(*default_pd)(void) = sym("rdma_malloc_default_pd");
	errno = 0;
	struct ibv_pd *pd = default_pd();
	int pd_errno = errno;
	CHECK(mapped("libibverbs"), "libibverbs is not mapped after rdma_malloc_default_pd()");
	st = stats();
	if (guest) {
		CHECK(pd != NULL, "no default PD in the guest: %s", strerror(pd_errno));
		CHECK(st.pds == 1, "%llu PDs attached after the first RDMA call", (unsigned long long)st.pds);
	} else {
		CHECK(pd == NULL && pd_errno == ENODEV, "default PD %p (%s) on a host without a device", (void *)pd,
		      strerror(pd_errno));
		CHECK(st.fallbacks == 1, "%llu fallbacks after the probe found no device",
		      (unsigned long long)st.fallbacks);
	}

	/* A block of the drop-in: its first lookup with the default PD. */
	int (*keys)(const void *, size_t, struct ibv_pd *, uint32_t *, uint32_t *) = sym("rdma_malloc_keys");
	char *p = malloc(4096);
	uint32_t lkey = 0, rkey = 0;
	int err = keys(p, 4096, NULL, &lkey, &rkey);
	if (guest)
		CHECK(err == 0 && lkey != 0, "keys of a malloc'd block: %s, lkey %u", strerror(err), lkey);
	else
		CHECK(err == ENODEV, "keys of a malloc'd block with no device: %s", strerror(err));
	free(p);
	if (!failed)
		printf("lazy_rdma: ok (%s)\n", guest ? "guest" : "host");
	return failed;
}
