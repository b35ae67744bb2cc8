/* SPDX-License-Identifier: MIT */
/*
 * hold.c - what may be held: chunk bytes against RDMALLOC_MAX_REGISTERED,
 * registrations refused for want of memory (RLIMIT_MEMLOCK), and the
 * relief that gives memory back before a refusal becomes a failure.
 */
#include "chunkset.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "compiler.h"
#include "counters.h"
#include "fault.h"
#include "lock.h"
#include "log.h"
#include "options.h"
#include "reserve.h"
#include "tls.h"

size_t rdmalloc_held_bytes; /* chunkset.h */

static unsigned long long memlock_limit(void)
{
	struct rlimit rl = { 0, 0 };
	getrlimit(RLIMIT_MEMLOCK, &rl);
	return (unsigned long long)rl.rlim_cur;
}

void rdmalloc_log_reg_failure(size_t size, int err)
{
	rdmalloc_log_once(RDMALLOC_LOG_WARN,
			  "ibv_reg_mr of a %zu-byte chunk failed: %s; jemalloc may retry with a smaller "
			  "chunk, else the allocation fails with ENOMEM (further failures are only counted)",
			  size, rdmalloc_refusal_text(err));
}

const char *rdmalloc_refusal_text(int err)
{
	static RDMALLOC_TLS char buf[160];
	if (err == EDQUOT)
		snprintf(buf, sizeof(buf), "RDMALLOC_MAX_REGISTERED (%zu bytes) reached", rdmalloc_opts.max_registered);
	else if (err == ENOMEM || err == EAGAIN)
		snprintf(buf, sizeof(buf), "ibv_reg_mr: %s (RLIMIT_MEMLOCK %llu bytes)", rdmalloc_strerror(err), memlock_limit());
	else
		snprintf(buf, sizeof(buf), "ibv_reg_mr: %s", rdmalloc_strerror(err));
	return buf;
}

/* May @want more bytes be held under RDMALLOC_MAX_REGISTERED?  Counted in
 * rdmalloc_held_bytes if so.  Chunk lock held. */
int rdmalloc_hold(size_t want)
{
	size_t limit = rdmalloc_opts.max_registered;
	if (limit && (want > limit || rdmalloc_held_bytes > limit - want))
		return 0;
	rdmalloc_held_bytes += want;
	STAT_MAX(peak_pinned_bytes, rdmalloc_held_bytes);
	return 1;
}

size_t rdmalloc_chunks_held_bytes(void)
{
	rdmalloc_chunk_lock();
	size_t n = rdmalloc_held_bytes;
	rdmalloc_chunk_unlock();
	return n;
}

void rdmalloc_log_limit(size_t size)
{
	rdmalloc_tl_pressure = 1;
	STAT_INC(limit_refusals);
	rdmalloc_log_once(RDMALLOC_LOG_WARN,
			  "RDMALLOC_MAX_REGISTERED (%zu bytes) refuses a %zu-byte chunk, after idle chunks "
			  "were given back; what needed it fails with ENOMEM, or (the drop-in's heap) gets "
			  "it unregistered (further refusals are only counted)",
			  rdmalloc_opts.max_registered, size);
}

/* Registration failures that giving idle chunks back may cure; the
 * thread remembers (tls.h). */
int rdmalloc_pressure(int err)
{
	int p = err == ENOMEM || err == EAGAIN;
	if (p)
		rdmalloc_tl_pressure = 1;
	return p;
}

size_t rdmalloc_relieve(void)
{
	rdmalloc_chunk_lock();
	rdmalloc_reserves_hold_off_locked();
	size_t before = rdmalloc_held_bytes;
	rdmalloc_chunk_unlock();
	size_t bytes = rdmalloc_reserves_drop(1);
	bytes += rdmalloc_give_back_idle(NULL, 0);
	size_t after = rdmalloc_chunks_held_bytes();
	RDMALLOC_TEST_PAUSE(RDMALLOC_PAUSE_RELIEVED);
	/* A fill cancelled under way released what it held without being
	 * counted as dropped: held bytes that went count as relief too. */
	return bytes + (after < before ? before - after : 0);
}

void rdmalloc_relief_begin(void)
{
	rdmalloc_chunk_lock();
	rdmalloc_reserves_hold_off_locked();
	rdmalloc_chunk_unlock();
}

void rdmalloc_relief_end(void)
{
	rdmalloc_chunk_lock();
	rdmalloc_reserves_resume_locked();
	rdmalloc_chunk_unlock();
}

void rdmalloc_relief_end_locked(void)
{
	rdmalloc_reserves_resume_locked();
}

int rdmalloc_register_steady_relieved(struct rdmalloc_chunk *c, unsigned *used)
{
	int err = rdmalloc_register_steady(c, used);
	if (!err || !rdmalloc_pressure(err))
		return err;
	if (rdmalloc_relieve())
		err = rdmalloc_register_steady(c, used); /* memory went back: once more */
	if (err) /* the lock comes with success only */
		rdmalloc_relief_end();
	else
		rdmalloc_relief_end_locked();
	return err;
}
