/* SPDX-License-Identifier: MIT */
/* mw.h - the memory windows rdmalloc granted, and the regions they hold. */
#ifndef RDMALLOC_MW_H
#define RDMALLOC_MW_H

/* In a fork child: the windows are the parent's; forget them. */
void rdmalloc_mw_forget(void);

#endif
