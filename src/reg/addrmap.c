/* SPDX-License-Identifier: MIT */
/* addrmap.c - the address map's storage and its writers (see addrmap.h). */
#include "addrmap.h"

#include <errno.h>

#include "log.h"
#include "os.h"

_Atomic(rdmalloc_addrmap_entry_t *) rdmalloc_addrmap[1u << RDMALLOC_L1_BITS];
/* The auto map (addrmap.h), NULL until given or reserved; writers hold
 * the chunk lock. */
static rdmalloc_auto_leaf_t *auto_map;

#define L2_MASK ((1u << RDMALLOC_L2_BITS) - 1)

/* The auto map's leaf for granule @g, mapped if need be (chunk lock held):
 * 0 or ENOMEM. */
static int auto_leaf(uintptr_t g)
{
	rdmalloc_auto_leaf_t *slot = &auto_map[g >> RDMALLOC_AUTO_LEAF_SHIFT];
	if (__atomic_load_n(slot, __ATOMIC_RELAXED))
		return 0;
	void *m = rdmalloc_os_map(RDMALLOC_AUTO_LEAF_BYTES);
	if (!m)
		return ENOMEM;
	__atomic_store_n(slot, (unsigned char *)m, __ATOMIC_RELEASE); /* zeros: nothing marked */
	return 0;
}

struct rdmalloc_chunk *rdmalloc_addrmap_find(const void *p)
{
	return rdmalloc_addrmap_lookup(p);
}

int rdmalloc_addrmap_auto_find(const void *p)
{
	rdmalloc_auto_leaf_t *map = __atomic_load_n(&auto_map, __ATOMIC_ACQUIRE);
	return map && rdmalloc_addrmap_is_auto_in(map, p);
}

static rdmalloc_addrmap_entry_t *leaf_of(uintptr_t a, int create)
{
	_Atomic(rdmalloc_addrmap_entry_t *) *top = &rdmalloc_addrmap[a >> RDMALLOC_L1_SHIFT];
	rdmalloc_addrmap_entry_t *leaf = atomic_load_explicit(top, memory_order_acquire);
	if (leaf || !create)
		return leaf;
	void *m = rdmalloc_os_reserve(sizeof(rdmalloc_addrmap_entry_t) << RDMALLOC_L2_BITS);
	if (!m)
		return NULL;
	atomic_store_explicit(top, (rdmalloc_addrmap_entry_t *)m, memory_order_release);
	return m;
}

/* Whether @c's granules are marked in the auto map (addrmap.h). */
static int marked(const struct rdmalloc_chunk *c)
{
	return c->spec->auto_cache && !c->big;
}

/* The auto map marks a granule only when the chunk's mapping covers all of
 * it: the rest of a granule a mapping ends inside is the kernel's to give
 * to anyone, and a free() there must not reach jemalloc (it takes the slow
 * path, whose lookup checks the chunk's bounds).  Big chunks are never
 * jemalloc's: not marked. */
static void set_range(struct rdmalloc_chunk *c, struct rdmalloc_chunk *val)
{
	rdmalloc_auto_leaf_t *mark = marked(c) ? auto_map : NULL;
	for (uintptr_t a = c->base; a < c->base + c->size; a += RDMALLOC_GRANULE) {
		rdmalloc_addrmap_entry_t *leaf = leaf_of(a, 0);
		atomic_store_explicit(&leaf[(a >> RDMALLOC_GRANULE_SHIFT) & L2_MASK], val,
				      memory_order_release);
		if (mark) { /* the leaf exists: insert made it */
			uintptr_t g = a >> RDMALLOC_GRANULE_SHIFT;
			__atomic_store_n(&mark[g >> RDMALLOC_AUTO_LEAF_SHIFT][g & (RDMALLOC_AUTO_LEAF_BYTES - 1)],
					 val != NULL && c->base + c->map_size + c->tail - a >= RDMALLOC_GRANULE
						 ? c->spec->auto_cache : 0,
					 __ATOMIC_RELEASE);
		}
	}
}

void rdmalloc_addrmap_auto_give(rdmalloc_auto_leaf_t *map)
{
	if (__atomic_load_n(&auto_map, __ATOMIC_RELAXED))
		rdmalloc_fatal("the auto map was given after it was needed");
	__atomic_store_n(&auto_map, map, __ATOMIC_RELEASE);
}

int rdmalloc_addrmap_insert(struct rdmalloc_chunk *c)
{
	if (c->base & (RDMALLOC_GRANULE - 1))
		rdmalloc_fatal("chunk %p is not aligned to the table granule", (void *)c->base);
	if ((c->base + c->size) >> RDMALLOC_VA_BITS)
		return ENOMEM;
	if (marked(c) && !auto_map) { /* the chunk lock orders writers */
		void *m = rdmalloc_os_map(RDMALLOC_ADDRMAP_AUTO_LEAVES * sizeof(*auto_map));
		if (!m)
			return ENOMEM;
		__atomic_store_n(&auto_map, (rdmalloc_auto_leaf_t *)m, __ATOMIC_RELEASE);
	}
	/* Every leaf first, the table's and the auto map's, so that a failure
	 * leaves nothing half published. */
	for (uintptr_t a = c->base; a < c->base + c->size; a += RDMALLOC_GRANULE)
		if (!leaf_of(a, 1) || (marked(c) && auto_leaf(a >> RDMALLOC_GRANULE_SHIFT)))
			return ENOMEM;
	set_range(c, c);
	return 0;
}

void rdmalloc_addrmap_remove(struct rdmalloc_chunk *c)
{
	set_range(c, NULL);
}
