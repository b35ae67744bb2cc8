/* SPDX-License-Identifier: MIT */
/*
 * rdma_env.h - the end-to-end suite's verbs layer.
 *
 * Two RC QPs on one PD of the device rdmalloc uses, connected to each other
 * through the loopback RoCE v2 GID (::ffff:127.0.0.1); or on two devices
 * (e2e_pair_open_hosts).  qp[0] is the requester, qp[1] the responder (the
 * "peer").  Every lkey and rkey comes
 * from rdma_malloc_keys(): this suite never registers memory itself.
 * Completions are polled with a deadline: nothing here can hang.
 */
#ifndef RDMALLOC_E2E_RDMA_ENV_H
#define RDMALLOC_E2E_RDMA_ENV_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

#define E2E_SKIP_MSG "no RDMA device (run in the Soft-RoCE guest: tools/rdmalloc-vm -- ...)"

/* Deadline of one completion. */
#define E2E_WC_TIMEOUT_MS 10000

/* Statuses returned besides enum ibv_wc_status (all negative). */
enum {
	E2E_ST_TIMEOUT = -1, /* no completion before the deadline */
	E2E_ST_POST = -2,    /* ibv_post_* refused the work request */
	E2E_ST_KEYS = -3,    /* rdma_malloc_keys() refused a buffer */
};

/* One end: qp[0]'s (the requester) or qp[1]'s (the peer). */
struct e2e_end {
	struct ibv_pd *pd;
	struct ibv_context *ctx;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
};

struct e2e_pair {
	/* The requester's end, also the peer's on loopback (e2e_pair_open). */
	struct ibv_pd *pd;
	struct ibv_context *ctx;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
	/* The peer's end: a copy of the above on loopback; the other device
	 * with e2e_pair_open_hosts().  Keys of memory the peer is reached
	 * through (remote targets, receive buffers) come under peer.pd. */
	struct e2e_end peer;
	enum ibv_mtu mtu;
	uint32_t max_msg;       /* largest message of the port */
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	char err[256];          /* why the last call failed */
};

/*
 * Open a connected pair on @pd (NULL: rdmalloc's default PD).
 * Return: 0; ENODEV when there is no device (rdma_malloc_default_pd() NULL);
 * another errno with @p->err saying what failed.
 */
int e2e_pair_open(struct e2e_pair *p, struct ibv_pd *pd);
/*
 * Open a pair across two devices: qp[0] on @pd (requester), qp[1] on
 * @peer_pd, each through its own device's IPv4-mapped GID, so that traffic
 * crosses whatever links the two devices (the guest's veth pair with
 * tools/rdmalloc-vm --hosts 2).  Both PDs must be attached to rdmalloc.
 * Return as e2e_pair_open().
 */
int e2e_pair_open_hosts(struct e2e_pair *p, struct ibv_pd *pd, struct ibv_pd *peer_pd);
/* Destroy and recreate the QPs and CQs (after a QP went to the error state). */
int e2e_pair_reset(struct e2e_pair *p);
void e2e_pair_close(struct e2e_pair *p);

/* Work requests.  Each is signaled with @wr_id; 0 or the errno of ibv_post_*. */
int e2e_post_write(struct e2e_pair *p, const void *local, size_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey, uint64_t wr_id);
int e2e_post_read(struct e2e_pair *p, void *local, size_t len, uint32_t lkey,
		  uint64_t raddr, uint32_t rkey, uint64_t wr_id);
int e2e_post_send(struct e2e_pair *p, const void *local, size_t len, uint32_t lkey, uint64_t wr_id);
/* Receives are posted on the peer, qp[1]. */
int e2e_post_recv(struct e2e_pair *p, void *local, size_t len, uint32_t lkey, uint64_t wr_id);
int e2e_post_fetch_add(struct e2e_pair *p, uint64_t *result, uint32_t lkey,
		       uint64_t raddr, uint32_t rkey, uint64_t add, uint64_t wr_id);
int e2e_post_cmp_swap(struct e2e_pair *p, uint64_t *result, uint32_t lkey,
		      uint64_t raddr, uint32_t rkey, uint64_t compare, uint64_t swap,
		      uint64_t wr_id);

/*
 * Wait for one completion on side @side's CQ (0 requester, 1 peer), at most
 * @timeout_ms.  Return: its status (IBV_WC_SUCCESS == 0, ...) or
 * E2E_ST_TIMEOUT.  @wc (may be NULL) receives the completion.
 */
int e2e_wait(struct e2e_pair *p, int side, struct ibv_wc *wc, int timeout_ms);

/*
 * Whole transfers, split into messages the port accepts; keys come from
 * rdma_malloc_keys() under @p->pd.  Return IBV_WC_SUCCESS or the first
 * failing status (an ibv_wc_status or E2E_ST_*).
 */
int e2e_write(struct e2e_pair *p, void *remote_dst, const void *local_src, size_t len);
int e2e_read(struct e2e_pair *p, void *local_dst, const void *remote_src, size_t len);
/* RDMA WRITE to an explicit (possibly stale or forbidden) remote address/key. */
int e2e_write_raw(struct e2e_pair *p, const void *local_src, size_t len, uint64_t raddr,
		  uint32_t rkey);
/* SEND of @len bytes from @src into @dst (a RECV posted on the peer first);
 * *@received gets the byte count of the receive completion. */
int e2e_send_recv(struct e2e_pair *p, void *dst, size_t dst_len, const void *src, size_t len,
		  size_t *received);
/* One atomic on the 8-byte word @remote; *@old gets the value it held. */
int e2e_fetch_add(struct e2e_pair *p, uint64_t *remote, uint64_t add, uint64_t *old);
int e2e_cmp_swap(struct e2e_pair *p, uint64_t *remote, uint64_t compare, uint64_t swap,
		 uint64_t *old);

/* ibv_wc_status_str() extended to E2E_ST_*. */
const char *e2e_status_str(int status);

/* ---- patterned data: every byte a function of (offset, seed) ---- */

static inline uint8_t e2e_pattern_byte(size_t off, uint32_t seed)
{
	uint64_t x = ((uint64_t)off + 1) * 0x9E3779B97F4A7C15ull ^
		     ((uint64_t)seed + 1) * 0xD1B54A32D192ED03ull;
	x ^= x >> 29;
	return (uint8_t)(x >> 56);
}

void e2e_fill(void *buf, size_t len, uint32_t seed);
/* Offset of the first byte of @buf that is not the pattern, or (size_t)-1.
 * *@ndiff (may be NULL) gets the number of differing bytes. */
size_t e2e_check(const void *buf, size_t len, uint32_t seed, size_t *ndiff);
/* Offset of the first byte where @a and @b differ, or (size_t)-1 (memcmp
 * speed); *@ndiff (may be NULL) gets the number of differing bytes. */
size_t e2e_compare(const void *a, const void *b, size_t len, size_t *ndiff);
/* Same against a constant byte. */
size_t e2e_check_const(const void *buf, size_t len, uint8_t c, size_t *ndiff);

#define E2E_NO_DIFF ((size_t)-1)

/*
 * Memlock children.  Root's CAP_IPC_LOCK ignores RLIMIT_MEMLOCK, so a
 * child started by root drops that capability from its bounding set (its
 * exec then cannot have it) instead of becoming another user, who might
 * not be able to reach the executable (a clone under /root, 0700).
 * e2e_exec_memlock_child: in a fork child, set RLIMIT_MEMLOCK to @limit,
 * drop CAP_IPC_LOCK, set RDMALLOC_E2E_CHILD=@mode and exec @exe; on any
 * failure, say why on stdout (unbuffered) and _exit(@setup_status).
 * e2e_ipc_lock_effective: 1 if this process still has CAP_IPC_LOCK (the
 * child checks it before trusting the limit), 0 if not, -1 unknown.
 */
void e2e_exec_memlock_child(const char *exe, const char *mode, unsigned long long limit, int setup_status);
int e2e_ipc_lock_effective(void);

#endif
