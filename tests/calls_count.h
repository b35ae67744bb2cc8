/* SPDX-License-Identifier: MIT */
/* calls_count.h - calls_kept's counting malloc family (calls_count.c). */
#ifndef CALLS_COUNT_H
#define CALLS_COUNT_H

extern unsigned long calls_malloc, calls_calloc, calls_realloc, calls_free, calls_aligned_alloc;
extern unsigned long calls_new, calls_delete; /* calls_count_new.cc's operators */

void calls_count_reset(void);
/* delete new int(3) (calls_count_new.cc). */
void calls_unused_new(void);

#endif
