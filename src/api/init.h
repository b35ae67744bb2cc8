/* SPDX-License-Identifier: MIT */
/* init.h - one-time initialisation: options, default PD, default heap. */
#ifndef RDMALLOC_INIT_H
#define RDMALLOC_INIT_H

#include <stdatomic.h>

extern atomic_int rdmalloc_ready;
void rdmalloc_init_slow(void);
/* At initialisation: print the stats at exit if RDMALLOC_STATS asks
 * (stats_exit.c). */
void rdmalloc_stats_at_exit(void);

/* Every public entry point that needs the library calls this first. */
static inline void rdmalloc_init(void)
{
	if (__builtin_expect(!atomic_load_explicit(&rdmalloc_ready, memory_order_acquire), 0))
		rdmalloc_init_slow();
}

#endif
