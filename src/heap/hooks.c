/* SPDX-License-Identifier: MIT */
/*
 * hooks.c - the jemalloc extent hooks of every heap.
 *
 * Contracts (jemalloc 5.3, see doc/design.md): a hook returns false for
 * success and true for failure or refusal.  Our hooks:
 *  - alloc: map a new chunk, register it with every attached PD and publish
 *    it before jemalloc carves a single object out of it.  It comes
 *    uncommitted: jemalloc commits each part before it uses it;
 *  - commit: count the part in use (a given-back chunk is registered again
 *    first: giveback.c);
 *  - decommit: accept, count the part idle, and give the chunk back once
 *    none of it is in use.  The pages of a chunk that stays registered stay
 *    as they are: the NIC has them pinned, and the CPU must keep seeing the
 *    same pages (a commit zeroes them, as jemalloc expects).  Pages nothing
 *    pins (ODP heaps, the drop-in's unregistered chunks) go back at once;
 *  - dalloc, purge_forced, purge_lazy: refuse.  Pages the NIC has
 *    pinned must never be unmapped or purged: the CPU would see
 *    a fresh zero page while the NIC keeps writing the old one;
 *  - destroy (only on rdma_heap_destroy): hand the range back to chunk.c;
 *  - split: allow (registration covers the whole chunk);
 *  - merge: allow only inside one chunk, so that no extent, hence no
 *    allocation, ever straddles two registrations.
 * ODP heaps have the same hooks: jemalloc decommits their free pages as
 * any heap's (purges refused), which tells the double-free check which
 * pages hold no block (giveback.c, idlemap.c); they keep their chunks.
 * Hooks never call mallctl (jemalloc may hold ctl_mtx around them) and never
 * allocate from jemalloc themselves.  What they call may (libibverbs, libc):
 * alloc and destroy mark the thread as inside a hook for their whole run
 * (RDMALLOC_TL_IN_HOOK), and the drop-in serves those allocations outside
 * jemalloc (preload/nest.c), whose arena 0 they would otherwise reach with
 * our arena's grow_mtx held: fork() takes arena 0's locks first, then
 * waits for that one (issue 10, item 1).
 */
#include "hooks.h"

#include <errno.h>

#include "addrmap.h"
#include "chunk.h"
#include "counters.h"
#include "heap.h"
#include "os.h"
#include "reserve.h"
#include "tls.h"

/* Everything a hook calls that may allocate (libibverbs, libc) runs
 * marked as inside a hook (see above), and leaves errno as it was: the
 * hook runs inside a malloc that may succeed (jemalloc sets ENOMEM itself
 * when it fails), and no caller learns anything from our errno. */
#define IN_HOOK(stmt)                                            \
	do {                                                     \
		int in_hook_errno_ = errno;                      \
		rdmalloc_tl_in_verbs += RDMALLOC_TL_IN_HOOK;     \
		stmt;                                            \
		rdmalloc_tl_in_verbs -= RDMALLOC_TL_IN_HOOK;     \
		errno = in_hook_errno_;                          \
	} while (0)

static void *hook_alloc(extent_hooks_t *self, void *new_addr, size_t size, size_t alignment,
			bool *zero, bool *commit, unsigned arena_ind)
{
	(void)arena_ind;
	if (new_addr) /* growing in place at a given address: not ours to give */
		return NULL;
	struct rdmalloc_heap *h = rdmalloc_heap_of_hooks(self);
	struct rdmalloc_chunk_spec *spec = rdmalloc_heap_spec(h);
	/* Uncommitted when jemalloc lets us, so that it commits and decommits
	 * the parts it uses and we learn when a chunk is idle (an ODP chunk
	 * is never given back whole: committed). */
	int committed = *commit || rdmalloc_spec_odp(spec);
	struct rdmalloc_chunk *c;
	IN_HOOK(c = rdmalloc_chunk_create(h, spec, size, alignment, committed));
	if (!c)
		return NULL;
	/* The reserve wants its thread, or the crew its workers, which are
	 * started outside every lock: a drop-in thread on its next
	 * allocation, rdma_* calls on return. */
	if (unlikely(rdmalloc_threads_wanted()) && rdmalloc_tl.bound == 1)
		rdmalloc_tl.bound = RDMALLOC_TL_ERRAND;
	*zero = true; /* fresh anonymous mapping (a reserve chunk too: nobody wrote it) */
	*commit = committed;
	return (void *)c->base;
}

static bool hook_refuse(void)
{
	STAT_INC(purges_refused);
	return true;
}

static bool hook_dalloc(extent_hooks_t *self, void *addr, size_t size, bool committed, unsigned arena_ind)
{
	(void)self, (void)addr, (void)size, (void)committed, (void)arena_ind;
	return hook_refuse();
}

static void hook_destroy(extent_hooks_t *self, void *addr, size_t size, bool committed, unsigned arena_ind)
{
	(void)self, (void)committed, (void)arena_ind;
	IN_HOOK(rdmalloc_chunk_destroyed(addr, size));
}

static bool hook_commit(extent_hooks_t *self, void *addr, size_t size, size_t offset, size_t length,
			unsigned arena_ind)
{
	(void)self, (void)size, (void)arena_ind;
	int err;
	IN_HOOK(err = rdmalloc_chunk_commit((char *)addr + offset, length));
	return err != 0;
}

static bool hook_decommit(extent_hooks_t *self, void *addr, size_t size, size_t offset, size_t length,
			  unsigned arena_ind)
{
	(void)self, (void)size, (void)arena_ind;
#ifdef RDMALLOC_MUTATION_PURGE /* test-only: the bug this file exists to prevent */
	if (rdmalloc_os_dontneed((char *)addr + offset, length))
		return true;
#endif
	IN_HOOK(rdmalloc_chunk_decommit((char *)addr + offset, length));
	return false;
}

static bool hook_purge(extent_hooks_t *self, void *addr, size_t size, size_t offset, size_t length,
		       unsigned arena_ind)
{
	(void)self, (void)addr, (void)size, (void)offset, (void)length, (void)arena_ind;
	return hook_refuse();
}

static bool hook_split(extent_hooks_t *self, void *addr, size_t size, size_t size_a, size_t size_b,
		       bool committed, unsigned arena_ind)
{
	(void)self, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
	return false;
}

static bool hook_merge(extent_hooks_t *self, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
		       bool committed, unsigned arena_ind)
{
	(void)self, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
	struct rdmalloc_chunk *a = rdmalloc_chunk_owning(addr_a);
	return a == NULL || a != rdmalloc_chunk_owning(addr_b);
}

const extent_hooks_t rdmalloc_extent_hooks = {
	.alloc = hook_alloc,
	.dalloc = hook_dalloc,
	.destroy = hook_destroy,
	.commit = hook_commit,
	.decommit = hook_decommit,
	.purge_lazy = hook_purge,
	.purge_forced = hook_purge,
	.split = hook_split,
	.merge = hook_merge,
};
