/* SPDX-License-Identifier: MIT */
/* hooks.h - the jemalloc extent hooks of every heap. */
#ifndef RDMALLOC_HOOKS_H
#define RDMALLOC_HOOKS_H

#include "je.h"

/* The hook table; each heap embeds a copy so a hook finds its heap. */
extern const extent_hooks_t rdmalloc_extent_hooks;

#endif
