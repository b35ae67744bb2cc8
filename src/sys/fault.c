/* SPDX-License-Identifier: MIT */
/*
 * fault.c - test-only fault injection (see fault.h).  Compiled to nothing
 * unless the build has -Dfault_injection=true, which meson refuses for a
 * release build.
 */
#include "fault.h"

#ifdef RDMALLOC_FAULT_INJECTION

#include <errno.h>
#include <stdatomic.h>

enum { MODE_OFF = 0, MODE_NTH, MODE_RANDOM };

struct site {
	_Atomic int mode;
	_Atomic int err;
	_Atomic unsigned long first, count; /* MODE_NTH */
	_Atomic unsigned one_in;            /* MODE_RANDOM */
	_Atomic uint64_t seed;
	_Atomic unsigned long calls, injected, total;
	_Atomic unsigned long nrec;
	struct {
		_Atomic uintptr_t addr;
		_Atomic size_t len;
		_Atomic unsigned long call;
	} rec[RDMALLOC_FAULT_RECORDS];
};

static struct site sites[RDMALLOC_FAULT_SITES];

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

int rdmalloc_fault_hit(enum rdmalloc_fault_site site, const void *addr, size_t len)
{
	if ((unsigned)site >= RDMALLOC_FAULT_SITES)
		return 0;
	struct site *s = &sites[site];
	unsigned long n = atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed) + 1;
	int mode = atomic_load_explicit(&s->mode, memory_order_acquire);
	int fail = 0;
	if (mode == MODE_NTH) {
		unsigned long first = atomic_load_explicit(&s->first, memory_order_relaxed);
		unsigned long count = atomic_load_explicit(&s->count, memory_order_relaxed);
		fail = n >= first && (count == 0 || n - first < count);
	} else if (mode == MODE_RANDOM) {
		unsigned one_in = atomic_load_explicit(&s->one_in, memory_order_relaxed);
		uint64_t seed = atomic_load_explicit(&s->seed, memory_order_relaxed);
		fail = one_in && mix(seed ^ mix(n)) % one_in == 0;
	}
	if (!fail)
		return 0;
	atomic_fetch_add_explicit(&s->injected, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->total, 1, memory_order_relaxed);
	unsigned long r = atomic_fetch_add_explicit(&s->nrec, 1, memory_order_relaxed) % RDMALLOC_FAULT_RECORDS;
	atomic_store_explicit(&s->rec[r].addr, (uintptr_t)addr, memory_order_relaxed);
	atomic_store_explicit(&s->rec[r].len, len, memory_order_relaxed);
	atomic_store_explicit(&s->rec[r].call, n, memory_order_relaxed);
	return atomic_load_explicit(&s->err, memory_order_relaxed);
}

static int default_err(enum rdmalloc_fault_site site)
{
	return site == RDMALLOC_FAULT_DEREG ? EIO : ENOMEM;
}

static void reset(struct site *s)
{
	atomic_store_explicit(&s->mode, MODE_OFF, memory_order_release);
	atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
	atomic_store_explicit(&s->injected, 0, memory_order_relaxed);
	atomic_store_explicit(&s->nrec, 0, memory_order_relaxed);
}

void rdmalloc_fault_arm(enum rdmalloc_fault_site site, unsigned long first, unsigned long count, int err)
{
	if ((unsigned)site >= RDMALLOC_FAULT_SITES)
		return;
	struct site *s = &sites[site];
	reset(s);
	if (!first)
		return;
	atomic_store_explicit(&s->err, err ? err : default_err(site), memory_order_relaxed);
	atomic_store_explicit(&s->first, first, memory_order_relaxed);
	atomic_store_explicit(&s->count, count, memory_order_relaxed);
	atomic_store_explicit(&s->mode, MODE_NTH, memory_order_release);
}

void rdmalloc_fault_arm_random(enum rdmalloc_fault_site site, unsigned one_in, uint64_t seed, int err)
{
	if ((unsigned)site >= RDMALLOC_FAULT_SITES)
		return;
	struct site *s = &sites[site];
	reset(s);
	if (!one_in)
		return;
	atomic_store_explicit(&s->err, err ? err : default_err(site), memory_order_relaxed);
	atomic_store_explicit(&s->one_in, one_in, memory_order_relaxed);
	atomic_store_explicit(&s->seed, seed, memory_order_relaxed);
	atomic_store_explicit(&s->mode, MODE_RANDOM, memory_order_release);
}

void rdmalloc_fault_disarm_all(void)
{
	for (unsigned i = 0; i < RDMALLOC_FAULT_SITES; i++)
		atomic_store_explicit(&sites[i].mode, MODE_OFF, memory_order_release);
}

unsigned long rdmalloc_fault_calls(enum rdmalloc_fault_site site)
{
	return (unsigned)site < RDMALLOC_FAULT_SITES
		       ? atomic_load_explicit(&sites[site].calls, memory_order_relaxed) : 0;
}

unsigned long rdmalloc_fault_injected(enum rdmalloc_fault_site site)
{
	return (unsigned)site < RDMALLOC_FAULT_SITES
		       ? atomic_load_explicit(&sites[site].injected, memory_order_relaxed) : 0;
}

unsigned long rdmalloc_fault_injected_total(enum rdmalloc_fault_site site)
{
	return (unsigned)site < RDMALLOC_FAULT_SITES
		       ? atomic_load_explicit(&sites[site].total, memory_order_relaxed) : 0;
}

size_t rdmalloc_fault_records(enum rdmalloc_fault_site site, struct rdmalloc_fault_rec *out, size_t max)
{
	if ((unsigned)site >= RDMALLOC_FAULT_SITES)
		return 0;
	struct site *s = &sites[site];
	unsigned long n = atomic_load_explicit(&s->nrec, memory_order_relaxed);
	unsigned long from = n > RDMALLOC_FAULT_RECORDS ? n - RDMALLOC_FAULT_RECORDS : 0;
	size_t k = 0;
	for (unsigned long i = from; i < n && k < max; i++, k++) {
		unsigned long r = i % RDMALLOC_FAULT_RECORDS;
		out[k].addr = atomic_load_explicit(&s->rec[r].addr, memory_order_relaxed);
		out[k].len = atomic_load_explicit(&s->rec[r].len, memory_order_relaxed);
		out[k].call = atomic_load_explicit(&s->rec[r].call, memory_order_relaxed);
	}
	return k;
}

int rdmalloc_fault_enabled(void)
{
	return 1;
}

static void (*_Atomic pauses[RDMALLOC_PAUSE_POINTS])(void);

void rdmalloc_fault_pause(enum rdmalloc_pause_point at)
{
	void (*fn)(void) = atomic_load_explicit(&pauses[at], memory_order_acquire);
	if (fn)
		fn();
}

void rdmalloc_fault_set_pause(enum rdmalloc_pause_point at, void (*fn)(void))
{
	if ((unsigned)at < RDMALLOC_PAUSE_POINTS)
		atomic_store_explicit(&pauses[at], fn, memory_order_release);
}

#else

/* ISO C wants a translation unit to declare something. */
typedef int rdmalloc_fault_disabled;

#endif
