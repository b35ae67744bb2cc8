/* SPDX-License-Identifier: MIT */
/* version.c - rdma_malloc_version(): the library's version at run time. */
#include "compiler.h"
#include "rdma_malloc.h"

/* From meson.build's project version (src/meson.build passes them). */
_Static_assert(RDMA_MALLOC_VERSION_MAJOR == RDMALLOC_BUILD_MAJOR &&
		       RDMA_MALLOC_VERSION_MINOR == RDMALLOC_BUILD_MINOR &&
		       RDMA_MALLOC_VERSION_PATCH == RDMALLOC_BUILD_PATCH,
	       "include/rdma_malloc.h's RDMA_MALLOC_VERSION_* differ from meson.build's project version");

RDMA_EXPORT const char *rdma_malloc_version(unsigned int *major, unsigned int *minor, unsigned int *patch)
{
	if (major)
		*major = RDMALLOC_BUILD_MAJOR;
	if (minor)
		*minor = RDMALLOC_BUILD_MINOR;
	if (patch)
		*patch = RDMALLOC_BUILD_PATCH;
	return RDMALLOC_BUILD_VERSION;
}
