/* SPDX-License-Identifier: MIT */
/* fake_verbs.c - see fake_verbs.h. */
#include "fake_verbs.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "heap.h"
#include "rdma_malloc.h"
#include "verbs.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static struct ibv_pd pds[4];
static int have_device;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct fake_mr_info live[FAKE_MAX_MRS];
static unsigned long calls, fail_from, fail_count;
static uint32_t next_key = 0x100;
/* The PD each lkey was issued for, kept after deregistration (lkeys are
 * issued in order from 0x100, two keys per region). */
#define KEY_HISTORY (1u << 20)
static struct ibv_pd *key_pd[KEY_HISTORY];

static void issue_keys(struct ibv_mr *mr, struct ibv_pd *pd)
{
	mr->lkey = next_key++;
	mr->rkey = 0x80000000u | next_key++;
	if (mr->lkey < KEY_HISTORY)
		__atomic_store_n(&key_pd[mr->lkey], pd, __ATOMIC_RELEASE);
}

struct ibv_pd *fake_pd_of_lkey(uint32_t lkey)
{
	return lkey < KEY_HISTORY ? __atomic_load_n(&key_pd[lkey], __ATOMIC_ACQUIRE) : NULL;
}
static int reenter;

struct ibv_pd *fake_pd(int i)
{
	return &pds[i];
}

void fake_fail_reg(unsigned long n, unsigned long count)
{
	pthread_mutex_lock(&mu);
	fail_from = n;
	fail_count = count;
	pthread_mutex_unlock(&mu);
}

static int fail_errno = ENOMEM;

void fake_fail_reg_errno(int err)
{
	fail_errno = err ? err : ENOMEM;
}

void fake_fail_reg_from(unsigned long n)
{
	fake_fail_reg(n, 0);
}

void fake_reenter_jemalloc(int on)
{
	reenter = on;
}

static size_t reg_malloc_max;

void fake_reg_mallocs(size_t max)
{
	reg_malloc_max = max;
}

static void reg_malloc(void)
{
	static void *kept[8];
	static unsigned n;
	static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&kept_mu);
	unsigned i = n++;
	pthread_mutex_unlock(&kept_mu);
	size_t size = 4096 + (size_t)(i * 2654435761u) % reg_malloc_max;
	char *p = malloc(size);
	if (p) {
		p[0] = p[size - 1] = 1;
		p = __atomic_exchange_n(&kept[i % 8], p, __ATOMIC_ACQ_REL);
	}
	free(p);
}

unsigned long fake_reg_calls(void)
{
	pthread_mutex_lock(&mu);
	unsigned long c = calls;
	pthread_mutex_unlock(&mu);
	return c;
}

static pthread_mutex_t block_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t block_cv = PTHREAD_COND_INITIALIZER;
static int block_state; /* 1 armed, 2 a registration waits, 0 released */
static struct ibv_pd *block_pd; /* NULL: any */
static int block_dereg; /* the block is for a deregistration, not a registration */
static unsigned long pd_calls[4];

void fake_block_next_reg(void)
{
	fake_block_next_reg_on(NULL);
}

void fake_block_next_reg_on(struct ibv_pd *pd)
{
	pthread_mutex_lock(&block_mu);
	block_state = 1;
	block_pd = pd;
	block_dereg = 0;
	pthread_mutex_unlock(&block_mu);
}

void fake_block_next_dereg(void)
{
	pthread_mutex_lock(&block_mu);
	block_state = 1;
	block_pd = NULL;
	block_dereg = 1;
	pthread_mutex_unlock(&block_mu);
}

/* Hold this call up if a block is armed for its kind (@dereg) and PD. */
static int hold_on; /* fake_hold_regs_off: armed */
static pthread_t hold_owner;
static unsigned hold_waiting, hold_waiting_now, hold_pass;

void fake_hold_regs_off_after(pthread_t owner, unsigned pass)
{
	pthread_mutex_lock(&block_mu);
	hold_on = 1;
	hold_owner = owner;
	hold_waiting = 0;
	hold_pass = pass;
	pthread_mutex_unlock(&block_mu);
}

void fake_hold_regs_off(pthread_t owner)
{
	fake_hold_regs_off_after(owner, 0);
}

unsigned fake_held_now(void)
{
	pthread_mutex_lock(&block_mu);
	unsigned n = hold_waiting_now;
	pthread_mutex_unlock(&block_mu);
	return n;
}

unsigned fake_release_held(void)
{
	pthread_mutex_lock(&block_mu);
	hold_on = 0;
	unsigned n = hold_waiting;
	pthread_cond_broadcast(&block_cv);
	pthread_mutex_unlock(&block_mu);
	return n;
}

static void maybe_block(int dereg, struct ibv_pd *pd)
{
	pthread_mutex_lock(&block_mu);
	if (!dereg && hold_on && !pthread_equal(pthread_self(), hold_owner) && hold_pass) {
		hold_pass--;
	} else if (!dereg && hold_on && !pthread_equal(pthread_self(), hold_owner)) {
		hold_waiting++;
		hold_waiting_now++;
		while (hold_on)
			pthread_cond_wait(&block_cv, &block_mu);
		hold_waiting_now--;
	}
	if (block_state == 1 && block_dereg == dereg && (!block_pd || block_pd == pd)) {
		block_state = 2;
		pthread_cond_broadcast(&block_cv);
		while (block_state == 2)
			pthread_cond_wait(&block_cv, &block_mu);
	}
	pthread_mutex_unlock(&block_mu);
}

static struct ibv_pd *_Atomic slow_pd;
static _Atomic unsigned slow_usec;

void fake_slow_reg_on(struct ibv_pd *pd, unsigned usec)
{
	slow_usec = usec;
	slow_pd = pd;
}

static void count_pd(struct ibv_pd *pd)
{
	for (int i = 0; i < 4; i++)
		if (pd == &pds[i])
			__atomic_fetch_add(&pd_calls[i], 1, __ATOMIC_SEQ_CST);
}

unsigned long fake_pd_calls(struct ibv_pd *pd)
{
	for (int i = 0; i < 4; i++)
		if (pd == &pds[i])
			return __atomic_load_n(&pd_calls[i], __ATOMIC_SEQ_CST);
	return 0;
}

void fake_wait_blocked(void)
{
	pthread_mutex_lock(&block_mu);
	while (block_state != 2)
		pthread_cond_wait(&block_cv, &block_mu);
	pthread_mutex_unlock(&block_mu);
}

static void *alloc_thread(void *arg)
{
	struct fake_alloc *a = arg;
	a->p = rdma_malloc(a->size);
	return NULL;
}

void fake_alloc_start(struct fake_alloc *a, size_t size)
{
	*a = (struct fake_alloc){ .size = size };
	if (pthread_create(&a->thread, NULL, alloc_thread, a))
		abort();
}

void *fake_alloc_join(struct fake_alloc *a)
{
	pthread_join(a->thread, NULL);
	return a->p;
}

void fake_release_reg(void)
{
	pthread_mutex_lock(&block_mu);
	block_state = 0;
	pthread_cond_broadcast(&block_cv);
	pthread_mutex_unlock(&block_mu);
}

/* Default: a device with RC ODP for every operation, and implicit ODP (as mlx5). */
static uint32_t odp_general = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
		odp_rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			 IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;

static struct ibv_mr *fake_reg_body(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	count_pd(pd);
	maybe_block(0, pd);
	if (slow_usec && pd == slow_pd)
		usleep(slow_usec);
	if (reg_malloc_max)
		reg_malloc();
	if (reenter) {
		/* libibverbs calloc()s the MR and fork-protection nodes here. */
		void *p = rdmalloc_probe_malloc(48);
		void *q = rdmalloc_probe_malloc(20000);
		rdmalloc_probe_free(p);
		rdmalloc_probe_free(q);
	}
	pthread_mutex_lock(&mu);
	calls++;
	if (fail_from && calls >= fail_from && (!fail_count || calls < fail_from + fail_count)) {
		pthread_mutex_unlock(&mu);
		errno = fail_errno;
		return NULL;
	}
	/* An implicit ODP region (NULL, SIZE_MAX) needs the capability, as on
	 * mlx5; other devices refuse it. */
	if (!addr && len == SIZE_MAX &&
	    (!(access & IBV_ACCESS_ON_DEMAND) || !(odp_general & IBV_ODP_SUPPORT_IMPLICIT))) {
		pthread_mutex_unlock(&mu);
		errno = EINVAL;
		return NULL;
	}
	size_t i = 0;
	while (i < FAKE_MAX_MRS && live[i].mr)
		i++;
	if (i == FAKE_MAX_MRS) {
		pthread_mutex_unlock(&mu);
		errno = ENOSPC;
		return NULL;
	}
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	issue_keys(mr, pd);
	live[i] = (struct fake_mr_info){ mr, pd, addr, len, access };
	pthread_mutex_unlock(&mu);
	if (access & IBV_ACCESS_ON_DEMAND)
		return mr; /* ODP pins nothing */
	/* Pin: fault every page in, writable, without touching its bytes from
	 * user space (as get_user_pages does for a real registration). */
	if (madvise(addr, len, MADV_POPULATE_WRITE) != 0) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		for (size_t off = 0; off < len; off += page)
			__atomic_fetch_add((char *)addr + off, 0, __ATOMIC_RELAXED);
	}
	return mr;
}

/* Registrations and deregistrations inside the backend now: a fork child
 * sees the count its parent had at the fork. */
static atomic_uint under_way;

unsigned fake_calls_under_way(void)
{
	return atomic_load(&under_way);
}

/* As libibverbs' fork protection with RDMAV_HUGEPAGES_SAFE: each call
 * reads /proc/self/smaps with stdio (fake_open_files). */
static atomic_int opens_files;

void fake_open_files(int on)
{
	atomic_store(&opens_files, on);
}

static int fake_opens_files(void)
{
	return atomic_load(&opens_files);
}

static void open_a_file(void)
{
	if (atomic_load(&opens_files)) {
		FILE *f = fopen("/dev/null", "r");
		if (f)
			fclose(f);
	}
}

static struct ibv_mr *fake_reg(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	atomic_fetch_add(&under_way, 1);
	struct ibv_mr *mr = fake_reg_body(pd, addr, len, access);
	int err = errno;
	open_a_file();
	atomic_fetch_sub(&under_way, 1);
	/* A provider may leave errno set when it succeeds (libibverbs probes
	 * files, ioctls are retried): the library must not pass that on. */
	errno = mr ? EILSEQ : err;
	return mr;
}

static int fake_dereg_body(struct ibv_mr *mr);

static int fake_dereg(struct ibv_mr *mr)
{
	atomic_fetch_add(&under_way, 1);
	int err = fake_dereg_body(mr);
	open_a_file();
	atomic_fetch_sub(&under_way, 1);
	errno = EILSEQ; /* whatever the outcome (fake_reg) */
	return err;
}

static int fake_dereg_body(struct ibv_mr *mr)
{
	count_pd(mr->pd);
	maybe_block(1, mr->pd);
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MRS; i++) {
		if (live[i].mr == mr) {
			memset(&live[i], 0, sizeof(live[i]));
			pthread_mutex_unlock(&mu);
			free(mr);
			return 0;
		}
	}
	pthread_mutex_unlock(&mu);
	return EINVAL;
}

static struct ibv_pd *fake_open(const char *device, char *why, size_t whylen)
{
	(void)device;
	if (!have_device) {
		strncpy(why, "fake backend: no device", whylen - 1);
		errno = ENODEV;
		return NULL;
	}
	return &pds[0];
}

/* ---- re-registration ---- */

static enum fake_rereg_mode rereg_mode;
static unsigned long rereg_calls;

void fake_set_rereg(enum fake_rereg_mode mode)
{
	rereg_mode = mode;
}

unsigned long fake_rereg_calls(void)
{
	return rereg_calls;
}

static int fake_rereg(struct ibv_mr *mr, unsigned int access, int *broken)
{
	pthread_mutex_lock(&mu);
	rereg_calls++;
	struct fake_mr_info *m = NULL;
	for (size_t i = 0; i < FAKE_MAX_MRS && !m; i++)
		if (live[i].mr == mr)
			m = &live[i];
	int err = 0;
	*broken = 0;
	if (!m) {
		err = EINVAL;
	} else if (rereg_mode == FAKE_REREG_REFUSE) {
		err = EOPNOTSUPP;
	} else if (rereg_mode == FAKE_REREG_BROKEN) {
		err = EIO;
		*broken = 1;
		m->access = 0xdead; /* unusable */
	} else {
		m->access = access;
		if (rereg_mode == FAKE_REREG_NEW_KEYS) {
			issue_keys(mr, mr->pd);
		}
	}
	pthread_mutex_unlock(&mu);
	return err;
}

/* ---- memory windows ---- */

#define FAKE_MAX_MWS 64
static struct fake_mw_info mws[FAKE_MAX_MWS];
static int no_mw;

void fake_without_mw(int on)
{
	no_mw = on;
}

static struct fake_mw_info *mw_rec(const struct ibv_mw *mw)
{
	for (size_t i = 0; i < FAKE_MAX_MWS; i++)
		if (mws[i].mw && mws[i].mw == mw)
			return &mws[i];
	return NULL;
}

const struct fake_mw_info *fake_mw(const struct ibv_mw *mw)
{
	pthread_mutex_lock(&mu);
	const struct fake_mw_info *r = mw_rec(mw);
	pthread_mutex_unlock(&mu);
	return r;
}

size_t fake_live_mws(void)
{
	size_t n = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MWS; i++)
		n += mws[i].mw != NULL;
	pthread_mutex_unlock(&mu);
	return n;
}

int fake_mw_allows(uint32_t rkey, uint64_t addr, size_t len, unsigned access)
{
	int ok = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MWS; i++) {
		struct fake_mw_info *w = &mws[i];
		if (w->mw && w->bound && w->mw->rkey == rkey && addr >= w->addr && len <= w->len &&
		    addr - w->addr <= w->len - len && (w->access & access) == access)
			ok = 1;
	}
	pthread_mutex_unlock(&mu);
	return ok;
}

static struct ibv_mw *fake_alloc_mw(struct ibv_pd *pd, int type)
{
	if (no_mw) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	pthread_mutex_lock(&mu);
	size_t i = 0;
	while (i < FAKE_MAX_MWS && mws[i].mw)
		i++;
	if (i == FAKE_MAX_MWS) {
		pthread_mutex_unlock(&mu);
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_mw *mw = calloc(1, sizeof(*mw));
	mw->pd = pd;
	mw->type = (enum ibv_mw_type)type;
	mw->rkey = (next_key++ << 8) | 0x11;
	mws[i] = (struct fake_mw_info){ .mw = mw };
	pthread_mutex_unlock(&mu);
	return mw;
}

static int fake_dealloc_mw(struct ibv_mw *mw)
{
	pthread_mutex_lock(&mu);
	struct fake_mw_info *w = mw_rec(mw);
	if (w)
		memset(w, 0, sizeof(*w));
	pthread_mutex_unlock(&mu);
	if (!w)
		return EINVAL;
	free(mw);
	return 0;
}

/* The checks a device makes (IB spec C10-72..75, as rxe does them). */
static int fake_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mr *mr, uint64_t addr, size_t len,
			unsigned int access, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	(void)wr_id, (void)send_flags;
	pthread_mutex_lock(&mu);
	struct fake_mw_info *w = mw_rec(mw);
	struct fake_mr_info *m = NULL;
	for (size_t i = 0; mr && i < FAKE_MAX_MRS && !m; i++)
		if (live[i].mr == mr)
			m = &live[i];
	int err = 0;
	if (!w || (mr && !m) || !mr) /* rxe's provider reads the region's lkey even to unbind */
		err = EINVAL;
	else if (m && (m->pd != mw->pd || !(m->access & IBV_ACCESS_MW_BIND)))
		err = EINVAL;
	else if (m && (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
		 !(m->access & IBV_ACCESS_LOCAL_WRITE))
		err = EINVAL;
	else if (m && (addr < (uintptr_t)m->addr || addr + len > (uintptr_t)m->addr + m->len))
		err = EINVAL;
	else if (mw->type == IBV_MW_TYPE_2 && w->bound)
		err = EINVAL; /* o10-37.2.30: a type 2 window must be invalidated first */
	if (!err) {
		*w = (struct fake_mw_info){ .mw = mw, .qp = mw->type == IBV_MW_TYPE_2 ? qp : NULL, .mr = mr,
					    .addr = addr, .len = len, .access = access, .bound = len != 0 };
		if (mw->type == IBV_MW_TYPE_1)
			mw->rkey = ibv_inc_rkey(mw->rkey); /* as ibv_bind_mw's providers do */
		else if ((rkey & ~0xffu) != (mw->rkey & ~0xffu))
			err = EINVAL;
	}
	pthread_mutex_unlock(&mu);
	return err;
}

static int fake_local_inv(struct ibv_qp *qp, uint32_t rkey, uint64_t wr_id, unsigned int send_flags)
{
	(void)wr_id, (void)send_flags;
	int err = EINVAL;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MWS; i++) {
		struct fake_mw_info *w = &mws[i];
		if (w->mw && w->mw->rkey == rkey && w->mw->type == IBV_MW_TYPE_2 && w->qp == qp) {
			w->bound = 0;
			err = 0;
		}
	}
	pthread_mutex_unlock(&mu);
	return err;
}


static struct fake_advice advice;

static int odp_query_err;

void fake_set_odp(uint32_t general, uint32_t rc)
{
	odp_general = general;
	odp_rc = rc;
}

void fake_fail_odp_query(int err)
{
	odp_query_err = err;
}

struct fake_advice fake_last_advice(void)
{
	return advice;
}

static struct ibv_pd *no_odp_pd; /* fake_set_no_odp_on */

void fake_set_no_odp_on(struct ibv_pd *pd)
{
	no_odp_pd = pd;
}

static int fake_query_odp(struct ibv_pd *pd, uint32_t *general, uint32_t *rc)
{
	if (odp_query_err)
		return odp_query_err;
	*general = pd && pd == no_odp_pd ? 0 : odp_general;
	*rc = pd && pd == no_odp_pd ? 0 : odp_rc;
	return 0;
}

static int fake_advise_mr(struct ibv_pd *pd, int adv, uint32_t flags, void *addr, size_t len, uint32_t lkey)
{
	(void)pd;
	advice = (struct fake_advice){ advice.calls + 1, adv, flags, lkey, addr, len,
				       len > advice.max_len ? len : advice.max_len, advice.total_len + len };
	return odp_general ? 0 : EOPNOTSUPP;
}

static struct rdmalloc_verbs_ops fake_ops = {
	.reg_mr = fake_reg,
	.dereg_mr = fake_dereg,
	.open_default_pd = fake_open,
	.rereg_mr = fake_rereg,
	.alloc_mw = fake_alloc_mw,
	.dealloc_mw = fake_dealloc_mw,
	.bind_mw = fake_bind_mw,
	.local_inv = fake_local_inv,
	.query_odp = fake_query_odp,
	.advise_mr = fake_advise_mr,
	.opens_files = fake_opens_files,
};

void fake_verbs_install(int with_device)
{
	have_device = with_device;
	rdmalloc_verbs_set_ops(&fake_ops);
}

size_t fake_live_mrs(void)
{
	size_t n = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MRS; i++)
		n += live[i].mr != NULL;
	pthread_mutex_unlock(&mu);
	return n;
}

const struct fake_mr_info *fake_find(struct ibv_pd *pd, const void *p)
{
	const struct fake_mr_info *r = NULL;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MRS && !r; i++) {
		const struct fake_mr_info *m = &live[i];
		if (m->mr && m->pd == pd && (uintptr_t)p >= (uintptr_t)m->addr &&
		    (uintptr_t)p - (uintptr_t)m->addr < m->len)
			r = m;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

size_t fake_snapshot(struct fake_mr_info *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < FAKE_MAX_MRS && n < max; i++)
		if (live[i].mr)
			out[n++] = live[i];
	pthread_mutex_unlock(&mu);
	return n;
}
