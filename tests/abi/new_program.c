/* SPDX-License-Identifier: MIT */
/*
 * new_program.c - the ABI as this header declares it (doc/abi.md):
 *  - rdma_malloc_version() is the header's version, and meson's (argv[1]);
 *  - rdma_malloc_stats_get(): a struct larger than the library's (a newer
 *    program) gets ours filled and the rest zeroed, size set to ours; bad
 *    sizes are EINVAL;
 *  - rdma_heap_create_sized(): sizes short of flags are EINVAL, unknown
 *    trailing bytes must be 0, decay_ms is read when the size covers it.
 * Prints ok/FAIL per check and "N passed, M failed".
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma_malloc.h>

static int passed, failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok" : "FAIL", what);
	ok ? passed++ : failed++;
}

int main(int argc, char **argv)
{
	unsigned ma = 99, mi = 99, pa = 99;
	const char *v = rdma_malloc_version(&ma, &mi, &pa);
	char want[64];
	snprintf(want, sizeof(want), "%u.%u.%u", RDMA_MALLOC_VERSION_MAJOR, RDMA_MALLOC_VERSION_MINOR,
		 RDMA_MALLOC_VERSION_PATCH);
	check(v && !strcmp(v, want), "rdma_malloc_version() is the header's version");
	check(ma == RDMA_MALLOC_VERSION_MAJOR && mi == RDMA_MALLOC_VERSION_MINOR && pa == RDMA_MALLOC_VERSION_PATCH,
	      "its numbers are the header's");
	check(argc < 2 || (v && !strcmp(v, argv[1])), "and meson.build's project version");
	check(rdma_malloc_version(NULL, NULL, NULL) == v, "NULL parts are fine");

	/* A newer program's larger struct. */
	size_t big = sizeof(struct rdma_malloc_stats) + 64;
	unsigned char *buf = malloc(big);
	memset(buf, 0xcd, big);
	struct rdma_malloc_stats *st = (struct rdma_malloc_stats *)buf;
	st->version = RDMA_MALLOC_STATS_VERSION;
	st->size = (uint32_t)big;
	check(rdma_malloc_stats_get(st) == 0, "stats of a larger struct");
	check(st->size == sizeof(struct rdma_malloc_stats), "size set to the library's struct");
	int zero = 1;
	for (size_t i = sizeof(struct rdma_malloc_stats); i < big; i++)
		zero &= buf[i] == 0;
	check(zero, "fields the library does not know are 0");
	st->version = RDMA_MALLOC_STATS_VERSION;
	st->size = 8;
	check(rdma_malloc_stats_get(st) == EINVAL, "a size that holds no field is EINVAL");
	st->size = sizeof(struct rdma_malloc_stats) - 4;
	check(rdma_malloc_stats_get(st) == EINVAL, "a size that is not whole fields is EINVAL");
	st->version = 2;
	st->size = sizeof(struct rdma_malloc_stats);
	check(rdma_malloc_stats_get(st) == EINVAL, "an unknown version is EINVAL");
	free(buf);

	struct rdma_heap_attr a = { .access = 1, .flags = 0, .decay_ms = -5 };
	errno = 0;
	check(!rdma_heap_create(&a) && errno == EINVAL, "the macro passes decay_ms (-5 is out of range: EINVAL)");
	errno = 0;
	check(!rdma_heap_create_sized(&a, sizeof(a)) && errno == EINVAL, "rdma_heap_create_sized reads decay_ms");
	rdma_heap_t *h = rdma_heap_create_sized(&a, offsetof(struct rdma_heap_attr, decay_ms));
	check(h != NULL, "a size that ends before decay_ms leaves it out");
	if (h)
		rdma_heap_destroy(h);
	errno = 0;
	check(!rdma_heap_create_sized(&a, offsetof(struct rdma_heap_attr, flags)) && errno == EINVAL,
	      "a size short of flags is EINVAL");
	struct {
		struct rdma_heap_attr attr;
		uint64_t newer;
	} n = { { .access = 1 }, 0 };
	h = rdma_heap_create_sized(&n.attr, sizeof(n));
	check(h != NULL, "a newer program's struct with its new fields 0");
	if (h)
		rdma_heap_destroy(h);
	n.newer = 1;
	errno = 0;
	check(!rdma_heap_create_sized(&n.attr, sizeof(n)) && errno == EINVAL,
	      "a newer program's struct asking for more is EINVAL");
	h = rdma_heap_create(&(struct rdma_heap_attr){ .access = 1, .decay_ms = -1 });
	check(h != NULL, "a compound literal passes through the macro");
	if (h)
		rdma_heap_destroy(h);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
