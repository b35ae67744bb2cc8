/* SPDX-License-Identifier: MIT */
/* freed.c - the key of freed blocks (freed.h). */
#include "freed.h"

#include "log.h"
#include "os.h"

/* A key of its own until rdmalloc_freed_init: nothing is freed into a heap
 * before it, but a zero key would make every zeroed block look free. */
uint64_t rdmalloc_freed_key = 0x9e3779b97f4a7c15ull;

void rdmalloc_freed_init(void)
{
	rdmalloc_freed_key = rdmalloc_os_random64() | 1; /* never 0 */
}

_Noreturn void rdmalloc_freed_abort(const char *who, const void *p)
{
	rdmalloc_fatal("%s(%p): the block is free already (a double free)", who, p);
}
