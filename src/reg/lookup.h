/* SPDX-License-Identifier: MIT */
/* lookup.h - the library's own lookup: pointer to chunk and registration. */
#ifndef RDMALLOC_LOOKUP_H
#define RDMALLOC_LOOKUP_H

#include <errno.h>
#include <stddef.h>

#include "addrmap.h"
#include "chunk.h"

/*
 * The chunk holding [@ptr, @ptr+@len) (@len 0 is 1) and its registration
 * with @pd (the caller resolves "the default PD": NULL here is ENODEV): 0,
 * or ENOENT (not rdmalloc memory), ERANGE (past the chunk), ENODEV (@pd not
 * attached).  Lock-free; counts
 * nothing (the public calls count).  *@r's struct ibv_mr may be used only
 * under the PD lock (chunk.h).
 */
static inline int rdmalloc_lookup(const void *ptr, size_t len, struct ibv_pd *pd,
				  struct rdmalloc_chunk **cp, struct rdmalloc_reg **out)
{
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(ptr);
	if (!c)
		return ENOENT;
	size_t off = (uintptr_t)ptr - c->base;
	if ((len ? len : 1) > c->size - off)
		return ERANGE;
	if (!pd)
		return ENODEV;
#ifdef RDMALLOC_MUTATION_WRONG_KEY /* test-only: a neighbouring chunk's keys */
	if (c->next)
		c = c->next;
#endif
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++) {
		if (atomic_load_explicit(&c->reg[s].pd, memory_order_acquire) == pd) {
			*cp = c;
			*out = &c->reg[s];
			return 0;
		}
	}
	return ENODEV;
}

#endif
