/* SPDX-License-Identifier: MIT */
/*
 * region.c - one registration of one chunk with one PD (region.h).
 *
 * Lock-free readers (lookup.h, api/keys.c) read a registration's PD and its
 * key word between two reads of its sequence: a change of the PD is
 * bracketed by the sequence, odd meanwhile, so a reader never pairs a PD
 * with cleared keys or another PD's.  The keys are one word, so a reader
 * never pairs the lkey of one region with the rkey of another.
 */
#include "region.h"

#include <errno.h>
#include <string.h>

#include "chunkset.h"
#include "counters.h"
#include "implicit.h"
#include "log.h"
#include "verbs.h"

_Atomic unsigned rdmalloc_rereg_stamp;

/* The stores in between are releases, so a reader that acquires one of
 * them sees the odd sequence after it (no fence: TSan has none). */
static void change_begin(struct rdmalloc_reg *r)
{
	unsigned q = atomic_load_explicit(&r->seq, memory_order_relaxed);
	atomic_store_explicit(&r->seq, q + 1, memory_order_relaxed);
}

static void change_end(struct rdmalloc_reg *r)
{
	unsigned q = atomic_load_explicit(&r->seq, memory_order_relaxed);
	atomic_store_explicit(&r->seq, q + 1, memory_order_release);
}

static void clear(struct rdmalloc_reg *r)
{
	change_begin(r);
	atomic_store_explicit(&r->pd, NULL, memory_order_release);
	atomic_store_explicit(&r->mr, NULL, memory_order_release);
	atomic_store_explicit(&r->keys, 0, memory_order_release);
	change_end(r);
}

/* Chunks of implicit ODP heaps have no region of their own: they use their
 * PD's shared one (implicit.c). */
static int implicit_odp(const struct rdmalloc_chunk *c)
{
	return (c->spec->flags & RDMA_HEAP_ODP_IMPLICIT) != 0;
}

/* A region for @c on @pd with @access: its own, or the shared implicit
 * one.  NULL with errno. */
static struct ibv_mr *reg_mr(struct rdmalloc_chunk *c, struct ibv_pd *pd, unsigned access)
{
	if (implicit_odp(c))
		return rdmalloc_implicit_get(pd, access);
	return rdmalloc_reg_mr(pd, (void *)c->base, c->map_size, access);
}

int rdmalloc_region_deregister(struct rdmalloc_chunk *c, struct ibv_mr *mr)
{
	struct ibv_pd *pd = mr ? rdmalloc_mr_pd(mr) : NULL; /* mr is gone on success */
	int err = !mr ? 0 : implicit_odp(c) ? rdmalloc_implicit_put(mr) : rdmalloc_dereg_mr(mr);
	if (err) {
		atomic_store(&c->dereg_failed, 1);
		rdmalloc_pd_dereg_failed(pd);
	}
	return err;
}

/* Publish @mr (registered with @access under re-registration @stamp) in
 * @r: its keys, released last for lock-free readers. */
static void publish(struct rdmalloc_reg *r, struct ibv_mr *mr, unsigned access, unsigned stamp)
{
	unsigned lkey, rkey;
	rdmalloc_mr_keys(mr, &lkey, &rkey);
	r->access = access;
	r->stamp = stamp;
	atomic_store_explicit(&r->mr, mr, memory_order_release);
	atomic_store_explicit(&r->keys, (uint64_t)lkey << 32 | rkey, memory_order_release);
}

int rdmalloc_region_register(struct rdmalloc_chunk *c, unsigned i, struct ibv_pd *pd)
{
	unsigned stamp = atomic_load_explicit(&rdmalloc_rereg_stamp, memory_order_acquire);
	unsigned access = rdmalloc_spec_access(c->spec);
	struct ibv_mr *mr = reg_mr(c, pd, access);
	if (!mr)
		return errno ? errno : ENOMEM;
	struct rdmalloc_reg *r = &c->reg[i];
	change_begin(r);
	publish(r, mr, access, stamp);
	atomic_store_explicit(&r->pd, pd, memory_order_release);
	change_end(r);
	return 0;
}

struct ibv_mr *rdmalloc_region_unpublish(struct rdmalloc_chunk *c, unsigned i)
{
	struct rdmalloc_reg *r = &c->reg[i];
	struct ibv_mr *mr = atomic_load_explicit(&r->mr, memory_order_relaxed);
	clear(r);
	return mr;
}

int rdmalloc_region_deregister_all(struct rdmalloc_chunk *c)
{
	int first = 0;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++) {
		int err = rdmalloc_region_deregister(c, rdmalloc_region_unpublish(c, i));
		if (err && !first)
			first = err;
	}
	return first;
}

int rdmalloc_region_sync(struct rdmalloc_chunk *c, struct ibv_pd *const want[RDMA_MALLOC_MAX_PDS])
{
	unsigned slot[RDMA_MALLOC_MAX_PDS], n = 0;
	for (unsigned i = 0; i < RDMA_MALLOC_MAX_PDS; i++) {
		struct ibv_pd *have = atomic_load_explicit(&c->reg[i].pd, memory_order_relaxed);
		if (have == want[i] && (!have || c->reg[i].access == rdmalloc_spec_access(c->spec)))
			continue;
		if (have)
			rdmalloc_region_deregister(c, rdmalloc_region_unpublish(c, i));
		if (want[i])
			slot[n++] = i;
	}
	/* On this thread, one PD after another, never shared with the crew:
	 * a worker's ibv_reg_mr may wait for a lock this thread holds (the
	 * program called malloc holding a provider's), and this thread would
	 * wait for the worker.  Once the crew has populated a big chunk, a
	 * registration only pins present pages: a second PD costs little
	 * (doc/benchmarks.md, "Registration in parallel"). */
	for (unsigned k = 0; k < n; k++) {
		int err = rdmalloc_region_register(c, slot[k], want[slot[k]]);
		if (err)
			return err;
	}
	return 0;
}

int rdmalloc_region_change_access(struct rdmalloc_chunk *c, unsigned i, unsigned access, int new_keys,
				  unsigned stamp, uint64_t *old, uint64_t *now)
{
	struct rdmalloc_reg *r = &c->reg[i];
	struct ibv_pd *pd = atomic_load_explicit(&r->pd, memory_order_relaxed);
	struct ibv_mr *mr = atomic_load_explicit(&r->mr, memory_order_relaxed);
	*old = atomic_load_explicit(&r->keys, memory_order_relaxed);
	int broken = r->access == RDMALLOC_REG_BROKEN;
	if (!new_keys && !implicit_odp(c) && !broken) { /* never change a shared region in place */
		int err = rdmalloc_rereg_access(mr, access, &broken);
		if (!err) {
			publish(r, mr, access, stamp);
			goto done;
		}
		rdmalloc_log_once(RDMALLOC_LOG_INFO, "ibv_rereg_mr with IBV_REREG_MR_CHANGE_ACCESS refused (%s): "
				  "regions are replaced instead (new keys)", rdmalloc_strerror(err));
	}
	/* Register anew, publish the new keys, only then deregister the old
	 * region: the address map never leads to a key that is already gone. */
	struct ibv_mr *fresh = reg_mr(c, pd, access);
	if (!fresh) {
		int err = errno ? errno : ENOMEM;
		if (broken && r->access != RDMALLOC_REG_BROKEN) {
			/* Replaced by the undoing, or by the next change or resync. */
			r->access = RDMALLOC_REG_BROKEN;
			rdmalloc_log(RDMALLOC_LOG_ERROR, "a region of chunk %p is unusable after a failed "
				     "ibv_rereg_mr and could not be replaced yet: %s", (void *)c->base,
				     rdmalloc_strerror(err));
		}
		return err;
	}
	publish(r, fresh, access, stamp);
	STAT_INC(rereg_replaced);
	rdmalloc_region_deregister(c, mr); /* a failure keeps the chunk mapped */
done:
	*now = atomic_load_explicit(&r->keys, memory_order_relaxed);
	return 0;
}

void rdmalloc_region_forget(struct rdmalloc_chunk *c, unsigned i)
{
	clear(&c->reg[i]);
	c->reg[i].windows = 0;
}
