/* SPDX-License-Identifier: MIT */
/*
 * region.h - one registration: chunk @c with the PD of index @i (c->reg[i]).
 * Register, deregister, change access.  No list and no lock here: the
 * caller owns the registration meanwhile (a creator its unpublished chunk;
 * attach, detach and access changes are serialised by the PD lock).
 */
#ifndef RDMALLOC_REGION_H
#define RDMALLOC_REGION_H

#include "chunk.h"

/* Register @c with @pd as registration @i, under @c's heap's access now.
 * 0 or an errno value. */
int rdmalloc_region_register(struct rdmalloc_chunk *c, unsigned i, struct ibv_pd *pd);
/* Clear registration @i for lock-free readers and return its region (NULL
 * if none), which the caller then hands to rdmalloc_region_deregister. */
struct ibv_mr *rdmalloc_region_unpublish(struct rdmalloc_chunk *c, unsigned i);
/* Deregister @mr, a region of @c (or give back the shared implicit one):
 * 0 or an errno value; a failure marks @c never to be unmapped. */
int rdmalloc_region_deregister(struct rdmalloc_chunk *c, struct ibv_mr *mr);
/* Unpublish and deregister every registration of @c: the first errno. */
int rdmalloc_region_deregister_all(struct rdmalloc_chunk *c);
/* Make @c's registrations match @want (the PD of each index) and its
 * heap's access now, on this thread, one PD after another (never on the
 * crew's: crew.h): 0 or the errno of the first failed registration, those
 * before it left registered. */
int rdmalloc_region_sync(struct rdmalloc_chunk *c, struct ibv_pd *const want[RDMA_MALLOC_MAX_PDS]);
/*
 * Give registration @i the flags @access: in place, or (with @new_keys,
 * or when the device refuses) by registering anew, publishing the new keys
 * and only then deregistering the old region.  Marks it with @stamp.
 * 0 (*@old and *@now the keys before and after) or an errno value.
 */
int rdmalloc_region_change_access(struct rdmalloc_chunk *c, unsigned i, unsigned access, int new_keys,
				  unsigned stamp, uint64_t *old, uint64_t *now);
/* In a fork child: forget registration @i without deregistering it. */
void rdmalloc_region_forget(struct rdmalloc_chunk *c, unsigned i);

#endif
