/* SPDX-License-Identifier: MIT */
/* stats.c - counters, rdma_malloc_stats_get() and the text/JSON printer. */
#include "stats.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "compiler.h"
#include "heap.h"
#include "init.h"
#include "lock.h"
#include "log.h"
#include "pd.h"

struct rdmalloc_counters rdmalloc_counters;

/*
 * Lookups happen on the data path of every thread, so each thread counts
 * into a block of its own with plain relaxed loads and stores (no locked
 * instruction, no shared cache line).  Blocks join a list on a thread's first
 * lookup; at thread exit a block's counts move to the totals and the block
 * leaves the list.  Readers sum totals and blocks under the list mutex.
 */
struct lookup_counts {
	_Atomic uint64_t ok, failed;
	struct lookup_counts *next, *prev;
	int listed;
};

static RDMALLOC_TLS struct lookup_counts tl_lookups;
static struct lookup_counts *lookups_list;
static uint64_t lookups_ok_gone, lookups_failed_gone; /* of exited threads */
static pthread_key_t lookups_key;
static pthread_once_t lookups_once = PTHREAD_ONCE_INIT;

static void lookups_thread_exit(void *arg)
{
	struct lookup_counts *t = arg;
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	lookups_ok_gone += atomic_load_explicit(&t->ok, memory_order_relaxed);
	lookups_failed_gone += atomic_load_explicit(&t->failed, memory_order_relaxed);
	if (t->prev)
		t->prev->next = t->next;
	else
		lookups_list = t->next;
	if (t->next)
		t->next->prev = t->prev;
	t->listed = 0;
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
}

static void lookups_key_create(void)
{
	if (pthread_key_create(&lookups_key, lookups_thread_exit))
		rdmalloc_fatal("pthread_key_create for the lookup counters failed");
}

static __attribute__((noinline)) void lookups_join(struct lookup_counts *t)
{
	pthread_once(&lookups_once, lookups_key_create);
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	t->prev = NULL;
	t->next = lookups_list;
	if (lookups_list)
		lookups_list->prev = t;
	lookups_list = t;
	t->listed = 1;
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
	pthread_setspecific(lookups_key, t);
}

void rdmalloc_stat_lookup(int ok)
{
	struct lookup_counts *t = &tl_lookups;
	if (unlikely(!t->listed))
		lookups_join(t);
	_Atomic uint64_t *c = ok ? &t->ok : &t->failed;
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void sum_lookups(uint64_t *ok, uint64_t *failed)
{
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	*ok = lookups_ok_gone;
	*failed = lookups_failed_gone;
	for (struct lookup_counts *t = lookups_list; t; t = t->next) {
		*ok += atomic_load_explicit(&t->ok, memory_order_relaxed);
		*failed += atomic_load_explicit(&t->failed, memory_order_relaxed);
	}
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
}

static void snapshot(struct rdma_malloc_stats *st)
{
#define LOAD_(name, kind, desc) st->name = atomic_load_explicit(&rdmalloc_counters.name, memory_order_relaxed);
	RDMA_MALLOC_STATS_FIELDS(LOAD_)
#undef LOAD_
	uint64_t ok, failed;
	sum_lookups(&ok, &failed);
	st->lookups += ok;
	st->lookup_failures += failed;
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
