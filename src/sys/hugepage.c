/* SPDX-License-Identifier: MIT */
/*
 * hugepage.c - chunks on huge pages (RDMA_HEAP_HUGEPAGES).
 *
 * Why: a NIC translates addresses of a region through its own page tables;
 * fewer, larger pages mean fewer translation entries and misses.  With
 * MLNX_OFED, IBV_ACCESS_ALLOCATE_MR asked the driver for contiguous pages;
 * upstream rdma-core has no such flag, so the allocator asks the kernel for
 * huge pages itself.  Order of preference:
 *
 *  1. explicit huge pages (MAP_HUGETLB): 1 GiB pages for chunks of 1 GiB or
 *     more, else 2 MiB pages.  Reserved at mmap time, so a system without
 *     free ones fails the mmap at once (ENOMEM) and we fall back;
 *  2. transparent huge pages: MADV_HUGEPAGE on a 2 MiB-aligned mapping whose
 *     length is a multiple of 2 MiB (THP "always" or "madvise"; the
 *     registration then faults the pages in as huge pages where the kernel
 *     has them);
 *  3. plain 4 KiB pages.
 * Each fallback is logged once and counted (hugepage_fallbacks, fallbacks).
 *
 * Page-size alignment: jemalloc asks for chunks like 2.5 MiB.  The mapping
 * (and the registration, which covers the whole mapping) is rounded up to
 * whole pages of the size in use, so no registration ends inside a huge
 * page; jemalloc only uses the bytes it asked for.  The base is aligned to
 * the page size (hugetlb mappings are aligned by the kernel; THP chunks are
 * aligned to 2 MiB, as every chunk is).
 */
#include "hugepage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "os.h"
#include "counters.h"
#include "nocancel.h"

#define SZ_2M ((size_t)2 << 20)
#define SZ_1G ((size_t)1 << 30)

static atomic_int test_no_hugetlb, test_no_thp;

void rdmalloc_huge_test_disable(int no_hugetlb, int no_thp)
{
	if (no_hugetlb >= 0)
		atomic_store(&test_no_hugetlb, no_hugetlb);
	if (no_thp >= 0)
		atomic_store(&test_no_thp, no_thp);
}

size_t rdmalloc_huge_round(size_t size, int kind)
{
	size_t page = kind == RDMALLOC_PAGES_1G ? SZ_1G
		      : kind == RDMALLOC_PAGES_4K ? (size_t)sysconf(_SC_PAGESIZE)
						  : SZ_2M;
	if (size > SIZE_MAX - (page - 1))
		return 0;
	return (size + page - 1) & ~(page - 1);
}

void rdmalloc_huge_count(int kind, int delta)
{
	if (kind == RDMALLOC_PAGES_THP)
		STAT_ADD(thp_chunks, (uint64_t)(int64_t)delta);
	else if (kind == RDMALLOC_PAGES_2M || kind == RDMALLOC_PAGES_1G)
		STAT_ADD(hugetlb_chunks, (uint64_t)(int64_t)delta);
}

/* THP is usable unless /sys/kernel/mm/transparent_hugepage/enabled says
 * "[never]" (or does not exist).  Read with open/read: we run inside an
 * extent hook and must not allocate. */
static int thp_available(void)
{
	static atomic_int cached = -1;
	int v = atomic_load_explicit(&cached, memory_order_relaxed);
	if (v >= 0)
		return v;
	char buf[128] = "";
	int cancel = rdmalloc_cancel_off();
	int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	rdmalloc_cancel_on(cancel);
	v = buf[0] && !strstr(buf, "[never]");
	atomic_store_explicit(&cached, v, memory_order_relaxed);
	return v;
}

/* An explicit huge-page mapping of @len (a multiple of the page size)
 * aligned to @align. */
static void *hugetlb_map(size_t len, size_t align, enum rdmalloc_os_pages pages)
{
	if (atomic_load_explicit(&test_no_hugetlb, memory_order_relaxed)) {
		errno = ENOMEM;
		return NULL;
	}
	int ferr = rdmalloc_fault_hit(RDMALLOC_FAULT_HUGEPAGE, NULL, len);
	if (ferr) {
		errno = ferr;
		return NULL;
	}
	return rdmalloc_os_map_aligned(len, align, pages);
}

void *rdmalloc_huge_map(size_t size, size_t align, int no_1g, size_t *map_size, int *kind)
{
	if (align < SZ_2M)
		align = SZ_2M;
	int err = 0;
	if (size >= SZ_1G && !no_1g) {
		size_t len = rdmalloc_huge_round(size, RDMALLOC_PAGES_1G);
		void *p = len ? hugetlb_map(len, align, RDMALLOC_OS_HUGE_1G) : NULL;
		if (p) {
			*map_size = len;
			*kind = RDMALLOC_PAGES_1G;
			return p;
		}
		/* 2 MiB pages are tried next: no fallback to report yet. */
	}
	size_t len = rdmalloc_huge_round(size, RDMALLOC_PAGES_2M);
	if (!len) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = hugetlb_map(len, align, RDMALLOC_OS_HUGE_2M);
	if (p) {
		*map_size = len;
		*kind = RDMALLOC_PAGES_2M;
		return p;
	}
	err = errno;
	STAT_INC(hugepage_fallbacks);
	STAT_INC(fallbacks);
	int thp = thp_available() && !atomic_load_explicit(&test_no_thp, memory_order_relaxed);
	rdmalloc_log_once(RDMALLOC_LOG_WARN, "no explicit huge pages for a %zu-byte chunk (mmap MAP_HUGETLB: "
			  "%s; see /proc/sys/vm/nr_hugepages): using %s (further fallbacks are only "
			  "counted in hugepage_fallbacks)",
			  len, rdmalloc_strerror(err), thp ? "transparent huge pages" : "4 KiB pages");
	p = rdmalloc_os_map_aligned(len, align, RDMALLOC_OS_PAGES);
	if (!p)
		return NULL;
	int thp_err = thp ? rdmalloc_os_thp(p, len) : 0;
	if (thp && !thp_err) {
		*map_size = len;
		*kind = RDMALLOC_PAGES_THP;
		return p;
	}
	if (thp) { /* madvise refused (a kernel without THP): count the second fallback */
		STAT_INC(hugepage_fallbacks);
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "MADV_HUGEPAGE refused: %s; huge-page heaps use 4 KiB "
				  "pages", rdmalloc_strerror(thp_err));
	} else {
		/* That the chunk is on 4 KiB pages is the fallback above. */
	}
	/* 4 KiB pages: give back the rounding. */
	size_t small = rdmalloc_huge_round(size, RDMALLOC_PAGES_4K);
	if (small < len)
		rdmalloc_os_unmap((char *)p + small, len - small);
	*map_size = small;
	*kind = RDMALLOC_PAGES_4K;
	return p;
}
