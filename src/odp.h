/* SPDX-License-Identifier: MIT */
/* odp.h - on-demand-paging heaps (RDMA_HEAP_ODP, doc/modes.md). */
#ifndef RDMALLOC_ODP_H
#define RDMALLOC_ODP_H

#include <stdbool.h>
#include <stddef.h>

#include "je.h"

struct ibv_pd;

/* 0 when @pd's device can register an ODP heap with @access (RC ODP with
 * the operations @access allows; with @implicit, implicit ODP too),
 * EOPNOTSUPP or the query's errno else.  A NULL @pd (no device) is 0:
 * nothing will be registered. */
int rdmalloc_odp_check(struct ibv_pd *pd, unsigned int access, int implicit);

/*
 * Implicit ODP (RDMA_HEAP_ODP_IMPLICIT): one region per (PD, access) for
 * the whole address space, shared by every chunk of every implicit heap.
 * get: that region with one more reference, registered on first use; NULL
 * with errno (ENOSPC when too many (PD, access) pairs are in use).
 * put: one reference less; the last deregisters it (0 or its errno).
 * Both take the ODP lock, a leaf never held across a verbs call.
 */
struct ibv_mr *rdmalloc_odp_implicit_get(struct ibv_pd *pd, unsigned int access);
int rdmalloc_odp_implicit_put(struct ibv_mr *mr);
/* In a fork child: forget the parent's regions (like chunks' registrations). */
void rdmalloc_odp_forget(void);

/* The purge hook of ODP heaps: MADV_DONTNEED, allowed because nothing is
 * pinned (the NIC faults the pages in again through the kernel). */
bool rdmalloc_odp_purge(extent_hooks_t *self, void *addr, size_t size, size_t offset, size_t length,
			unsigned arena_ind);

#endif
