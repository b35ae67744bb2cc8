/* SPDX-License-Identifier: MIT */
/* counters.c - the library's counters, and the lookups counted per thread. */
#include "counters.h"

#include <errno.h>
#include <pthread.h>

#include "compiler.h"
#include "lock.h"
#include "log.h"
#include "os.h"

struct rdmalloc_counters rdmalloc_counters;

/*
 * Lookups happen on the data path of every thread, so each thread counts
 * into a slot of its own with plain relaxed loads and stores (no locked
 * instruction, no shared cache line).  Slots are the library's memory,
 * never the thread's TLS, which goes with its stack while a slot may stay
 * listed: one taken in glibc's last round of key destructors is never
 * given back, and a fork child inherits the other threads' slots.  Pages
 * of slots are mapped as needed and never unmapped; readers sum every slot
 * under the LOOKUPS lock.  At thread exit (a key destructor) a slot's
 * counts move to the totals and the slot to the free list; in a fork
 * child, every slot but the forking thread's does.
 */
struct lookup_counts {
	_Atomic uint64_t ok, failed;
	struct lookup_counts *next_free; /* (lock) */
	int used;                        /* (lock) a thread's */
} __attribute__((aligned(64)));

#define PAGE_SLOTS (4096 / sizeof(struct lookup_counts))
#define MAX_PAGES 1024 /* 65536 threads at once */
static struct lookup_counts first_page[PAGE_SLOTS];
static struct lookup_counts *pages[MAX_PAGES] = { first_page }; /* (lock) */
static unsigned npages = 1, page_used;                          /* (lock) slots handed out of the last */
static struct lookup_counts *free_slots;                        /* (lock) */
/* Where a thread counts when no slot can be had (65536 threads at once, or
 * no memory for a page): shared, so its counts may be off. */
static struct lookup_counts spill;
static RDMALLOC_TLS struct lookup_counts *tl_slot;
static uint64_t lookups_ok_gone, lookups_failed_gone; /* (lock) of exited threads */
static pthread_key_t lookups_key;
static pthread_once_t lookups_once = PTHREAD_ONCE_INIT;

/* Lock held. */
static void give_back(struct lookup_counts *t)
{
	lookups_ok_gone += atomic_load_explicit(&t->ok, memory_order_relaxed);
	lookups_failed_gone += atomic_load_explicit(&t->failed, memory_order_relaxed);
	atomic_store_explicit(&t->ok, 0, memory_order_relaxed);
	atomic_store_explicit(&t->failed, 0, memory_order_relaxed);
	t->used = 0;
	t->next_free = free_slots;
	free_slots = t;
}

static void lookups_thread_exit(void *arg)
{
	struct lookup_counts *t = arg;
	tl_slot = NULL; /* a later destructor's lookup takes one again */
	if (t == &spill)
		return;
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	give_back(t);
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
}

static void lookups_key_create(void)
{
	if (pthread_key_create(&lookups_key, lookups_thread_exit))
		rdmalloc_fatal("pthread_key_create for the lookup counters failed");
}

/* Lock held (or a fork child): the slots handed out of page @i. */
static unsigned slots_in(unsigned i)
{
	return i + 1 < npages ? PAGE_SLOTS : page_used;
}

/* Lock held: a free slot, or a new one; NULL when there is none. */
static struct lookup_counts *take_slot(void)
{
	struct lookup_counts *t = free_slots;
	if (t) {
		free_slots = t->next_free;
		return t;
	}
	if (page_used == PAGE_SLOTS) {
		if (npages == MAX_PAGES)
			return NULL;
		struct lookup_counts *page = rdmalloc_os_map(4096); /* zeroed */
		if (!page)
			return NULL;
		pages[npages++] = page;
		page_used = 0;
	}
	return &pages[npages - 1][page_used++];
}

/* A thread's first lookup: its slot.  errno kept (a lookup leaves it
 * alone, rdma_malloc_keys(3)): a new page of slots is an mmap. */
static __attribute__((noinline)) struct lookup_counts *lookups_join(void)
{
	int saved = errno;
	pthread_once(&lookups_once, lookups_key_create);
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	struct lookup_counts *t = take_slot();
	if (t)
		t->used = 1;
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
	if (!t) {
		t = &spill;
		STAT_INC(fallbacks);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "no counter slot for a thread's key lookups (65536 threads, "
				  "or no memory): such threads share one, and the lookup counts may be low");
	}
	tl_slot = t;
	pthread_setspecific(lookups_key, t);
	errno = saved;
	return t;
}

void rdmalloc_stat_lookup(int ok)
{
	struct lookup_counts *t = tl_slot;
	if (unlikely(!t))
		t = lookups_join();
	_Atomic uint64_t *c = ok ? &t->ok : &t->failed;
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

void rdmalloc_counters_fork_child(void)
{
	/* One thread, no lock needed: the others' slots are free again. */
	for (unsigned i = 0; i < npages; i++)
		for (unsigned k = 0; k < slots_in(i); k++)
			if (pages[i][k].used && &pages[i][k] != tl_slot)
				give_back(&pages[i][k]);
}

RDMALLOC_TESTABLE unsigned rdmalloc_counters_slots_used(void)
{
	unsigned n = 0;
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	for (unsigned i = 0; i < npages; i++)
		for (unsigned k = 0; k < slots_in(i); k++)
			n += pages[i][k].used;
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
	return n;
}

static void sum_lookups(uint64_t *ok, uint64_t *failed)
{
	rdmalloc_lock(RDMALLOC_LOCK_LOOKUPS);
	*ok = lookups_ok_gone + atomic_load_explicit(&spill.ok, memory_order_relaxed);
	*failed = lookups_failed_gone + atomic_load_explicit(&spill.failed, memory_order_relaxed);
	for (unsigned i = 0; i < npages; i++)
		for (unsigned k = 0; k < slots_in(i); k++) {
			*ok += atomic_load_explicit(&pages[i][k].ok, memory_order_relaxed);
			*failed += atomic_load_explicit(&pages[i][k].failed, memory_order_relaxed);
		}
	rdmalloc_unlock(RDMALLOC_LOCK_LOOKUPS);
}

void rdmalloc_counters_read(struct rdma_malloc_stats *st)
{
#define LOAD_(name, kind, desc) st->name = atomic_load_explicit(&rdmalloc_counters.name, memory_order_relaxed);
	RDMA_MALLOC_STATS_FIELDS(LOAD_)
#undef LOAD_
	uint64_t ok, failed;
	sum_lookups(&ok, &failed);
	st->lookups += ok;
	st->lookup_failures += failed;
}
