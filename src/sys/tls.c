/* SPDX-License-Identifier: MIT */
/* tls.c - the thread-local word (tls.h). */
#include "tls.h"

_Alignas(8) RDMALLOC_TLS struct rdmalloc_tl_state rdmalloc_tl;
RDMALLOC_TLS int rdmalloc_tl_pressure;
RDMALLOC_TLS int rdmalloc_tl_watch;
