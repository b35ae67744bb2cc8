/* SPDX-License-Identifier: MIT */
/* stats.c - rdma_malloc_stats_get() and the text/JSON printer: the
 * counters (sys/counters.c) and the values derived from heaps and PDs. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "compiler.h"
#include "counters.h"
#include "chunk.h"
#include "heap.h"
#include "init.h"
#include "pd.h"

static void snapshot(struct rdma_malloc_stats *st)
{
	rdmalloc_counters_read(st);
	/* Derived values are computed here rather than kept in step. */
	st->pds = (uint64_t)rdmalloc_pd_count();
	st->unregistered_chunks = rdmalloc_chunks_unregistered();
	st->pinned_bytes = rdmalloc_chunks_held_bytes();
	st->heaps = (uint64_t)rdmalloc_heap_count();
	st->live_bytes = rdmalloc_heap_live_bytes();
	STAT_MAX(peak_live_bytes, st->live_bytes);
	if (st->live_bytes > st->peak_live_bytes)
		st->peak_live_bytes = st->live_bytes;
}

RDMA_EXPORT int rdma_malloc_stats_get(struct rdma_malloc_stats *st)
{
	if (!st || st->version != RDMA_MALLOC_STATS_VERSION || st->size != sizeof(*st))
		return EINVAL;
	rdmalloc_init_core(); /* stats open no device */
	uint32_t v = st->version, sz = st->size;
	memset(st, 0, sizeof(*st));
	snapshot(st);
	st->version = v;
	st->size = sz;
	return 0;
}

RDMA_EXPORT int rdma_malloc_stats_print(FILE *out, enum rdma_malloc_stats_format format)
{
	if (format != RDMA_MALLOC_STATS_TEXT && format != RDMA_MALLOC_STATS_JSON)
		return EINVAL;
	if (!out)
		out = stderr;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	int err = rdma_malloc_stats_get(&st);
	if (err)
		return err;
	int rc;
	if (format == RDMA_MALLOC_STATS_TEXT) {
		rc = fprintf(out, "rdmalloc stats:\n");
#define TEXT_(name, kind, desc)                                                         \
	if (rc >= 0)                                                                \
		rc = fprintf(out, "  %-24s %20" PRIu64 "  %s\n", #name, st.name, desc);
		RDMA_MALLOC_STATS_FIELDS(TEXT_)
#undef TEXT_
	} else {
		rc = fprintf(out, "{\"version\": %u", (unsigned)st.version);
#define JSON_(name, kind, desc) \
	if (rc >= 0)        \
		rc = fprintf(out, ", \"%s\": %" PRIu64, #name, st.name);
		RDMA_MALLOC_STATS_FIELDS(JSON_)
#undef JSON_
		if (rc >= 0)
			rc = fprintf(out, "}\n");
	}
	if (rc >= 0 && fflush(out) == EOF)
		rc = -1;
	return rc < 0 ? (errno ? errno : EIO) : 0;
}
