/* SPDX-License-Identifier: MIT */
/*
 * lock.h - every lock of rdmalloc and of its LD_PRELOAD drop-in, in one
 * table, in the one order in which they nest (doc/design.md, "Locks and
 * fork").
 *
 * A thread may take a lock only while it holds none that comes later in the
 * table.  Builds without NDEBUG check that at every acquisition and abort
 * with both names, so an inversion fails a test instead of hanging a user.
 * fork() takes them all, in this order, in groups around stdio's list lock
 * and jemalloc's own locks (fork.c): FIRST before the list lock (its holder
 * may open a FILE: libibverbs reads its configuration), OUTER after it and
 * before jemalloc's prefork (they are held across jemalloc and verbs calls,
 * and an allocation under a FILE's lock may wait for them), INNER ones
 * after (leaves: never held across an allocation, a verbs call or a wait
 * for another lock of the table).  No code of ours opens a FILE holding
 * an OUTER lock: the fork waits for it holding stdio's list lock (but
 * where libibverbs' registrations open FILEs: fork.c).
 * tests/check-locks.sh fails when a lock is declared anywhere else.
 */
#ifndef RDMALLOC_LOCK_H
#define RDMALLOC_LOCK_H

#include <stdint.h>

#include "compiler.h"

/* X(ID, group, what it guards) */
#define RDMALLOC_LOCKS(X)                                                                    \
	X(INIT, FIRST, "the lazy one-time initialisation")                                   \
	X(HEAP, OUTER, "the heap table, heap creation and destruction, purges under way")     \
	X(PD, OUTER, "attach, detach, access changes, heap destruction, windows, elision")   \
	X(TCACHE, OUTER, "thread-cache ownership")                                           \
	X(VERBS, INNER, "the count of our verbs calls under way, which fork() waits for")   \
	X(STARTS, INNER, "threads of ours created and not yet running, which fork() waits for") \
	X(CHUNK, INNER, "chunk list, address-map writers, descriptors, PD table, creators")  \
	X(BIG, INNER, "every heap's freed big blocks kept for reuse")                        \
	X(ODP, INNER, "the shared implicit ODP regions and their reference counts")          \
	X(LOOKUPS, INNER, "the per-thread lookup counters' slots")                            \
	X(ELIDED, INNER, "the drop-in's elided-region records and its PD entries")           \
	X(NEST, INNER, "the drop-in's allocator for code running inside an extent hook")     \
	X(CREW, INNER, "the registration crew's queue of jobs and its parts under way")     \
	X(MAPS, INNER, "test builds: the library's own mappings (maptrack.h)")

enum rdmalloc_lock_id {
#define RDMALLOC_LOCK_ID_(id, group, what) RDMALLOC_LOCK_##id,
	RDMALLOC_LOCKS(RDMALLOC_LOCK_ID_)
#undef RDMALLOC_LOCK_ID_
	RDMALLOC_LOCK_COUNT
};

enum rdmalloc_lock_group { RDMALLOC_LOCKS_FIRST, RDMALLOC_LOCKS_OUTER, RDMALLOC_LOCKS_INNER };

/* Take / release lock @id (aborts on an order violation, see above). */
RDMALLOC_TESTABLE void rdmalloc_lock(enum rdmalloc_lock_id id);
RDMALLOC_TESTABLE void rdmalloc_unlock(enum rdmalloc_lock_id id);
/* Take lock @id if it is free: 1, else 0 at once (never waits, so no
 * order to keep). */
RDMALLOC_TESTABLE int rdmalloc_lock_try(enum rdmalloc_lock_id id);
/* Wait on @id's condition variable (@id held); wake every waiter. */
void rdmalloc_lock_wait(enum rdmalloc_lock_id id);
/* The same, returning at @deadline_ns (rdmalloc_now_ns()'s clock) at the
 * latest. */
void rdmalloc_lock_wait_until(enum rdmalloc_lock_id id, uint64_t deadline_ns);
void rdmalloc_lock_broadcast(enum rdmalloc_lock_id id);

/* fork(): take every lock of @group in order; release them (parent);
 * release them and reset their condition variables (child). */
void rdmalloc_locks_prepare(enum rdmalloc_lock_group group);
void rdmalloc_locks_parent(enum rdmalloc_lock_group group);
void rdmalloc_locks_child(enum rdmalloc_lock_group group);

/* For the tests: the name of lock @id, and whether the order check is in. */
RDMALLOC_TESTABLE const char *rdmalloc_lock_name(enum rdmalloc_lock_id id);
RDMALLOC_TESTABLE int rdmalloc_lock_checked(void);

#endif
