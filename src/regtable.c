/* SPDX-License-Identifier: MIT */
/* regtable.c - the address table's storage and its writers (see regtable.h). */
#include "regtable.h"

#include <errno.h>
#include <sys/mman.h>

#include "log.h"

_Atomic(rdmalloc_slot_t *) rdmalloc_table[1u << RDMALLOC_L1_BITS];

#define L2_MASK ((1u << RDMALLOC_L2_BITS) - 1)

struct rdmalloc_chunk *rdmalloc_table_find(const void *p)
{
	return rdmalloc_table_lookup(p);
}

static rdmalloc_slot_t *leaf_of(uintptr_t a, int create)
{
	_Atomic(rdmalloc_slot_t *) *top = &rdmalloc_table[a >> RDMALLOC_L1_SHIFT];
	rdmalloc_slot_t *leaf = atomic_load_explicit(top, memory_order_acquire);
	if (leaf || !create)
		return leaf;
	void *m = mmap(NULL, sizeof(rdmalloc_slot_t) << RDMALLOC_L2_BITS, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	atomic_store_explicit(top, (rdmalloc_slot_t *)m, memory_order_release);
	return m;
}

static void set_range(struct rdmalloc_chunk *c, struct rdmalloc_chunk *val)
{
	for (uintptr_t a = c->base; a < c->base + c->size; a += RDMALLOC_GRANULE) {
		rdmalloc_slot_t *leaf = leaf_of(a, 0);
		atomic_store_explicit(&leaf[(a >> RDMALLOC_GRANULE_SHIFT) & L2_MASK], val,
				      memory_order_release);
	}
}

int rdmalloc_table_insert(struct rdmalloc_chunk *c)
{
	if (c->base & (RDMALLOC_GRANULE - 1))
		rdmalloc_fatal("chunk %p is not aligned to the table granule", (void *)c->base);
	if ((c->base + c->size) >> RDMALLOC_VA_BITS)
		return ENOMEM;
	/* Every leaf first, so that a failure leaves nothing half published. */
	for (uintptr_t a = c->base; a < c->base + c->size; a += RDMALLOC_GRANULE)
		if (!leaf_of(a, 1))
			return ENOMEM;
	set_range(c, c);
	return 0;
}

void rdmalloc_table_remove(struct rdmalloc_chunk *c)
{
	set_range(c, NULL);
}
