/* SPDX-License-Identifier: MIT */
/*
 * je.h - the private jemalloc, by its je_* names.
 *
 * The build links a copy of Debian's libjemalloc_pic.a whose public symbols
 * were renamed rdmalloc_je_* (jemalloc.syms), so the plain malloc/free names
 * stay free for the program's allocator (or for our LD_PRELOAD drop-in).
 * Include this, never <jemalloc/jemalloc.h> directly.
 */
#ifndef RDMALLOC_JE_H
#define RDMALLOC_JE_H

#define JEMALLOC_NO_RENAME
#define JEMALLOC_NO_DEMANGLE
#define je_aligned_alloc rdmalloc_je_aligned_alloc
#define je_calloc rdmalloc_je_calloc
#define je_dallocx rdmalloc_je_dallocx
#define je_free rdmalloc_je_free
#define je_mallctl rdmalloc_je_mallctl
#define je_mallctlbymib rdmalloc_je_mallctlbymib
#define je_mallctlnametomib rdmalloc_je_mallctlnametomib
#define je_malloc rdmalloc_je_malloc
#define je_malloc_conf rdmalloc_je_malloc_conf
#define je_malloc_conf_2_conf_harder rdmalloc_je_malloc_conf_2_conf_harder
#define je_malloc_message rdmalloc_je_malloc_message
#define je_malloc_stats_print rdmalloc_je_malloc_stats_print
#define je_malloc_usable_size rdmalloc_je_malloc_usable_size
#define je_mallocx rdmalloc_je_mallocx
#define je_smallocx_54eaed1d8b56b1aa528be3bdd1877e59c56fa90c rdmalloc_je_smallocx_54eaed1d8b56b1aa528be3bdd1877e59c56fa90c
#define je_nallocx rdmalloc_je_nallocx
#define je_posix_memalign rdmalloc_je_posix_memalign
#define je_rallocx rdmalloc_je_rallocx
#define je_realloc rdmalloc_je_realloc
#define je_sallocx rdmalloc_je_sallocx
#define je_sdallocx rdmalloc_je_sdallocx
#define je_xallocx rdmalloc_je_xallocx
#define je_memalign rdmalloc_je_memalign
#define je_valloc rdmalloc_je_valloc
#include <jemalloc/jemalloc.h>

#endif
