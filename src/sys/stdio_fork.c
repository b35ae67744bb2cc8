/* SPDX-License-Identifier: MIT */
/* stdio_fork.c - stdio's list lock across fork() (stdio_fork.h). */
#include "stdio_fork.h"

#include <sys/single_threaded.h>

#include "compiler.h"

/* glibc's, GLIBC_2.2.5, declared in no installed header. */
extern void _IO_list_lock(void);
extern void _IO_list_unlock(void);
extern void _IO_list_resetlock(void);

/* This thread's fork took it (the process had threads). */
static RDMALLOC_TLS int taken;

void rdmalloc_stdio_fork_prepare(void)
{
	taken = !__libc_single_threaded;
	if (taken)
		_IO_list_lock();
}

void rdmalloc_stdio_fork_parent(void)
{
	if (taken)
		_IO_list_unlock();
	taken = 0;
}

void rdmalloc_stdio_fork_child(void)
{
	if (taken) /* glibc has reset it already, as it does with threads */
		_IO_list_resetlock();
	taken = 0;
}
