/* SPDX-License-Identifier: MIT */
/*
 * own_stack.h - run a thread on a stack the test maps, and unmap it after
 * the join: glibc keeps a thread's static TLS on a stack its creator gave,
 * so anything of the library's that still points into the thread's TLS
 * once it has ended faults when it is read (the last round of key
 * destructors, test_giveback.c and test_options.c).
 */
#ifndef RDMALLOC_TEST_OWN_STACK_H
#define RDMALLOC_TEST_OWN_STACK_H

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>

/* @fn(@arg) on a thread of its own, on a 1 MiB stack unmapped after the
 * join: 0, or an errno. */
static inline int run_on_own_stack(void *(*fn)(void *), void *arg)
{
	enum { STACK = 1 << 20 };
	void *stack = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (stack == MAP_FAILED)
		return errno;
	pthread_attr_t a;
	pthread_t t;
	int e = pthread_attr_init(&a);
	if (!e)
		e = pthread_attr_setstack(&a, stack, STACK);
	if (!e)
		e = pthread_create(&t, &a, fn, arg);
	if (!e)
		e = pthread_join(t, NULL);
	pthread_attr_destroy(&a);
	if (munmap(stack, STACK) && !e)
		e = errno;
	return e;
}

#endif
