/* SPDX-License-Identifier: MIT */
/* fake_dropin.h - what the fake drop-in (fake_dropin.c) tells a test
 * program about the calls elide.c handed on to "libibverbs".  The program
 * finds the functions with dlsym: they are the preloaded library's. */
#ifndef FAKE_DROPIN_H
#define FAKE_DROPIN_H

#include <stddef.h>

/* The handle a PD gets when the stand-in of ibv_dealloc_pd deallocated it. */
#define FAKE_DROPIN_PD_DEALLOCATED 0xdeadbeefu
/* A PD with this handle: the stand-ins refuse to register with it (EPERM). */
#define FAKE_DROPIN_PD_REFUSES 0xbadu
/* Keys of the stand-ins' own regions start here (the fake backend's are low). */
#define FAKE_DROPIN_KEY_BASE 0x70000000u

/* Regions the stand-ins registered and that are still alive. */
typedef size_t (*fake_dropin_passed_live_fn)(void);
/* PDs the stand-in of ibv_dealloc_pd deallocated. */
typedef unsigned long (*fake_dropin_deallocs_fn)(void);
/* Calls that reached the stand-in of ibv_dealloc_pd, busy or not. */
typedef unsigned long (*fake_dropin_dealloc_calls_fn)(void);

#endif
