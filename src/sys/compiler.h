/* SPDX-License-Identifier: MIT */
/* compiler.h - attributes and small helpers shared by every source file. */
#ifndef RDMALLOC_COMPILER_H
#define RDMALLOC_COMPILER_H

#include <stddef.h>
#include <stdint.h>

/* Public API symbols; the version script decides what is really exported. */
#define RDMA_EXPORT __attribute__((visibility("default")))
/* Internal entry points the unit tests drive.  Exported only from the
 * test-only build (librdmalloc-test.map); local in librdmalloc.so. */
#define RDMALLOC_TESTABLE __attribute__((visibility("default")))

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* Initial-exec TLS: no __tls_get_addr on the hot path.  The library already
 * needs static TLS because of jemalloc (see doc/design.md). */
#define RDMALLOC_TLS _Thread_local __attribute__((tls_model("initial-exec")))

/* Another name for function @f, with @f's attributes (gcc's copy, without
 * which gcc warns that malloc's are missing; clang has none to copy). */
#ifdef __clang__
#define RDMALLOC_ALIAS(f) __attribute__((alias(#f)))
#else
#define RDMALLOC_ALIAS(f) __attribute__((alias(#f), copy(f)))
#endif

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline int is_pow2(size_t x)
{
	return x != 0 && (x & (x - 1)) == 0;
}

static inline uintptr_t align_up(uintptr_t x, size_t a)
{
	return (x + a - 1) & ~(uintptr_t)(a - 1);
}

#endif
