/* SPDX-License-Identifier: MIT */
/*
 * chunk.c - chunks: map memory for a heap, register it with every attached
 * PD, publish it in the address table; and the reverse.
 *
 * Chunks are created only from the alloc extent hook and released only when
 * their heap is destroyed: while a chunk is registered it is never purged,
 * decommitted or unmapped (see hooks.c).
 */
#include "chunk.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "heap.h"
#include "log.h"
#include "options.h"
#include "pd.h"
#include "regtable.h"
#include "stats.h"
#include "verbs.h"

static pthread_mutex_t chunk_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct rdmalloc_chunk *all_chunks;   /* list of published chunks */
static struct rdmalloc_chunk *free_descs;   /* recycled descriptors */
static size_t held_bytes;                   /* for RDMALLOC_MAX_REGISTERED */

void rdmalloc_chunk_lock(void)
{
	pthread_mutex_lock(&chunk_mutex);
}

void rdmalloc_chunk_unlock(void)
{
	pthread_mutex_unlock(&chunk_mutex);
}

/* Descriptors come from pages of their own, never from jemalloc (we run
 * inside its hooks) and are recycled, never unmapped, so a racing reader of
 * a stale pointer reads memory that is still mapped. */
static struct rdmalloc_chunk *desc_alloc(void)
{
	if (!free_descs) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		void *m = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return NULL;
		struct rdmalloc_chunk *d = m;
		for (size_t i = 0; i < page / sizeof(*d); i++) {
			d[i].next = free_descs;
			free_descs = &d[i];
		}
	}
	struct rdmalloc_chunk *c = free_descs;
	free_descs = c->next;
	memset(c, 0, sizeof(*c));
	return c;
}

static void desc_free(struct rdmalloc_chunk *c)
{
	c->base = 0;
	c->size = 0;
	c->heap = NULL;
	c->next = free_descs;
	free_descs = c;
}

/* Map @size bytes at an address aligned to @align (a power of two). */
static void *map_aligned(size_t size, size_t align)
{
	size_t len = size + align;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	char *p = (char *)align_up((uintptr_t)m, align);
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (m + len > p + size)
		munmap(p + size, (size_t)(m + len - (p + size)));
	return p;
}

static void reg_clear(struct rdmalloc_reg *r)
{
	atomic_store_explicit(&r->pd, NULL, memory_order_release);
	atomic_store_explicit(&r->mr, NULL, memory_order_relaxed);
	atomic_store_explicit(&r->lkey, 0, memory_order_relaxed);
	atomic_store_explicit(&r->rkey, 0, memory_order_relaxed);
}

/* Register chunk @c in slot @slot.  Chunk lock held. */
static int reg_slot(struct rdmalloc_chunk *c, unsigned slot, struct ibv_pd *pd)
{
	unsigned access = rdmalloc_heap_access_of(c->heap);
	struct ibv_mr *mr = rdmalloc_reg(pd, (void *)c->base, c->size, access);
	if (!mr)
		return errno ? errno : ENOMEM;
	struct rdmalloc_reg *r = &c->reg[slot];
	unsigned lkey, rkey;
	rdmalloc_mr_keys(mr, &lkey, &rkey);
	atomic_store_explicit(&r->mr, mr, memory_order_relaxed);
	atomic_store_explicit(&r->lkey, lkey, memory_order_relaxed);
	atomic_store_explicit(&r->rkey, rkey, memory_order_relaxed);
	atomic_store_explicit(&r->pd, pd, memory_order_release);
	return 0;
}

/* Deregister slot @slot of @c.  Chunk lock held. */
static int dereg_slot(struct rdmalloc_chunk *c, unsigned slot)
{
	struct rdmalloc_reg *r = &c->reg[slot];
	struct ibv_mr *mr = atomic_load_explicit(&r->mr, memory_order_relaxed);
	reg_clear(r);
	return mr ? rdmalloc_dereg(mr) : 0;
}

static int dereg_all(struct rdmalloc_chunk *c)
{
	int first = 0;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		int err = dereg_slot(c, s);
		if (err && !first)
			first = err;
	}
	return first;
}

struct rdmalloc_chunk *rdmalloc_chunk_create(struct rdmalloc_heap *heap, size_t size, size_t alignment)
{
	size_t align = alignment > RDMALLOC_GRANULE ? alignment : RDMALLOC_GRANULE;
	if (!is_pow2(align) || size == 0 || size > SIZE_MAX - align) {
		errno = ENOMEM;
		return NULL;
	}
	rdmalloc_chunk_lock();
	int err = ENOMEM;
	struct rdmalloc_chunk *c = NULL;
	size_t limit = rdmalloc_opts.max_registered;
	if (limit && (size > limit || held_bytes > limit - size)) {
		STAT_INC(limit_refusals);
		rdmalloc_log_once(RDMALLOC_LOG_WARN,
				  "RDMALLOC_MAX_REGISTERED (%zu bytes) refuses a %zu-byte chunk; jemalloc "
				  "may retry with a smaller chunk, else the allocation fails with ENOMEM "
				  "(further refusals are only counted)",
				  limit, size);
		goto out;
	}
	c = desc_alloc();
	if (!c)
		goto out;
	void *p = map_aligned(size, align);
	if (!p) {
		err = errno;
		desc_free(c);
		c = NULL;
		goto out;
	}
	c->base = (uintptr_t)p;
	c->size = size;
	c->heap = heap;
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		struct ibv_pd *pd = rdmalloc_pd_slot(s);
		if (pd && (err = reg_slot(c, s, pd)) != 0) {
			struct rlimit rl = { 0, 0 };
			getrlimit(RLIMIT_MEMLOCK, &rl);
			rdmalloc_log_once(RDMALLOC_LOG_WARN,
					  "ibv_reg_mr of a %zu-byte chunk failed: %s (RLIMIT_MEMLOCK %llu bytes); "
					  "jemalloc may retry with a smaller chunk, else the allocation fails "
					  "with ENOMEM (further failures are only counted)",
					  size, strerror(err), (unsigned long long)rl.rlim_cur);
			goto undo;
		}
	}
	if ((err = rdmalloc_table_insert(c)) != 0)
		goto undo;
	c->next = all_chunks;
	if (all_chunks)
		all_chunks->prev = c;
	all_chunks = c;
	held_bytes += size;
	STAT_INC(chunks);
	STAT_ADD(chunk_bytes, size);
	err = 0;
	goto out;
undo:
	dereg_all(c);
	munmap(p, size);
	desc_free(c);
	c = NULL;
out:
	rdmalloc_chunk_unlock();
	if (!c)
		errno = err == 0 ? ENOMEM : err;
	return c;
}

/* Chunk lock held. */
static void release(struct rdmalloc_chunk *c)
{
	rdmalloc_table_remove(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		all_chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (dereg_all(c)) {
		/* The NIC may still map these pages: unmapping them would let
		 * the kernel hand them to someone else while a peer can write
		 * them.  Keep them (pinned) and say so. */
		rdmalloc_log(RDMALLOC_LOG_ERROR, "chunk %p (%zu bytes) kept mapped: deregistration failed",
			     (void *)c->base, c->size);
	} else {
		munmap((void *)c->base, c->size);
	}
	held_bytes -= c->size;
	STAT_SUB(chunks, 1);
	STAT_SUB(chunk_bytes, c->size);
	desc_free(c);
}

void rdmalloc_chunk_destroyed(void *addr, size_t size)
{
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = rdmalloc_table_lookup(addr);
	if (!c || (uintptr_t)addr + size > c->base + c->size)
		rdmalloc_fatal("destroy hook for [%p, +%zu) that is not a chunk of ours", addr, size);
	c->destroyed += size;
	if (c->destroyed == c->size)
		release(c);
	rdmalloc_chunk_unlock();
}

size_t rdmalloc_chunk_release_heap(struct rdmalloc_heap *heap)
{
	size_t n = 0;
	rdmalloc_chunk_lock();
	for (struct rdmalloc_chunk *c = all_chunks, *next; c; c = next) {
		next = c->next;
		if (c->heap == heap) {
			release(c);
			n++;
		}
	}
	rdmalloc_chunk_unlock();
	return n;
}

int rdmalloc_chunks_register_slot(unsigned slot, struct ibv_pd *pd)
{
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next) {
		int err = reg_slot(c, slot, pd);
		if (err) {
			for (struct rdmalloc_chunk *d = all_chunks; d != c; d = d->next)
				dereg_slot(d, slot);
			return err;
		}
	}
	return 0;
}

int rdmalloc_chunks_deregister_slot(unsigned slot)
{
	int first = 0;
	for (struct rdmalloc_chunk *c = all_chunks; c; c = c->next) {
		int err = dereg_slot(c, slot);
		if (err && !first)
			first = err;
	}
	return first;
}
