/* SPDX-License-Identifier: MIT */
/* sigpipe.c - writes of ours that cannot kill the program (sigpipe.h). */
#include "sigpipe.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static void only_pipe(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGPIPE);
}

static int pipe_pending(void)
{
	sigset_t pending;
	return !sigpending(&pending) && sigismember(&pending, SIGPIPE) == 1;
}

void rdmalloc_sigpipe_hold(struct rdmalloc_sigpipe_hold *h)
{
	sigset_t pipe;
	only_pipe(&pipe);
	h->was_pending = pipe_pending();
	pthread_sigmask(SIG_BLOCK, &pipe, &h->old);
}

void rdmalloc_sigpipe_release(struct rdmalloc_sigpipe_hold *h, int raised)
{
	int saved = errno;
	/* A write to a pipe raises SIGPIPE at its thread, pending here while
	 * blocked: take it back before the old mask would deliver it.  Only
	 * then: a SIGPIPE sent to the process meanwhile is the program's. */
	if (raised && !h->was_pending && pipe_pending()) {
		sigset_t pipe;
		only_pipe(&pipe);
		const struct timespec now = { 0, 0 };
		while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &h->old, NULL);
	errno = saved;
}
