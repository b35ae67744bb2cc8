/* SPDX-License-Identifier: MIT */
/* hugepage.h - chunks on huge pages (RDMA_HEAP_HUGEPAGES, doc/modes.md). */
#ifndef RDMALLOC_HUGEPAGE_H
#define RDMALLOC_HUGEPAGE_H

#include <stddef.h>

#include "compiler.h"

enum rdmalloc_page_kind {
	RDMALLOC_PAGES_4K = 0, /* ordinary pages (no huge-page heap, or the last fallback) */
	RDMALLOC_PAGES_THP,    /* MADV_HUGEPAGE on 2 MiB-aligned, 2 MiB-rounded memory */
	RDMALLOC_PAGES_2M,     /* MAP_HUGETLB | MAP_HUGE_2MB */
	RDMALLOC_PAGES_1G,     /* MAP_HUGETLB | MAP_HUGE_1GB, chunks of 1 GiB or more */
};

/*
 * Map a chunk of at least @size bytes aligned to @align (>= 2 MiB) on huge
 * pages: explicit 1 GiB pages for chunks of 1 GiB or more (unless @no_1g),
 * explicit 2 MiB pages, transparent huge pages, 4 KiB pages, in that
 * order; each fallback is logged once and counted.  *@map_size gets the bytes mapped (@size
 * rounded up to whole pages of the kind used), *@kind the kind.  NULL with
 * errno when not even plain memory could be mapped.
 */
void *rdmalloc_huge_map(size_t size, size_t align, int no_1g, size_t *map_size, int *kind);

/* @size rounded up to whole pages of @kind (SIZE_MAX rounds to 0: caller checks). */
RDMALLOC_TESTABLE size_t rdmalloc_huge_round(size_t size, int kind);

/* Count a chunk of @kind in (+1) or out (-1) of the gauges. */
void rdmalloc_huge_count(int kind, int delta);

/* For the tests: pretend explicit huge pages (@no_hugetlb) or transparent
 * huge pages (@no_thp) are unavailable; -1 leaves a setting as it is. */
RDMALLOC_TESTABLE void rdmalloc_huge_test_disable(int no_hugetlb, int no_thp);

#endif
