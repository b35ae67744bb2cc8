/* SPDX-License-Identifier: MIT */
/* preload.h - shared by the LD_PRELOAD drop-in's files. */
#ifndef RDMALLOC_PRELOAD_H
#define RDMALLOC_PRELOAD_H

/* The drop-in is built with -fvisibility=hidden: what it interposes (the
 * allocation ABI of glibc and C++, and libibverbs' registration calls) is
 * marked with this, and listed in librdmalloc-preload.map. */
#define PRELOAD_API __attribute__((visibility("default")))

#ifdef __cplusplus /* new.cc */
extern "C" {
#endif

struct rdmalloc_heap;

/* The heap every plain malloc comes from, or NULL before it exists. */
struct rdmalloc_heap *rdmalloc_preload_heap(void);

#ifdef __cplusplus
}
#endif

#endif
