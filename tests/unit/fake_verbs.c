/* SPDX-License-Identifier: MIT */
/* fake_verbs.c - see fake_verbs.h. */
#include "fake_verbs.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "heap.h"
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

void fake_fail_reg_from(unsigned long n)
{
	fake_fail_reg(n, 0);
}

void fake_reenter_jemalloc(int on)
{
	reenter = on;
}

unsigned long fake_reg_calls(void)
{
	pthread_mutex_lock(&mu);
	unsigned long c = calls;
	pthread_mutex_unlock(&mu);
	return c;
}

static struct ibv_mr *fake_reg(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
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
		errno = ENOMEM;
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
	mr->lkey = next_key++;
	mr->rkey = 0x80000000u | next_key++;
	live[i] = (struct fake_mr_info){ mr, pd, addr, len, access };
	pthread_mutex_unlock(&mu);
	/* Pin: fault every page in, writable, without touching its bytes from
	 * user space (as get_user_pages does for a real registration). */
	if (madvise(addr, len, MADV_POPULATE_WRITE) != 0) {
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		for (size_t off = 0; off < len; off += page)
			__atomic_fetch_add((char *)addr + off, 0, __ATOMIC_RELAXED);
	}
	return mr;
}

static int fake_dereg(struct ibv_mr *mr)
{
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

static const struct rdmalloc_verbs_ops fake_ops = {
	.reg_mr = fake_reg,
	.dereg_mr = fake_dereg,
	.open_default_pd = fake_open,
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
		if (m->mr && m->pd == pd && (const char *)p >= (const char *)m->addr &&
		    (const char *)p < (const char *)m->addr + m->len)
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
