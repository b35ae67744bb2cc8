/* SPDX-License-Identifier: MIT */
/*
 * stdio_fork.h - stdio's list lock across fork().
 *
 * glibc's fork takes stdio's list lock (fflush(NULL), fopen, fclose and
 * exit take it) after the fork handlers and before its own malloc's
 * locks: a FILE's holder may call malloc while fflush(NULL) holds the
 * list lock and waits for that FILE.  jemalloc's prepare, a fork handler,
 * took every arena lock before it: a malloc that missed its thread cache
 * under a FILE's lock, an fflush(NULL) waiting for that FILE, and the fork
 * waiting for the list lock hung for good (as under plain jemalloc:
 * tests/preload/libc_locks.c, "fork").  So the fork takes it first, at the
 * end of its outer prepare: after our outer locks, since our lazy
 * initialisation opens the device under INIT and libibverbs reads files
 * there with fopen; before jemalloc's.  glibc's own take nests (the lock
 * is recursive); the child's is reset, as glibc resets it.  Only when the
 * process has threads, as glibc: one without may fork in a signal handler
 * that interrupted its own stdio, and has nobody to wait for.
 * The only code of ours that takes the list lock (tests/check-imports.sh).
 * Our own waits under an allocation are bounded there (a relief only
 * tries HEAP, which the fork holds: heap.c), but one: a big block's chunk
 * made or released under a FILE's lock (its section waits while a fork
 * is coming) still closes the circle, as before.
 */
#ifndef RDMALLOC_STDIO_FORK_H
#define RDMALLOC_STDIO_FORK_H

void rdmalloc_stdio_fork_prepare(void);
void rdmalloc_stdio_fork_parent(void);
void rdmalloc_stdio_fork_child(void);

#endif
