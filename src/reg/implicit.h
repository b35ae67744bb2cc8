/* SPDX-License-Identifier: MIT */
/* implicit.h - the shared regions of implicit ODP heaps (implicit.c). */
#ifndef RDMALLOC_IMPLICIT_H
#define RDMALLOC_IMPLICIT_H

struct ibv_pd;
struct ibv_mr;

/*
 * One region per (PD, access) for the whole address space, shared by every
 * chunk of every implicit heap.
 * get: that region with one more reference, registered on first use; NULL
 * with errno (ENOMEM when too many (PD, access) pairs are in use).
 * put: one reference less; the last deregisters it (0 or its errno).
 * Both take the ODP lock, a leaf never held across a verbs call.
 */
struct ibv_mr *rdmalloc_implicit_get(struct ibv_pd *pd, unsigned int access);
int rdmalloc_implicit_put(struct ibv_mr *mr);
/* In a fork child: forget the parent's regions (like chunks' registrations). */
void rdmalloc_implicit_forget(void);

#endif
