/* SPDX-License-Identifier: MIT */
/* fork_window.h - the library held as fork() holds it from its prepare
 * handlers to its parent handlers (a fork coming, so no thread of ours
 * starts; every inner lock taken), without forking: to call what another
 * thread may call meanwhile.  VERBS is the first inner lock (lock.h). */
#ifndef FORK_WINDOW_H
#define FORK_WINDOW_H

#include "lock.h"
#include "os.h"

static inline void fork_window_open(void)
{
	rdmalloc_os_threads_fork_prepare(0); /* waits for nothing */
	for (int id = RDMALLOC_LOCK_VERBS; id < RDMALLOC_LOCK_COUNT; id++)
		rdmalloc_lock((enum rdmalloc_lock_id)id);
}

static inline void fork_window_close(void)
{
	for (int id = RDMALLOC_LOCK_COUNT - 1; id >= RDMALLOC_LOCK_VERBS; id--)
		rdmalloc_unlock((enum rdmalloc_lock_id)id);
	rdmalloc_os_threads_fork_parent();
}

#endif
