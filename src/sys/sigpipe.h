/* SPDX-License-Identifier: MIT */
/*
 * sigpipe.h - writes the library makes on its own (its messages, the stats
 * at exit) that cannot kill the program with SIGPIPE.
 *
 * A program whose standard error is a pipe with no reader left (`prog 2>&1
 * | head`, a log collector that went away) would die of a message it never
 * asked for, or of the stats at exit, its own exit status replaced by 141.
 * Between hold and release SIGPIPE is blocked in the calling thread; the
 * one a write of ours raised (it failed with EPIPE) is taken back at the
 * release, unless one was pending before (signals of a kind do not queue:
 * the program's stays).  Async-signal-safe; the calling thread's signal
 * mask and errno are restored.
 */
#ifndef RDMALLOC_SIGPIPE_H
#define RDMALLOC_SIGPIPE_H

#include <signal.h>

struct rdmalloc_sigpipe_hold {
	sigset_t old; /* the thread's mask before */
	int was_pending;
};

void rdmalloc_sigpipe_hold(struct rdmalloc_sigpipe_hold *h);
/* @raised: a write between hold and release failed with EPIPE. */
void rdmalloc_sigpipe_release(struct rdmalloc_sigpipe_hold *h, int raised);

#endif
