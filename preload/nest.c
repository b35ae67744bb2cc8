/* SPDX-License-Identifier: MIT */
/*
 * nest.c - the drop-in's allocator for code running inside one of
 * rdmalloc's verbs calls, extent hooks included.
 *
 * Our alloc hook registers the chunk it maps, and libibverbs allocates
 * inside ibv_reg_mr.  jemalloc calls the hook with the arena's grow_mtx
 * held, and serves every allocation made meanwhile from arena 0 whatever
 * its flags ask (its reentrancy rule).  fork() takes arena 0's grow_mtx
 * before the hooked arena's: it would wait for the hook, and the hook for
 * it.  And a verbs call outside a hook (a PD attach) may hold a lock of
 * libibverbs or its provider while it allocates (fork protection's range
 * tree does): if that allocation waited for an arena's growth, it would
 * wait for a hook that waits for the same lock.  So nothing allocated
 * inside a verbs call of ours reaches jemalloc: it comes from here, ranges
 * of address space carved into power-of-two blocks with one free list per
 * size, under the NEST lock, a leaf that fork() takes
 * only after jemalloc's.  free(), realloc() and malloc_usable_size() tell
 * its blocks by address, wherever they run.
 *
 * Every block's header says whether it is live: free() and realloc() of a
 * block freed already, or of an address in the ranges that is no block's,
 * abort with a message, whatever RDMALLOC_CHECK_FREE says (a free list
 * walked through a block freed twice would hand it out twice).
 *
 * What comes here is small and rare (a region's descriptor per chunk
 * registration, the allocations a process makes before the drop-in is
 * ready), so simplicity beats speed: blocks are never given back to the
 * kernel, only reused.  The ranges are reserved as they are needed, 1 MiB
 * first and each twice the one before, so that the address space follows
 * use (a program under `ulimit -v` pays for what it uses; one 16 GiB range
 * did not).  A range that cannot be reserved is ENOMEM, logged once and
 * counted as a fallback.
 */
#include "nest.h"

#include <errno.h>
#include <string.h>

#include "lock.h"
#include "log.h"
#include "os.h"
#include "counters.h"

#define FIRST ((uintptr_t)1 << 20) /* the first range; pages are touched as used */
#define HDR 16                      /* before each block's user pointer: struct hdr */
#define MIN_CLASS 5                 /* 32-byte blocks */
#define CLASSES 35                  /* up to 16 GiB */

uintptr_t rdmalloc_nest_lo[RDMALLOC_NEST_RANGES], rdmalloc_nest_len[RDMALLOC_NEST_RANGES];
unsigned rdmalloc_nest_ranges;
static uintptr_t top, end;        /* bump pointer in the newest range, its end (lock) */
static void *free_list[CLASSES];  /* (lock) */

struct hdr {
	uint64_t cls;    /* block of 1 << cls bytes */
	uint32_t offset; /* user pointer - block: HDR up to 2 GiB (larger alignments are refused) */
	uint32_t state;  /* LIVE, FREED; last, so that a free block's link (at its start) spares it */
};
#define LIVE 0x6e657374u  /* "nest" */
#define FREED 0x66726565u /* "free" */
_Static_assert(sizeof(struct hdr) == HDR, "the header fills HDR");

/* A new range with room for a block of @size bytes (lock held); what was
 * left of the one before stays unused address space. */
static int grow(size_t size)
{
	unsigned n = rdmalloc_nest_ranges;
	if (n == RDMALLOC_NEST_RANGES)
		return -1;
	uintptr_t len = n ? rdmalloc_nest_len[n - 1] * 2 : FIRST;
	while (len < size)
		len *= 2;
	void *m = rdmalloc_os_reserve(len);
	if (!m)
		return -1;
	rdmalloc_nest_lo[n] = (uintptr_t)m;
	rdmalloc_nest_len[n] = len;
	__atomic_store_n(&rdmalloc_nest_ranges, n + 1, __ATOMIC_RELEASE);
	top = (uintptr_t)m;
	end = top + len;
	return 0;
}

static void *block_get(unsigned cls)
{
	void *b = NULL;
	rdmalloc_lock(RDMALLOC_LOCK_NEST);
	if (free_list[cls]) {
		b = free_list[cls];
		memcpy(&free_list[cls], b, sizeof(void *));
	} else {
		/* Blocks of a page or more start on a page: fewer pages touched. */
		size_t size = (size_t)1 << cls, a = size < 4096 ? size : 4096;
		uintptr_t at = (top + a - 1) & ~(uintptr_t)(a - 1);
		int room = end && at + size <= end;
		if (!room && grow(size) == 0) {
			at = top; /* a new range: page-aligned, at least @size long */
			room = 1;
		}
		if (room) {
			b = (void *)at;
			top = at + size;
		}
	}
	rdmalloc_unlock(RDMALLOC_LOCK_NEST);
	return b;
}

static void *nest_full(size_t size)
{
	STAT_INC(fallbacks);
	rdmalloc_log_once(RDMALLOC_LOG_ERROR, "the allocator for code inside extent hooks is out "
			  "of space: an allocation of %zu bytes there fails with ENOMEM", size);
	errno = ENOMEM;
	return NULL;
}

void *rdmalloc_nest_alloc(size_t size, size_t align, int zero)
{
	if (align < HDR)
		align = HDR;
	if (size >= ((size_t)1 << (CLASSES - 1)) || align > ((size_t)1 << 31)) { /* no overflow below */
		errno = ENOMEM; /* no block holds it: the answer, not a fallback */
		return NULL;
	}
	unsigned cls = MIN_CLASS;
	/* Room for the header and the alignment: the user pointer is the
	 * first multiple of @align at least HDR bytes into the block. */
	while (cls < CLASSES && ((size_t)1 << cls) < size + align + HDR)
		cls++;
	if (cls == CLASSES) { /* over the largest block, 16 GiB */
		errno = ENOMEM;
		return NULL;
	}
	char *b = block_get(cls);
	if (!b)
		return nest_full(size);
	uintptr_t user = ((uintptr_t)b + HDR + align - 1) & ~(uintptr_t)(align - 1);
	struct hdr h = { cls, (uint32_t)(user - (uintptr_t)b), LIVE };
	memcpy((void *)(user - HDR), &h, sizeof(h));
	if (zero)
		memset((void *)user, 0, size); /* a reused block holds old bytes */
	return (void *)user;
}

static _Noreturn void bad_block(const void *p, uint32_t state, const char *who)
{
	if (state == FREED)
		rdmalloc_fatal("%s(%p): the block is free already (a double free)", who, p);
	rdmalloc_fatal("%s(%p): not memory from this allocator", who, p);
}

/* @p's header, which must be a live block's: @p a user pointer whose header
 * says LIVE, of a block where block_get carves one of its class, inside
 * @p's range.  (An address inside a block whose bytes before it happen to
 * read as such a header is taken for one: a program's bug we cannot tell.)
 * Never under the NEST lock: a fatal message may allocate. */
static struct hdr live_hdr(const void *p, const char *who)
{
	uintptr_t u = (uintptr_t)p, lo = 0, len = 0;
	unsigned n = __atomic_load_n(&rdmalloc_nest_ranges, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < n && !len; i++)
		if (u - rdmalloc_nest_lo[i] < rdmalloc_nest_len[i])
			lo = rdmalloc_nest_lo[i], len = rdmalloc_nest_len[i];
	if (!len || u % HDR || u - lo < HDR)
		bad_block(p, LIVE, who);
	struct hdr h;
	memcpy(&h, (const char *)p - HDR, sizeof(h));
	if (h.state != LIVE || h.cls < MIN_CLASS || h.cls >= CLASSES || h.offset < HDR ||
	    h.offset >= ((uint64_t)1 << h.cls))
		bad_block(p, h.state, who);
	uintptr_t b = u - h.offset, size = (uintptr_t)1 << h.cls;
	if (b < lo || size > len || b - lo > len - size || b % (size < 4096 ? size : 4096))
		bad_block(p, LIVE, who);
	return h;
}

void rdmalloc_nest_free(void *p, const char *who)
{
	struct hdr h = live_hdr(p, who);
	uint32_t state, freed = FREED;
	rdmalloc_lock(RDMALLOC_LOCK_NEST);
	/* Again under the lock: two threads freeing it at once.  (Its
	 * message from the state read here: a third thread may have the
	 * block again by now.) */
	memcpy(&state, (char *)p - sizeof(state), sizeof(state));
	if (state != LIVE) {
		rdmalloc_unlock(RDMALLOC_LOCK_NEST);
		bad_block(p, state, who);
	}
	memcpy((char *)p - sizeof(freed), &freed, sizeof(freed));
	void *b = (char *)p - h.offset;
	memcpy(b, &free_list[h.cls], sizeof(void *));
	free_list[h.cls] = b;
	rdmalloc_unlock(RDMALLOC_LOCK_NEST);
}

size_t rdmalloc_nest_usable(const void *p, const char *who)
{
	struct hdr h = live_hdr(p, who);
	return ((size_t)1 << h.cls) - h.offset;
}
