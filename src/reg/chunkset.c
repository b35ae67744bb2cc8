/* SPDX-License-Identifier: MIT */
/* chunkset.c - the chunk set (chunkset.h): the chunk lock, descriptors,
 * the list of chunks, the stats of chunks held. */
#include "chunkset.h"

#include <string.h>
#include <unistd.h>

#include "addrmap.h"
#include "counters.h"
#include "hugepage.h"
#include "lock.h"
#include "os.h"

struct rdmalloc_chunk *rdmalloc_chunk_list; /* chunkset.h */
static struct rdmalloc_chunk *free_descs;   /* recycled descriptors */

void rdmalloc_chunk_lock(void)
{
	rdmalloc_lock(RDMALLOC_LOCK_CHUNK);
}

void rdmalloc_chunk_unlock(void)
{
	rdmalloc_unlock(RDMALLOC_LOCK_CHUNK);
}

/* Descriptors come from pages of their own, never from jemalloc (we run
 * inside its hooks) and are recycled, never unmapped, so a racing reader of
 * a stale pointer reads memory that is still mapped.  Chunk lock held. */
struct rdmalloc_chunk *rdmalloc_desc_alloc(void)
{
	if (!free_descs) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		void *m = rdmalloc_os_map(page);
		if (!m)
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

/* Chunk lock held. */
void rdmalloc_desc_free(struct rdmalloc_chunk *c)
{
	rdmalloc_chunk_idle_fini(c);
	c->base = 0;
	c->size = 0;
	c->map_size = 0;
	c->tail = 0;
	c->heap = NULL;
	__atomic_store_n(&c->spec, NULL, __ATOMIC_RELAXED); /* rdmalloc_chunk_spec_seen */
	c->next = free_descs;
	free_descs = c;
}

/* @c enters (@delta 1) or leaves (-1) the stats of chunks held; rdmalloc_held_bytes
 * is rdmalloc_hold()'s.  Chunk lock held. */
void rdmalloc_count_held(const struct rdmalloc_chunk *c, int delta)
{
	if (delta > 0) {
		STAT_INC(chunks);
		STAT_MAX(peak_chunk_bytes, STAT_ADD(chunk_bytes, c->map_size) + c->map_size);
		atomic_fetch_add_explicit(&c->spec->bytes, c->map_size, memory_order_relaxed);
	} else {
		STAT_SUB(chunks, 1);
		STAT_SUB(chunk_bytes, c->map_size);
		atomic_fetch_sub_explicit(&c->spec->bytes, c->map_size, memory_order_relaxed);
	}
	rdmalloc_huge_count(c->page_kind, delta);
}

struct rdmalloc_chunk *rdmalloc_chunk_owning(const void *p)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_entry(p);
	return c && (uintptr_t)p - c->base < c->size ? c : NULL;
}

/* Take @c out of the chunk list.  Chunk lock held. */
void rdmalloc_chunk_unlink(struct rdmalloc_chunk *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		rdmalloc_chunk_list = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

/* Put @c at the head of the chunk list.  Chunk lock held. */
void rdmalloc_chunk_link(struct rdmalloc_chunk *c)
{
	c->prev = NULL;
	c->next = rdmalloc_chunk_list;
	if (rdmalloc_chunk_list)
		rdmalloc_chunk_list->prev = c;
	rdmalloc_chunk_list = c;
}
