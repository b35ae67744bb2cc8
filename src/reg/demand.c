/* SPDX-License-Identifier: MIT */
/*
 * demand.c - registration on first use: a chunk of an on-demand heap
 * (chunk.h, RDMALLOC_REG_FIRST_USE and EAGER_PLAIN) is registered with a
 * PD when RDMA first needs it there, by a key lookup or by the drop-in's
 * elision of the program's ibv_reg_mr (doc/design.md, "When memory is
 * registered").
 *
 * The caller holds the PD lock, as every attach, detach and access change
 * does: the PD table and the heap's access stay as they are while the
 * chunk registers, and fork() waits for it (no lock of libibverbs is
 * inherited half taken).  Against the rest, under the chunk lock:
 *  - give-back: the chunk is busy meanwhile, so it is not given back under
 *    the registration;
 *  - the decommit hook, which discards the pages of a plain chunk: the
 *    registration waits for discards under way, and none starts once the
 *    chunk is held, as it is from before its registration starts, since
 *    the NIC would pin pages the CPU is about to lose.
 */
#include "chunkset.h"

#include <errno.h>

#include "addrmap.h"
#include "counters.h"
#include "crew.h"
#include "lock.h"
#include "log.h"
#include "region.h"
#include "reserve.h"

/* The index of attached @pd, or -1.  Chunk lock held. */
static int index_of(const struct ibv_pd *pd)
{
	for (unsigned s = 0; s < RDMA_MALLOC_MAX_PDS; s++)
		if (rdmalloc_pd_at(s) == pd)
			return (int)s;
	return -1;
}

/*
 * Wait until @c may start a registration with PD @s: 0 (the lock held,
 * @c's registration with it still to be made), 1 (it exists: nothing to
 * do), or an errno value.  Chunk lock held.
 */
static int settle(struct rdmalloc_chunk *c, const struct ibv_pd *pd, int *s)
{
	for (;;) {
		if (c->state != RDMALLOC_CHUNK_LIVE)
			return ENOENT; /* given back or released: free memory */
		if (!rdmalloc_spec_on_demand(c->spec))
			return ENODEV; /* an eager heap's chunk is registered when made, or not at all */
		if ((*s = index_of(pd)) < 0)
			return ENODEV;
		if (atomic_load_explicit(&c->reg[*s].pd, memory_order_relaxed) == pd)
			return 1;
		if (!c->discarding)
			return 0;
		rdmalloc_lock_wait(RDMALLOC_LOCK_CHUNK);
	}
}

void rdmalloc_chunk_demand_prepare(struct rdmalloc_chunk *c)
{
	const struct rdmalloc_chunk_spec *spec = rdmalloc_chunk_spec_seen(c); /* found unlocked */
	if (!spec || !rdmalloc_spec_on_demand(spec) || !rdmalloc_crew_serves(c->map_size, spec->flags))
		return;
	rdmalloc_chunk_lock();
	int first = !c->held;
	rdmalloc_chunk_unlock();
	if (first) {
		int saved = errno;
		rdmalloc_crew_start();
		errno = saved;
	}
}

/* A walk's hold on @c ends (chunk lock held). */
static void let_go(struct rdmalloc_chunk *c)
{
	c->busy--;
	rdmalloc_lock_broadcast(RDMALLOC_LOCK_CHUNK); /* a release or a discard may wait for it */
}

/* rdmalloc_chunk_demand, entered with the chunk lock held (@c found under
 * it), which it lets go of. */
static int demand_locked(struct rdmalloc_chunk *c, struct ibv_pd *pd)
{
	int s;
	int err = settle(c, pd, &s);
	if (err) {
		rdmalloc_chunk_unlock();
		return err == 1 ? 0 : err;
	}
	/* Busy from here: not released (a big chunk), nor given back, while
	 * the lock is let go of for a relief or the registration. */
	c->busy++;
	size_t size = c->size; /* for the messages: @c may go once let go of */
	void *base = (void *)c->base;
	/* Its first registration holds it under RDMALLOC_MAX_REGISTERED; under
	 * pressure, idle chunks and reserves go first, then once more. */
	int first = !c->held, relieved = 0;
	for (; first && !rdmalloc_hold(c->map_size); relieved = 1) {
		rdmalloc_chunk_unlock();
		if (relieved || !rdmalloc_relieve()) {
			rdmalloc_relief_end();
			rdmalloc_chunk_lock();
			let_go(c);
			rdmalloc_chunk_unlock();
			rdmalloc_log_limit(size);
			STAT_INC(demand_refusals);
			return ENOMEM;
		}
		rdmalloc_chunk_lock();
		if ((err = settle(c, pd, &s))) {
			rdmalloc_relief_end_locked();
			let_go(c);
			rdmalloc_chunk_unlock();
			return err == 1 ? 0 : err;
		}
		first = !c->held;
	}
	if (relieved)
		rdmalloc_relief_end_locked();
	c->held = 1; /* from now on no discard starts: rdmalloc_chunk_decommit */
	rdmalloc_chunk_unlock();

	if (first && rdmalloc_crew_serves(c->map_size, c->spec->flags))
		rdmalloc_crew_populate((void *)c->base, c->map_size); /* crew.h */
	err = rdmalloc_region_register(c, (unsigned)s, pd);
	if (err && rdmalloc_pressure(err)) {
		if (rdmalloc_relieve())
			err = rdmalloc_region_register(c, (unsigned)s, pd); /* memory went back: once more */
		rdmalloc_relief_end();
	}

	rdmalloc_chunk_lock();
	if (err && first && !rdmalloc_registered_pds(c)) {
		c->held = 0;
		rdmalloc_held_bytes -= c->map_size;
	} else if (!err && first) {
		rdmalloc_reserve_want_tick(c->spec); /* pinned now: given back once idle for the decay time */
	}
	let_go(c);
	rdmalloc_chunk_unlock();
	if (err) {
		STAT_INC(demand_refusals);
		rdmalloc_log_once(RDMALLOC_LOG_WARN, "registering a %zu-byte chunk on first use failed: %s "
				  "(further failures are only counted in demand_refusals)", size,
				  rdmalloc_refusal_text(err));
		return ENOMEM; /* refused, whatever ibv_reg_mr said: not to be taken for settle()'s answers */
	}
	STAT_INC(demand_registrations);
	rdmalloc_debug("chunk %p of %zu bytes registered on first use", base, size);
	return 0;
}

int rdmalloc_chunk_demand(struct rdmalloc_chunk *c, struct ibv_pd *pd)
{
	rdmalloc_chunk_lock();
	return demand_locked(c, pd);
}

int rdmalloc_chunk_demand_at(const void *ptr, struct ibv_pd *pd)
{
	/* Found, settled and made busy in one section of the chunk lock: a
	 * block freed meanwhile may have its chunk released (a big block of
	 * an on-demand heap), its descriptor made another chunk's. */
	rdmalloc_chunk_lock();
	struct rdmalloc_chunk *c = rdmalloc_addrmap_lookup(ptr);
	if (!c || !rdmalloc_spec_on_demand(c->spec)) {
		rdmalloc_chunk_unlock();
		return ENODEV;
	}
	return demand_locked(c, pd);
}
