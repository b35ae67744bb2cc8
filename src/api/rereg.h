/* SPDX-License-Identifier: MIT */
/* rereg.h - rdma_heap_set_access(): changing a whole heap's access flags. */
#ifndef RDMALLOC_REREG_H
#define RDMALLOC_REREG_H

#include <stddef.h>

#include "compiler.h"

/* The most key changes one call records for its callback (SIZE_MAX: as
 * many as memory allows); tests lower it to run out. */
extern RDMALLOC_TESTABLE size_t rdmalloc_rereg_records_max;

#endif
