/* SPDX-License-Identifier: MIT */
/* stats.c - counters, rdma_malloc_stats_get() and the text/JSON printer. */
#include "stats.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "compiler.h"
#include "heap.h"
#include "init.h"
#include "pd.h"

struct rdmalloc_counters rdmalloc_counters;

#define STRIPES 16
static struct stripe {
	_Atomic uint64_t ok, failed;
} __attribute__((aligned(64))) stripes[STRIPES];

static RDMALLOC_TLS char stripe_anchor;

void rdmalloc_stat_lookup(int ok)
{
	/* A thread's TLS block address picks its stripe: no set-up needed. */
	struct stripe *s = &stripes[((uintptr_t)&stripe_anchor >> 12) % STRIPES];
	atomic_fetch_add_explicit(ok ? &s->ok : &s->failed, 1, memory_order_relaxed);
}

static void snapshot(struct rdma_malloc_stats *st)
{
#define LOAD_(name, kind, desc) st->name = atomic_load_explicit(&rdmalloc_counters.name, memory_order_relaxed);
	RDMA_MALLOC_STATS_FIELDS(LOAD_)
#undef LOAD_
	for (int i = 0; i < STRIPES; i++) {
		st->lookups += atomic_load_explicit(&stripes[i].ok, memory_order_relaxed);
		st->lookup_failures += atomic_load_explicit(&stripes[i].failed, memory_order_relaxed);
	}
	/* Derived values are computed here rather than kept in step. */
	st->pds = (uint64_t)rdmalloc_pd_count();
	st->unregistered_chunks = st->pds ? 0 : st->chunks;
	st->heaps = (uint64_t)rdmalloc_heap_count();
	st->live_bytes = rdmalloc_heap_live_bytes();
}

RDMA_EXPORT int rdma_malloc_stats_get(struct rdma_malloc_stats *st)
{
	if (!st || st->version != RDMA_MALLOC_STATS_VERSION || st->size != sizeof(*st))
		return EINVAL;
	rdmalloc_init();
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
