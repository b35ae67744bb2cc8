/* SPDX-License-Identifier: MIT */
/*
 * nocancel.h - the library's blocking calls are no cancellation points.
 *
 * glibc's malloc has none, so a program may cancel a thread whatever it is
 * doing.  A thread cancelled inside one of ours (a wait for a lock's
 * condition, a nap, the log's write, a read of /proc or /sys, reached from
 * malloc's slow paths and jemalloc's hooks) would unwind out of jemalloc or
 * the library with their locks held, and every later allocation would wait
 * for ever.  Each such call runs with cancellation disabled: a pending
 * cancellation acts at the thread's next cancellation point
 * (tests/preload/cancel.c).  The verbs calls (verbs.c), a fork (fork.c),
 * a trim and a heap's destruction (heap.c) run so throughout.
 */
#ifndef RDMALLOC_NOCANCEL_H
#define RDMALLOC_NOCANCEL_H

#include <pthread.h>

/* Disable cancellation: the state to give back to rdmalloc_cancel_on. */
static inline int rdmalloc_cancel_off(void)
{
	int old = PTHREAD_CANCEL_ENABLE;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	return old;
}

static inline void rdmalloc_cancel_on(int old)
{
	pthread_setcancelstate(old, NULL);
}

#endif
