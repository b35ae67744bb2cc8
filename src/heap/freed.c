/* SPDX-License-Identifier: MIT */
/* freed.c - the key of freed blocks (freed.h). */
#include "freed.h"

#include <string.h>

#include "calls.h"
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

/* jemalloc 5.3's largest small size class with 4 KiB pages
 * (SC_SMALL_MAXCLASS): a block up to it never changes size in place. */
#define SMALL_MAX ((size_t)14 << 10)

void *rdmalloc_freed_realloc(void *p, size_t size, int flags, int free_flags, const char *who)
{
	size_t old = rdmalloc_sallocx(p), want = rdmalloc_nallocx(size, flags);
	if (want == old) /* its size class already: as rallocx, in place */
		return p;
	if (want && (old > SMALL_MAX || want > SMALL_MAX) && rdmalloc_xallocx(p, size, flags) == want)
		return p;
	void *q = rdmalloc_freed_clear(rdmalloc_mallocx(size, flags));
	if (!q)
		return NULL;
	memcpy(q, p, old < size ? old : size);
	rdmalloc_freed_mark(p, who);
	rdmalloc_dallocx(p, free_flags);
	return q;
}
