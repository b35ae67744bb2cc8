/* SPDX-License-Identifier: MIT */
/* init.h - one-time initialisation: the allocator's core, then RDMA on first need. */
#ifndef RDMALLOC_INIT_H
#define RDMALLOC_INIT_H

#include <stdatomic.h>

/*
 * Two stages.  The core (options, jemalloc, fork handlers, the heaps'
 * background tick) is what an allocation needs: the drop-in's constructor
 * initialises it.  RDMA (libibverbs loaded, the default PD opened and
 * attached, the default heap) comes with the first call that needs it:
 * every rdma_* call that takes or gives keys, PDs or registered memory, and
 * the first registration the drop-in elides.  So a program under the
 * drop-in that never meets a NIC loads no verbs library, opens no device
 * and prints no warning about one.  Both run under the INIT lock, which
 * fork() takes first.
 */
extern atomic_int rdmalloc_ready;      /* both stages done */
extern atomic_int rdmalloc_core_ready; /* the core done */
void rdmalloc_init_slow(int rdma);
/* At initialisation: print the stats at exit if RDMALLOC_STATS asks
 * (stats_exit.c). */
void rdmalloc_stats_at_exit(void);

/* Every public entry point that needs RDMA calls this first. */
static inline void rdmalloc_init(void)
{
	if (__builtin_expect(!atomic_load_explicit(&rdmalloc_ready, memory_order_acquire), 0))
		rdmalloc_init_slow(1);
}

/* Entry points that need only the allocator (stats, trim, the drop-in). */
static inline void rdmalloc_init_core(void)
{
	if (__builtin_expect(!atomic_load_explicit(&rdmalloc_core_ready, memory_order_acquire), 0))
		rdmalloc_init_slow(0);
}

#endif
