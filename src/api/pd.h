/* SPDX-License-Identifier: MIT */
/* pd.h - the attached protection domains and the default one. */
#ifndef RDMALLOC_PD_H
#define RDMALLOC_PD_H

struct ibv_pd;

/* Open the default PD (once, at initialisation) and attach it. */
void rdmalloc_pd_init(void);
/* The default PD as of now (NULL if none or detached). */
struct ibv_pd *rdmalloc_pd_default(void);
unsigned rdmalloc_pd_count(void);
/* Whether @pd is attached (a lock-free read). */
int rdmalloc_pd_attached(const struct ibv_pd *pd);
/* rdma_malloc_attach_pd / rdma_malloc_detach_pd of a non-NULL @pd, for an
 * initialised library (the drop-in's elision). */
int rdmalloc_pd_attach(struct ibv_pd *pd);
int rdmalloc_pd_detach(struct ibv_pd *pd);
/* The same with the PD lock held by the caller (the drop-in's elision,
 * which decides and attaches or detaches in one critical section). */
int rdmalloc_pd_attach_locked(struct ibv_pd *pd);
int rdmalloc_pd_detach_locked(struct ibv_pd *pd);
/* The outer lock serialising attach, detach and heap destruction. */
void rdmalloc_pd_lock(void);
void rdmalloc_pd_unlock(void);
/* In a fork child: the default PD is the parent's (fork.c). */
void rdmalloc_pd_forget(void);

#endif
