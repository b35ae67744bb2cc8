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
/* 0 when the device of every attached PD (none: 0) has the on-demand
 * paging an ODP heap of @access (@implicit: RDMA_HEAP_ODP_IMPLICIT) needs,
 * else EOPNOTSUPP (rdmalloc_odp_supported). */
int rdmalloc_pd_odp_supported(unsigned access, int implicit);
/* Attach or detach with the PD lock held by the caller (the drop-in's
 * elision, which decides and attaches or detaches in one critical
 * section). */
int rdmalloc_pd_attach_locked(struct ibv_pd *pd);
int rdmalloc_pd_detach_locked(struct ibv_pd *pd);
/* The outer lock serialising attach, detach and heap destruction. */
void rdmalloc_pd_lock(void);
void rdmalloc_pd_unlock(void);
/* Detach @pd, which nobody asked to attach (the drop-in's elision did, and
 * evicts it for a free index): rdmalloc_chunks_detach_unused.  PD lock
 * held. */
int rdmalloc_pd_detach_unused_locked(struct ibv_pd *pd);
/* Keys of @pd handed out so far no longer keep the detach above from it
 * (rdmalloc_chunks_forget_hand_outs).  PD lock held. */
void rdmalloc_pd_forget_hand_outs_locked(struct ibv_pd *pd);
/*
 * What the drop-in's elision says about the program's own attach and
 * detach (both called with the PD lock held; they may take inner locks):
 * detach_busy: an errno (EBUSY: elided regions of @pd are alive, whose
 * keys the detach would kill) to refuse rdma_malloc_detach_pd(@pd) with,
 * or 0; adopted: the program attached @pd, or was told it is attached
 * (EEXIST): elision must never detach it.  fork_child: in a fork child,
 * right after the library forgot the parent's registrations and pins (one
 * thread, no lock taken), so that no other fork handler runs in between:
 * its elided regions become the child's, and pin their chunks again.
 */
struct rdmalloc_pd_hooks {
	int (*detach_busy)(struct ibv_pd *pd);
	void (*adopted)(struct ibv_pd *pd);
	void (*fork_child)(void);
};
void rdmalloc_pd_set_hooks(const struct rdmalloc_pd_hooks *hooks);
/* In a fork child: the default PD is the parent's (fork.c); then the
 * hooks' fork_child. */
void rdmalloc_pd_forget(void);
void rdmalloc_pd_fork_child_hook(void);

#endif
