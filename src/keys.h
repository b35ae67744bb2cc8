/* SPDX-License-Identifier: MIT */
/* keys.h - the library's own lookup: pointer to chunk and registration. */
#ifndef RDMALLOC_KEYS_H
#define RDMALLOC_KEYS_H

#include <stddef.h>

#include "chunk.h"

/*
 * The chunk holding [@ptr, @ptr+@len) (@len 0 is 1) and its registration
 * with @pd (NULL: the default PD): 0, or ENOENT (not rdmalloc memory),
 * ERANGE (past the chunk), ENODEV (@pd not attached).  Lock-free; counts
 * nothing (the public calls count).  *@r's struct ibv_mr may be used only
 * under the PD lock (chunk.h).
 */
int rdmalloc_lookup(const void *ptr, size_t len, struct ibv_pd *pd, struct rdmalloc_chunk **c,
		    struct rdmalloc_reg **r);

#endif
