/* SPDX-License-Identifier: MIT */
/* log.h - messages to stderr, filtered by RDMALLOC_LOG_LEVEL. */
#ifndef RDMALLOC_LOG_H
#define RDMALLOC_LOG_H

#include <stdatomic.h>

#include "compiler.h"

enum rdmalloc_log_level {
	RDMALLOC_LOG_NONE = 0,
	RDMALLOC_LOG_ERROR,
	RDMALLOC_LOG_WARN,
	RDMALLOC_LOG_INFO,
	RDMALLOC_LOG_DEBUG,
};

/* Set once from the options; messages above it are dropped. */
void rdmalloc_log_set_level(int level);
int rdmalloc_log_level(void);

/* Writes "rdmalloc: <level>: <message>\n" with one write(2); never allocates
 * from rdmalloc, so it is safe inside extent hooks.  Keeps errno, and never
 * raises SIGPIPE at the program (sigpipe.h). */
RDMALLOC_TESTABLE void rdmalloc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A decision worth knowing (chunk made or given back, reserve hit or miss,
 * an ibv_reg_mr elided or passed on, and why), at RDMALLOC_LOG_LEVEL=debug;
 * the arguments are not evaluated below it. */
#define rdmalloc_debug(...)                                              \
	do {                                                             \
		if (__builtin_expect(rdmalloc_log_level() >= RDMALLOC_LOG_DEBUG, 0)) \
			rdmalloc_log(RDMALLOC_LOG_DEBUG, __VA_ARGS__);   \
	} while (0)

/* errno @err as text for a message: glibc's English description, from a
 * table, or "unknown error N".  Never strerror() in this library: it takes
 * the message catalogue's lock, and a program may call malloc holding that
 * lock for writing (bindtextdomain, textdomain).  There glibc answers the
 * writer's read lock with EDEADLK, the catalogue ignores that and unlocks,
 * and the lock is corrupt: the program's next strerror() or gettext() may
 * hang for ever (tests/preload/libc_locks.c).  No lock, no allocation.
 * An unknown code's text is in a buffer of the thread's, which its next
 * call overwrites: one call per message. */
const char *rdmalloc_strerror(int err);

/* Logs and aborts: for broken invariants and invalid frees. */
_Noreturn void rdmalloc_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Once per call site for the life of the process (fallbacks, repeated
 * failures): the counter in the stats says how often it happened since. */
#define rdmalloc_log_once(level, ...)                                   \
	do {                                                            \
		static atomic_flag once_ = ATOMIC_FLAG_INIT;            \
		if (!atomic_flag_test_and_set_explicit(&once_, memory_order_relaxed)) \
			rdmalloc_log(level, __VA_ARGS__);               \
	} while (0)

#endif
