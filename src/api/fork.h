/* SPDX-License-Identifier: MIT */
/* fork.h - fork(): our locks across it, and the child's registrations. */
#ifndef RDMALLOC_FORK_H
#define RDMALLOC_FORK_H

#include <stdint.h>

#include "compiler.h"

/* Before jemalloc initialises (idempotent). */
void rdmalloc_fork_register_inner(void);
/* After jemalloc initialised (idempotent). */
void rdmalloc_fork_register_outer(void);

/* How long fork() waits, in all, for work of ours under way: the decay's
 * and the trims' work on the arenas (heap.h), threads of ours being
 * started (os.h), verbs calls (verbs.h), then the reserve's thread and
 * the crew's workers (reserve.h, crew.h).  A call may never end: one whose allocation needs a lock the
 * program's own fork handler already took (an allocator whose handler runs
 * before ours), one of the reserve thread's that frees into jemalloc after
 * jemalloc's prepare.  (The crew's workers only madvise, which ends.)
 * Past it the fork goes ahead, logged once and counted once in fallbacks:
 * these waits never hang a fork.  (A hook under jemalloc's growth lock is
 * waited for by jemalloc's prepare, not by us.)  Counted from the moment
 * the fork holds INIT and (where it takes it first) stdio's list lock,
 * whose waits it does not bound. */
#define RDMALLOC_FORK_WAIT_NS (30ull * 1000000000u)
extern RDMALLOC_TESTABLE uint64_t rdmalloc_fork_wait_ns; /* it; tests shorten it */

#endif
