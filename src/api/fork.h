/* SPDX-License-Identifier: MIT */
/* fork.h - fork(): our locks across it, and the child's registrations. */
#ifndef RDMALLOC_FORK_H
#define RDMALLOC_FORK_H

/* Before jemalloc initialises (idempotent). */
void rdmalloc_fork_register_inner(void);
/* After jemalloc initialised (idempotent). */
void rdmalloc_fork_register_outer(void);

#endif
