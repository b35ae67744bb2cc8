/* SPDX-License-Identifier: MIT */
/* tls.h - the thread-local word every layer and the drop-in read: whether
 * this thread is inside one of rdmalloc's verbs calls or extent hooks, and
 * the drop-in's arena binding (verbs.c and the extent hooks raise it); and
 * whether jemalloc has cleaned the thread up (it ends). */
#ifndef RDMALLOC_TLS_H
#define RDMALLOC_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/*
 * Non-zero while this thread is inside a verbs call made by rdmalloc.  The
 * LD_PRELOAD drop-in then serves the thread's allocations (libibverbs
 * allocates inside ibv_reg_mr) from its nest, never from jemalloc
 * (preload/nest.c), and passes its own ibv_reg_mr calls straight to
 * libibverbs.
 */
struct rdmalloc_tl_state {
	int bound;    /* the drop-in's: 1 bound to a preload arena, -1 binding failed,
			 RDMALLOC_TL_ERRAND bound with an errand, RDMALLOC_TL_ENDED */
	int in_verbs; /* rdmalloc_tl_in_verbs; + RDMALLOC_TL_IN_HOOK per running hook */
};
extern RDMALLOC_TLS struct rdmalloc_tl_state rdmalloc_tl;
#define rdmalloc_tl_in_verbs (rdmalloc_tl.in_verbs)
/* An extent hook of ours is running on this thread: jemalloc may hold one of
 * its arena locks, and serves any allocation from arena 0 whatever the
 * flags ask (its reentrancy rule).  Hooks add it to in_verbs, so the
 * drop-in treats a hook as a verbs call: its allocations go to the nest. */
#define RDMALLOC_TL_IN_HOOK 0x10000
#define rdmalloc_tl_in_hook (rdmalloc_tl.in_verbs >= RDMALLOC_TL_IN_HOOK)
/* bound: bound, and an errand waits for this thread's next allocation
 * outside every lock (the reserve's thread to start, which a hook must not
 * do: reg/reserve.h).  The drop-in's fast path fails on it once. */
#define RDMALLOC_TL_ERRAND 2
/* bound: jemalloc has cleaned this thread's state up (it ends: a pthread
 * key destructor runs), and would serve its allocations from arena 0 now,
 * whatever arena it was bound to (heap/jemalloc.c).  The drop-in's nest
 * serves its mallocs. */
#define RDMALLOC_TL_ENDED (-2)
/* The rdma_* allocations' view of this thread: 0 until one of its
 * allocations from jemalloc has succeeded (big blocks are not jemalloc's;
 * the first one watches it: heap.h, rdmalloc_heap_mallocx_first), 1 from
 * then on, RDMALLOC_TL_ENDED once jemalloc has cleaned it up: big blocks
 * serve it then (api/alloc.c). */
extern RDMALLOC_TLS int rdmalloc_tl_watch;
/* Set when a chunk was refused on this thread for want of memory (the
 * limit, or ENOMEM/EAGAIN from ibv_reg_mr): an allocation that then fails
 * may give memory back and try again (heap.c, rdmalloc_heaps_relieve). */
extern RDMALLOC_TLS int rdmalloc_tl_pressure;
/* The drop-in's fast path reads both words at once: one TLS compare with
 * an immediate (bound == 1 and in_verbs == 0 is the 64-bit word 1 on a
 * little-endian machine: no 64-bit constant to load first). */
_Static_assert(sizeof(struct rdmalloc_tl_state) == sizeof(uint64_t) &&
		       offsetof(struct rdmalloc_tl_state, bound) == 0,
	       "rdmalloc_tl_state is read as one 64-bit word");

#endif
