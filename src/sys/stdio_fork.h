/* SPDX-License-Identifier: MIT */
/*
 * stdio_fork.h - stdio's list lock across fork().
 *
 * glibc's fork takes stdio's list lock (fflush(NULL), fopen, fclose and
 * exit take it) after the fork handlers and before its own malloc's
 * locks: a FILE's holder may call malloc while fflush(NULL) holds the
 * list lock and waits for that FILE.  jemalloc's prepare is a fork handler
 * and took every arena lock before it: a malloc that missed its thread
 * cache under a FILE's lock, an fflush(NULL) waiting for that FILE, and
 * the fork waiting for the list lock hung for good (as under plain
 * jemalloc: tests/preload/libc_locks.c, "fork").  So our fork takes it
 * before anything an allocation may wait for: right after INIT (the lock
 * group FIRST: the lazy initialisation opens the device there, and
 * libibverbs reads files with fopen), before the other locks, the stop of
 * the purges, the marks a section or a start waits on, and jemalloc's
 * locks (fork.c).  What it then waits for opens no FILE, but where our
 * registrations do (rdmalloc_verbs_open_files): there it takes it last.
 * glibc's own take nests (the lock is recursive); the child's is reset,
 * as glibc resets it.  Only when the process has threads, as glibc: one
 * without may fork in a signal handler that interrupted its own stdio,
 * and has nobody to wait for.
 * The only code of ours that takes the list lock (tests/check-imports.sh).
 */
#ifndef RDMALLOC_STDIO_FORK_H
#define RDMALLOC_STDIO_FORK_H

void rdmalloc_stdio_fork_prepare(void);
void rdmalloc_stdio_fork_parent(void);
void rdmalloc_stdio_fork_child(void);

#endif
