/* SPDX-License-Identifier: MIT */
/* jemalloc_conf.c - compiled-in options of the drop-in's private jemalloc
 * (src/heap/jemalloc_conf.c says why the API library's differ). */
#include "je.h"
#include "jemalloc.h"

const char *je_malloc_conf = RDMALLOC_JE_CONF;
