/* SPDX-License-Identifier: MIT */
/*
 * held.h - blocks a benchmark program holds, counted by the program itself:
 * from rdma_malloc, or with --plain from malloc (the allocator under
 * LD_PRELOAD).  Every page of a block is written, as a registration pins
 * every page.  For phases.c and service.c.
 */
#ifndef RDMALLOC_BENCH_HELD_H
#define RDMALLOC_BENCH_HELD_H

#include "common.h"
#include "rdma_malloc.h"

static int bench_plain;      /* malloc/free instead of rdma_malloc/rdma_free */
static size_t bench_asked;   /* bytes the program holds, by its own count */

static inline void *bench_get(const char *prog, size_t n)
{
	void *p = bench_plain ? malloc(n) : rdma_malloc(n);
	if (!p)
		bench_die(prog, "allocation of %zu bytes failed", n);
	memset(p, 1, n);
	bench_asked += n;
	return p;
}

static inline void bench_put(void *p, size_t n)
{
	if (bench_plain)
		free(p);
	else
		rdma_free(p);
	bench_asked -= n;
}

#endif
