/* SPDX-License-Identifier: MIT */
/* rdma_env.c - see rdma_env.h. */
#include "rdma_env.h"

#include <errno.h>
#include <linux/capability.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rdma_malloc.h"

#define SQ_DEPTH 256
#define RQ_DEPTH 64
#define CQ_DEPTH (SQ_DEPTH + RQ_DEPTH)
#define RD_ATOMIC 16
/* Largest piece of a split transfer, whatever the port allows. */
#define MAX_PIECE (8u << 20)

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

const char *e2e_status_str(int status)
{
	switch (status) {
	case E2E_ST_TIMEOUT:
		return "no completion within the deadline";
	case E2E_ST_POST:
		return "ibv_post_* refused the work request";
	case E2E_ST_KEYS:
		return "rdma_malloc_keys() refused the buffer";
	default:
		return ibv_wc_status_str((enum ibv_wc_status)status);
	}
}

/* ---------------------------------------------------------------- GID */

static bool gid_is_v4_mapped(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(g->raw, prefix, sizeof(prefix)) == 0;
}

static bool gid_is_loopback(const union ibv_gid *g)
{
	return gid_is_v4_mapped(g) && g->raw[12] == 127;
}

/* GID index 1 if it is IPv4-mapped, else the first 127.x mapped GID, else
 * the first IPv4-mapped one. */
static int find_gid(struct e2e_pair *p, struct e2e_end *e, int tbl_len)
{
	union ibv_gid g;
	if (tbl_len > 1 && ibv_query_gid(e->ctx, e->port, 1, &g) == 0 && gid_is_v4_mapped(&g)) {
		e->gid_index = 1;
		e->gid = g;
		return 0;
	}
	int any = -1;
	union ibv_gid any_gid;
	memset(&any_gid, 0, sizeof(any_gid));
	for (int i = 0; i < tbl_len; i++) {
		if (ibv_query_gid(e->ctx, e->port, i, &g))
			continue;
		if (gid_is_loopback(&g)) {
			e->gid_index = i;
			e->gid = g;
			return 0;
		}
		if (any < 0 && gid_is_v4_mapped(&g)) {
			any = i;
			any_gid = g;
		}
	}
	if (any < 0) {
		snprintf(p->err, sizeof(p->err), "%s port %u has no IPv4-mapped GID",
			 ibv_get_device_name(e->ctx->device), e->port);
		return ENOENT;
	}
	e->gid_index = any;
	e->gid = any_gid;
	return 0;
}

/* The two ends: [0] the requester's, [1] the peer's. */
static void ends(struct e2e_pair *p, struct e2e_end end[2])
{
	end[0] = (struct e2e_end){ p->pd, p->ctx, p->port, p->gid_index, p->gid };
	end[1] = p->peer;
}

/* ---------------------------------------------------------------- QPs */

static void destroy_qps(struct e2e_pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->qp[i])
			ibv_destroy_qp(p->qp[i]);
		p->qp[i] = NULL;
	}
	for (int i = 0; i < 2; i++) {
		if (p->cq[i])
			ibv_destroy_cq(p->cq[i]);
		p->cq[i] = NULL;
	}
}

static int to_init(const struct e2e_end *e, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = e->port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS);
}

/* @e is the QP's own end, @dest the other one. */
static int to_rtr(struct e2e_pair *p, const struct e2e_end *e, const struct e2e_end *dest,
		  struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = p->mtu,
		.dest_qp_num = dest_qpn,
		.rq_psn = 0,
		.max_dest_rd_atomic = RD_ATOMIC,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.grh = {
				.dgid = dest->gid,
				.sgid_index = (uint8_t)e->gid_index,
				.hop_limit = 1,
			},
			.sl = 0,
			.src_path_bits = 0,
			.port_num = e->port,
		},
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = 0,
		.max_rd_atomic = RD_ATOMIC,
	};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int create_qps(struct e2e_pair *p)
{
	struct e2e_end end[2];
	ends(p, end);
	for (int i = 0; i < 2; i++) {
		p->cq[i] = ibv_create_cq(end[i].ctx, CQ_DEPTH, NULL, NULL, 0);
		if (!p->cq[i]) {
			int err = errno ? errno : ENOMEM;
			snprintf(p->err, sizeof(p->err), "ibv_create_cq: %s", strerror(err));
			destroy_qps(p);
			return err;
		}
	}
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = p->cq[i],
			.recv_cq = p->cq[i],
			.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = RQ_DEPTH,
				 .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
			.sq_sig_all = 0,
		};
		p->qp[i] = ibv_create_qp(end[i].pd, &ia);
		if (!p->qp[i]) {
			int err = errno ? errno : ENOMEM;
			snprintf(p->err, sizeof(p->err), "ibv_create_qp: %s", strerror(err));
			destroy_qps(p);
			return err;
		}
	}
	for (int i = 0; i < 2; i++) {
		int err;
		const char *step;
		if ((err = to_init(&end[i], p->qp[i])) != 0)
			step = "INIT";
		else if ((err = to_rtr(p, &end[i], &end[1 - i], p->qp[i], p->qp[1 - i]->qp_num)) != 0)
			step = "RTR";
		else if ((err = to_rts(p->qp[i])) != 0)
			step = "RTS";
		else
			continue;
		snprintf(p->err, sizeof(p->err), "ibv_modify_qp of QP %d to %s (GID index %d): %s", i,
			 step, end[i].gid_index, strerror(err));
		destroy_qps(p);
		return err;
	}
	return 0;
}

/* Fill @e for @pd: its device's first active port and GID.  The pair's
 * MTU and message limit become the smaller of what it had and this port's. */
static int open_end(struct e2e_pair *p, struct e2e_end *e, struct ibv_pd *pd)
{
	e->pd = pd;
	e->ctx = pd->context;
	struct ibv_device_attr da;
	int err = ibv_query_device(e->ctx, &da);
	if (err) {
		snprintf(p->err, sizeof(p->err), "ibv_query_device: %s", strerror(err));
		return err;
	}
	struct ibv_port_attr pa;
	for (uint8_t port = 1; port <= da.phys_port_cnt; port++) {
		if (ibv_query_port(e->ctx, port, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
			e->port = port;
			break;
		}
	}
	if (!e->port) {
		snprintf(p->err, sizeof(p->err), "%s has no active port",
			 ibv_get_device_name(e->ctx->device));
		return ENODEV;
	}
	if (!p->mtu || pa.active_mtu < p->mtu)
		p->mtu = pa.active_mtu;
	uint32_t max_msg = pa.max_msg_sz && pa.max_msg_sz < MAX_PIECE ? pa.max_msg_sz : MAX_PIECE;
	if (!p->max_msg || max_msg < p->max_msg)
		p->max_msg = max_msg;
	return find_gid(p, e, pa.gid_tbl_len);
}

/* The pair of @pd and @peer_pd (NULL: loopback on @pd). */
static int open_pair(struct e2e_pair *p, struct ibv_pd *pd, struct ibv_pd *peer_pd)
{
	struct e2e_end e = { 0 };
	int err = open_end(p, &e, pd);
	if (err)
		return err;
	if (!peer_pd)
		p->peer = e;
	else if ((err = open_end(p, &p->peer, peer_pd)) != 0)
		return err;
	p->pd = e.pd;
	p->ctx = e.ctx;
	p->port = e.port;
	p->gid_index = e.gid_index;
	p->gid = e.gid;
	return create_qps(p);
}

int e2e_pair_open(struct e2e_pair *p, struct ibv_pd *pd)
{
	memset(p, 0, sizeof(*p));
	if (!pd) {
		pd = rdma_malloc_default_pd();
		if (!pd) {
			int err = errno ? errno : ENODEV;
			snprintf(p->err, sizeof(p->err), "rdma_malloc_default_pd: %s", strerror(err));
			return err;
		}
	}
	return open_pair(p, pd, NULL);
}

int e2e_pair_open_hosts(struct e2e_pair *p, struct ibv_pd *pd, struct ibv_pd *peer_pd)
{
	memset(p, 0, sizeof(*p));
	return open_pair(p, pd, peer_pd);
}

int e2e_pair_reset(struct e2e_pair *p)
{
	destroy_qps(p);
	return create_qps(p);
}

void e2e_pair_close(struct e2e_pair *p)
{
	destroy_qps(p);
	p->pd = NULL;
	p->peer.pd = NULL;
}

/* ---------------------------------------------------------------- posts */

static int post_send_wr(struct e2e_pair *p, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	wr->send_flags |= IBV_SEND_SIGNALED;
	int err = ibv_post_send(p->qp[0], wr, &bad);
	if (err)
		snprintf(p->err, sizeof(p->err), "ibv_post_send (opcode %d): %s", wr->opcode,
			 strerror(err));
	return err;
}

int e2e_post_write(struct e2e_pair *p, const void *local, size_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};
	return post_send_wr(p, &wr);
}

int e2e_post_read(struct e2e_pair *p, void *local, size_t len, uint32_t lkey,
		  uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		.wr.rdma = { .remote_addr = raddr, .rkey = rkey },
	};
	return post_send_wr(p, &wr);
}

int e2e_post_send(struct e2e_pair *p, const void *local, size_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
	};
	return post_send_wr(p, &wr);
}

int e2e_post_recv(struct e2e_pair *p, void *local, size_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad = NULL;
	int err = ibv_post_recv(p->qp[1], &wr, &bad);
	if (err)
		snprintf(p->err, sizeof(p->err), "ibv_post_recv: %s", strerror(err));
	return err;
}

int e2e_post_fetch_add(struct e2e_pair *p, uint64_t *result, uint32_t lkey,
		       uint64_t raddr, uint32_t rkey, uint64_t add, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
		.wr.atomic = { .remote_addr = raddr, .compare_add = add, .rkey = rkey },
	};
	return post_send_wr(p, &wr);
}

int e2e_post_cmp_swap(struct e2e_pair *p, uint64_t *result, uint32_t lkey,
		      uint64_t raddr, uint32_t rkey, uint64_t compare, uint64_t swap,
		      uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
		.wr.atomic = { .remote_addr = raddr, .compare_add = compare, .swap = swap,
			       .rkey = rkey },
	};
	return post_send_wr(p, &wr);
}

int e2e_wait(struct e2e_pair *p, int side, struct ibv_wc *wc, int timeout_ms)
{
	struct ibv_wc local;
	if (!wc)
		wc = &local;
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	unsigned spins = 0;
	for (;;) {
		int n = ibv_poll_cq(p->cq[side], 1, wc);
		if (n > 0)
			return (int)wc->status;
		if (n < 0) {
			snprintf(p->err, sizeof(p->err), "ibv_poll_cq: %d", n);
			return E2E_ST_POST;
		}
		if ((++spins & 63) == 0) {
			if (now_ms() >= deadline) {
				snprintf(p->err, sizeof(p->err), "no completion on CQ %d within %d ms",
					 side, timeout_ms);
				return E2E_ST_TIMEOUT;
			}
			/* Soft-RoCE runs in the kernel on the same CPUs. */
			poll(NULL, 0, 0);
		}
	}
}

/* ---------------------------------------------------------------- transfers */

/* Post @len bytes as pieces of at most max_msg, at most SQ_DEPTH/2 in flight;
 * wait for them all.  Return the first failure. */
static int transfer(struct e2e_pair *p, enum ibv_wr_opcode op, uintptr_t local, uint32_t lkey,
		    uint64_t raddr, uint32_t rkey, size_t len)
{
	size_t off = 0, inflight = 0;
	bool posted = false, stop = false;
	int first = IBV_WC_SUCCESS;
	for (;;) {
		while (!stop && inflight < SQ_DEPTH / 2 && (off < len || !posted)) {
			size_t n = len - off < p->max_msg ? len - off : p->max_msg;
			int err = op == IBV_WR_RDMA_WRITE
					  ? e2e_post_write(p, (void *)(local + off), n, lkey, raddr + off,
							   rkey, off)
					  : e2e_post_read(p, (void *)(local + off), n, lkey, raddr + off,
							  rkey, off);
			if (err) {
				if (first == IBV_WC_SUCCESS)
					first = E2E_ST_POST;
				stop = true;
				break;
			}
			posted = true;
			inflight++;
			off += n;
		}
		if (!inflight)
			break;
		int st = e2e_wait(p, 0, NULL, E2E_WC_TIMEOUT_MS);
		if (st == E2E_ST_TIMEOUT || st == E2E_ST_POST)
			return first == IBV_WC_SUCCESS ? st : first;
		inflight--;
		if (st != IBV_WC_SUCCESS) {
			if (first == IBV_WC_SUCCESS)
				first = st;
			stop = true; /* the QP is in error: the rest is flushed */
		}
	}
	return first;
}

/* Keys of @buf under @pd: the requester's PD for its local buffers, the
 * peer's for what the peer is reached through. */
static int keys_of(struct e2e_pair *p, struct ibv_pd *pd, const void *buf, size_t len, uint32_t *lkey,
		   uint32_t *rkey, const char *what)
{
	int err = rdma_malloc_keys(buf, len, pd, lkey, rkey);
	if (err) {
		snprintf(p->err, sizeof(p->err), "rdma_malloc_keys(%s %p, %zu): %s", what, buf, len,
			 strerror(err));
		return E2E_ST_KEYS;
	}
	return 0;
}

int e2e_write(struct e2e_pair *p, void *remote_dst, const void *local_src, size_t len)
{
	uint32_t lkey, rkey;
	if (keys_of(p, p->pd, local_src, len, &lkey, NULL, "source") ||
	    keys_of(p, p->peer.pd, remote_dst, len, NULL, &rkey, "target"))
		return E2E_ST_KEYS;
	return transfer(p, IBV_WR_RDMA_WRITE, (uintptr_t)local_src, lkey, (uintptr_t)remote_dst,
			rkey, len);
}

int e2e_read(struct e2e_pair *p, void *local_dst, const void *remote_src, size_t len)
{
	uint32_t lkey, rkey;
	if (keys_of(p, p->pd, local_dst, len, &lkey, NULL, "destination") ||
	    keys_of(p, p->peer.pd, remote_src, len, NULL, &rkey, "remote source"))
		return E2E_ST_KEYS;
	return transfer(p, IBV_WR_RDMA_READ, (uintptr_t)local_dst, lkey, (uintptr_t)remote_src,
			rkey, len);
}

int e2e_write_raw(struct e2e_pair *p, const void *local_src, size_t len, uint64_t raddr,
		  uint32_t rkey)
{
	uint32_t lkey;
	if (keys_of(p, p->pd, local_src, len, &lkey, NULL, "source"))
		return E2E_ST_KEYS;
	return transfer(p, IBV_WR_RDMA_WRITE, (uintptr_t)local_src, lkey, raddr, rkey, len);
}

int e2e_send_recv(struct e2e_pair *p, void *dst, size_t dst_len, const void *src, size_t len,
		  size_t *received)
{
	uint32_t slkey, rlkey;
	if (keys_of(p, p->pd, src, len, &slkey, NULL, "send buffer") ||
	    keys_of(p, p->peer.pd, dst, dst_len, &rlkey, NULL, "receive buffer"))
		return E2E_ST_KEYS;
	if (e2e_post_recv(p, dst, dst_len, rlkey, 2))
		return E2E_ST_POST;
	if (e2e_post_send(p, src, len, slkey, 1))
		return E2E_ST_POST;
	struct ibv_wc wc;
	int st = e2e_wait(p, 0, &wc, E2E_WC_TIMEOUT_MS);
	int rst = e2e_wait(p, 1, &wc, st == IBV_WC_SUCCESS ? E2E_WC_TIMEOUT_MS : 1000);
	if (received)
		*received = rst == IBV_WC_SUCCESS ? wc.byte_len : 0;
	return st != IBV_WC_SUCCESS ? st : rst;
}

static int atomic_op(struct e2e_pair *p, uint64_t *remote, bool cas, uint64_t a, uint64_t b,
		     uint64_t *old)
{
	uint32_t rkey, lkey;
	uint64_t *res = rdma_aligned_alloc(8, 8);
	if (!res) {
		snprintf(p->err, sizeof(p->err), "rdma_aligned_alloc(8, 8): %s", strerror(errno));
		return E2E_ST_KEYS;
	}
	*res = 0xdeadbeefdeadbeefull;
	int st;
	if (keys_of(p, p->pd, res, 8, &lkey, NULL, "atomic result") ||
	    keys_of(p, p->peer.pd, remote, 8, NULL, &rkey, "atomic target")) {
		st = E2E_ST_KEYS;
	} else {
		int err = cas ? e2e_post_cmp_swap(p, res, lkey, (uintptr_t)remote, rkey, a, b, 7)
			      : e2e_post_fetch_add(p, res, lkey, (uintptr_t)remote, rkey, a, 7);
		st = err ? E2E_ST_POST : e2e_wait(p, 0, NULL, E2E_WC_TIMEOUT_MS);
	}
	if (old)
		*old = *res;
	rdma_free(res);
	return st;
}

int e2e_fetch_add(struct e2e_pair *p, uint64_t *remote, uint64_t add, uint64_t *old)
{
	return atomic_op(p, remote, false, add, 0, old);
}

int e2e_cmp_swap(struct e2e_pair *p, uint64_t *remote, uint64_t compare, uint64_t swap,
		 uint64_t *old)
{
	return atomic_op(p, remote, true, compare, swap, old);
}

/* ---------------------------------------------------------------- patterns */

void e2e_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *b = buf;
	for (size_t i = 0; i < len; i++)
		b[i] = e2e_pattern_byte(i, seed);
}

size_t e2e_check(const void *buf, size_t len, uint32_t seed, size_t *ndiff)
{
	const uint8_t *b = buf;
	size_t first = E2E_NO_DIFF, n = 0;
	uint8_t want[4096];
	for (size_t off = 0; off < len; off += sizeof(want)) {
		size_t m = len - off < sizeof(want) ? len - off : sizeof(want);
		for (size_t i = 0; i < m; i++)
			want[i] = e2e_pattern_byte(off + i, seed);
		if (memcmp(b + off, want, m) == 0)
			continue;
		for (size_t i = 0; i < m; i++) {
			if (b[off + i] != want[i]) {
				if (first == E2E_NO_DIFF)
					first = off + i;
				n++;
			}
		}
	}
	if (ndiff)
		*ndiff = n;
	return first;
}

size_t e2e_compare(const void *a, const void *b, size_t len, size_t *ndiff)
{
	const uint8_t *x = a, *y = b;
	size_t first = E2E_NO_DIFF, n = 0;
	for (size_t off = 0; off < len; off += 4096) {
		size_t m = len - off < 4096 ? len - off : 4096;
		if (memcmp(x + off, y + off, m) == 0)
			continue;
		for (size_t i = off; i < off + m; i++) {
			if (x[i] != y[i]) {
				if (first == E2E_NO_DIFF)
					first = i;
				n++;
			}
		}
	}
	if (ndiff)
		*ndiff = n;
	return first;
}

size_t e2e_check_const(const void *buf, size_t len, uint8_t c, size_t *ndiff)
{
	const uint8_t *b = buf;
	size_t first = E2E_NO_DIFF, n = 0;
	for (size_t i = 0; i < len; i++) {
		if (b[i] != c) {
			if (first == E2E_NO_DIFF)
				first = i;
			n++;
		}
	}
	if (ndiff)
		*ndiff = n;
	return first;
}

void e2e_exec_memlock_child(const char *exe, const char *mode, unsigned long long limit, int setup_status)
{
	struct rlimit rl = { (rlim_t)limit, (rlim_t)limit };
	if (setrlimit(RLIMIT_MEMLOCK, &rl)) {
		dprintf(1, "child: setrlimit(RLIMIT_MEMLOCK, %llu): %s\n", limit, strerror(errno));
		_exit(setup_status);
	}
	if (geteuid() == 0 && prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0)) {
		dprintf(1, "child: dropping CAP_IPC_LOCK from the bounding set: %s\n", strerror(errno));
		_exit(setup_status);
	}
	setenv("RDMALLOC_E2E_CHILD", mode, 1);
	execl(exe, exe, (char *)NULL);
	dprintf(1, "child: exec %s: %s\n", exe, strerror(errno));
	_exit(setup_status);
}

int e2e_ipc_lock_effective(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return -1;
	char line[256];
	int r = -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "CapEff:", 7) == 0) {
			unsigned long long eff = strtoull(line + 7, NULL, 16);
			r = (eff >> CAP_IPC_LOCK) & 1;
			break;
		}
	fclose(f);
	return r;
}
