/* SPDX-License-Identifier: MIT */
/* preload.h - shared by the LD_PRELOAD drop-in's files. */
#ifndef RDMALLOC_PRELOAD_H
#define RDMALLOC_PRELOAD_H

struct rdmalloc_heap;

/* The heap every plain malloc comes from, or NULL before it exists. */
struct rdmalloc_heap *rdmalloc_preload_heap(void);

#endif
