/* SPDX-License-Identifier: MIT */
/*
 * mallinfo.c - glibc's introspection calls under the drop-in: mallinfo2(),
 * mallinfo(), malloc_stats() and malloc_info() answer from rdmalloc's own
 * counts (rdma_malloc_stats_get), not from glibc's arena, which the drop-in
 * leaves empty: there they would say, silently, that the program holds
 * nothing.  What each field means here is in doc/preload.md.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>

#include "preload.h"
#include "rdma_malloc.h"

/* The stats, or zeros if they cannot be read (they always can once the
 * core is up; mallinfo has no way to report an error). */
static struct rdma_malloc_stats now(void)
{
	const struct rdma_malloc_stats zero = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(zero) };
	struct rdma_malloc_stats s = zero;
	return rdma_malloc_stats_get(&s) ? zero : s;
}

/* Bytes of the chunks not in live allocations (live_bytes is sampled
 * apart from chunk_bytes: never below 0). */
static uint64_t idle_bytes(const struct rdma_malloc_stats *s)
{
	return s->chunk_bytes > s->live_bytes ? s->chunk_bytes - s->live_bytes : 0;
}

/*
 * arena: bytes in chunks (jemalloc's memory: what glibc calls the system
 * bytes of its arenas); uordblks: bytes in live allocations; fordblks:
 * the rest of the chunks; hblks/hblkhd: blocks that are chunks of their
 * own (RDMALLOC_BIG_BLOCK) and their bytes are in arena already, so only
 * their count is given; usmblks: the most bytes in chunks so far.
 */
PRELOAD_API struct mallinfo2 mallinfo2(void)
{
	struct rdma_malloc_stats s = now();
	struct mallinfo2 m = { 0 };
	m.arena = s.chunk_bytes;
	m.uordblks = s.live_bytes;
	m.fordblks = idle_bytes(&s);
	m.hblks = s.big_blocks;
	m.usmblks = s.peak_chunk_bytes;
	return m;
}

static int clamp(size_t v)
{
	return v > INT_MAX ? INT_MAX : (int)v; /* glibc wraps; a count that wraps lies */
}

PRELOAD_API struct mallinfo mallinfo(void)
{
	struct mallinfo2 m2 = mallinfo2();
	struct mallinfo m = {
		.arena = clamp(m2.arena),       .ordblks = clamp(m2.ordblks), .smblks = clamp(m2.smblks),
		.hblks = clamp(m2.hblks),       .hblkhd = clamp(m2.hblkhd),   .usmblks = clamp(m2.usmblks),
		.fsmblks = clamp(m2.fsmblks),   .uordblks = clamp(m2.uordblks), .fordblks = clamp(m2.fordblks),
		.keepcost = clamp(m2.keepcost),
	};
	return m;
}

/* glibc prints to stderr; so does this, rdmalloc's text report. */
PRELOAD_API void malloc_stats(void)
{
	rdma_malloc_stats_print(stderr, RDMA_MALLOC_STATS_TEXT);
}

/* glibc's XML shape, with rdmalloc's counts; options must be 0, as there. */
PRELOAD_API int malloc_info(int options, FILE *fp)
{
	if (options != 0 || !fp) {
		errno = EINVAL;
		return -1;
	}
	struct rdma_malloc_stats s = now();
	fprintf(fp,
		"<malloc version=\"rdmalloc-%s\">\n"
		"<total type=\"chunks\" count=\"%llu\" size=\"%llu\"/>\n"
		"<total type=\"live\" size=\"%llu\"/>\n"
		"<total type=\"free\" size=\"%llu\"/>\n"
		"<total type=\"big\" count=\"%llu\"/>\n"
		"<system type=\"current\" size=\"%llu\"/>\n"
		"<system type=\"max\" size=\"%llu\"/>\n"
		"<total type=\"pinned\" size=\"%llu\"/>\n"
		"</malloc>\n",
		rdma_malloc_version(NULL, NULL, NULL), (unsigned long long)s.chunks,
		(unsigned long long)s.chunk_bytes, (unsigned long long)s.live_bytes, (unsigned long long)idle_bytes(&s),
		(unsigned long long)s.big_blocks, (unsigned long long)s.chunk_bytes,
		(unsigned long long)s.peak_chunk_bytes, (unsigned long long)s.pinned_bytes);
	return ferror(fp) ? -1 : 0;
}
