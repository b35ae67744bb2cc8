/* SPDX-License-Identifier: MIT */
/*
 * rdma_malloc.h - memory that is already registered for RDMA.
 *
 * rdmalloc is a malloc whose memory comes from chunks that were registered
 * with ibv_reg_mr() when the allocator created them.  Any pointer it returned
 * maps to its lkey/rkey in constant time, with no system call and no lock:
 *
 *     char *buf = rdma_malloc(4096);
 *     uint32_t lkey, rkey;
 *     if (rdma_malloc_keys(buf, 4096, NULL, &lkey, &rkey) == 0)
 *             ... post a work request with { buf, 4096, lkey } ...
 *     rdma_free(buf);
 *
 * Conventions (those of libibverbs):
 *  - functions returning a pointer return NULL and set errno on failure;
 *  - functions returning int return 0 or a positive errno value (errno
 *    itself may change; rdma_malloc_keys() and rdma_posix_memalign() leave
 *    it alone).
 * Allocation functions leave errno alone when they succeed.
 *
 * Thread safety: every function may be called from any thread at any time,
 * except where a comment says otherwise (heap destruction, PD detach).
 *
 * Configuration comes from RDMALLOC_* environment variables, read once at
 * first use; see rdmalloc(7) / doc/options.md.
 */
#ifndef RDMA_MALLOC_H
#define RDMA_MALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ibv_pd;
struct ibv_mr;

#define RDMA_MALLOC_VERSION_MAJOR 0
#define RDMA_MALLOC_VERSION_MINOR 1

#if defined(__GNUC__)
#define RDMA_MALLOC_ATTR_MALLOC __attribute__((malloc))
#define RDMA_MALLOC_ATTR_SIZE(...) __attribute__((alloc_size(__VA_ARGS__)))
#define RDMA_MALLOC_ATTR_ALIGN(n) __attribute__((alloc_align(n)))
#define RDMA_MALLOC_ATTR_NODISCARD __attribute__((warn_unused_result))
#else
#define RDMA_MALLOC_ATTR_MALLOC
#define RDMA_MALLOC_ATTR_SIZE(...)
#define RDMA_MALLOC_ATTR_ALIGN(n)
#define RDMA_MALLOC_ATTR_NODISCARD
#endif

/* ------------------------------------------------------------------------
 * Allocation in the default heap.
 *
 * The C semantics of malloc(3) and friends: NULL with errno ENOMEM when
 * memory (or its registration) cannot be had, EINVAL for an alignment that is
 * not a power of two (or, for rdma_posix_memalign, not a multiple of
 * sizeof(void *)).  A size of 0 returns a unique pointer that may be freed.
 * The default heap's access flags come from RDMALLOC_ACCESS (default
 * LOCAL_WRITE,REMOTE_READ,REMOTE_WRITE,REMOTE_ATOMIC: buffers meant for RDMA).
 * ------------------------------------------------------------------------ */

/** rdma_malloc - allocate @size bytes of registered memory. */
void *rdma_malloc(size_t size) RDMA_MALLOC_ATTR_MALLOC RDMA_MALLOC_ATTR_SIZE(1);

/** rdma_calloc - zeroed array of @nmemb * @size bytes; overflow is ENOMEM. */
void *rdma_calloc(size_t nmemb, size_t size) RDMA_MALLOC_ATTR_MALLOC
	RDMA_MALLOC_ATTR_SIZE(1, 2);

/**
 * rdma_realloc - resize @ptr to @size bytes, keeping its heap.
 *
 * @ptr NULL is rdma_malloc(@size); @size 0 is treated as 1 (the result is
 * a valid minimal allocation, possibly @ptr itself).  On failure @ptr is
 * left untouched.
 * The memory may move: keys must be looked up again for the new pointer.
 */
void *rdma_realloc(void *ptr, size_t size) RDMA_MALLOC_ATTR_SIZE(2)
	RDMA_MALLOC_ATTR_NODISCARD;

/** rdma_aligned_alloc - @size bytes aligned to @alignment (a power of two). */
void *rdma_aligned_alloc(size_t alignment, size_t size) RDMA_MALLOC_ATTR_MALLOC
	RDMA_MALLOC_ATTR_ALIGN(1) RDMA_MALLOC_ATTR_SIZE(2);

/**
 * rdma_posix_memalign - posix_memalign(3) on registered memory.
 *
 * Returns 0, EINVAL (bad alignment) or ENOMEM; *@memptr is set only on
 * success.
 */
int rdma_posix_memalign(void **memptr, size_t alignment, size_t size);

/**
 * rdma_free - free memory from any rdmalloc heap.  NULL is a no-op.
 *
 * A pointer that did not come from rdmalloc is a fatal error: the process is
 * aborted with a message, as glibc does for an invalid free().
 */
void rdma_free(void *ptr);

/** rdma_malloc_usable_size - bytes usable at @ptr (0 for NULL). */
size_t rdma_malloc_usable_size(const void *ptr);

/* ------------------------------------------------------------------------
 * Key lookup.
 *
 * Constant time, lock-free and free of system calls: three dependent loads
 * (two table levels and the chunk descriptor).  Safe while other threads
 * allocate and free.  @len 0 is treated as 1.
 *
 * A region covers one whole chunk of one heap, so a key grants the peer
 * access to the whole chunk, not only to [ptr, ptr+len).  Give remote access
 * flags only to heaps whose every byte peers may see (see doc/security.md).
 * ------------------------------------------------------------------------ */

/**
 * rdma_malloc_mr - the memory region registered with @pd covering
 * [@ptr, @ptr+@len).
 *
 * @pd: an attached protection domain, or NULL for the default PD.
 *
 * Return: the region, or NULL with errno:
 *  ENOENT  @ptr is not rdmalloc memory;
 *  ERANGE  @ptr is, but [@ptr, @ptr+@len) runs past its region;
 *  ENODEV  @pd is not attached (or, for NULL, there is no default PD).
 * The region stays valid until its chunk is released (rdma_heap_destroy) or
 * @pd is detached.  Do not deregister it.
 */
struct ibv_mr *rdma_malloc_mr(const void *ptr, size_t len, struct ibv_pd *pd);

/**
 * rdma_malloc_keys - the lkey and rkey of [@ptr, @ptr+@len) under @pd.
 *
 * Same lookup as rdma_malloc_mr().  @lkey and @rkey may each be NULL.
 * Return: 0 or ENOENT, ERANGE, ENODEV as for rdma_malloc_mr().
 */
int rdma_malloc_keys(const void *ptr, size_t len, struct ibv_pd *pd,
		     uint32_t *lkey, uint32_t *rkey);

/* ------------------------------------------------------------------------
 * Protection domains.
 *
 * Every chunk is registered with every attached PD (with the access flags of
 * its heap), so one pointer has one key per PD.  The library opens a default
 * PD itself, on the device named by RDMALLOC_DEVICE or else the first device
 * with an active port.
 * ------------------------------------------------------------------------ */

/**
 * rdma_malloc_default_pd - the PD the library opened itself.
 *
 * Return: the PD, or NULL with errno ENODEV when no usable device was found
 * (the reason is logged once and visible in the stats).
 */
struct ibv_pd *rdma_malloc_default_pd(void);

/**
 * rdma_malloc_attach_pd - register every existing and future chunk with @pd.
 *
 * All or nothing: when one registration fails, those already done for @pd
 * are undone.  At most RDMA_MALLOC_MAX_PDS PDs are attached at once.
 * Return: 0, EINVAL (@pd NULL), EEXIST (already attached), ENOSPC (too many
 * PDs), or the errno of the failed ibv_reg_mr().
 */
int rdma_malloc_attach_pd(struct ibv_pd *pd);

/**
 * rdma_malloc_detach_pd - deregister every chunk from @pd.
 *
 * The caller must have no work request in flight that uses keys of @pd, and
 * must not look up keys of @pd concurrently.  The default PD may be detached
 * too; NULL-PD lookups then fail with ENODEV.
 * Return: 0, ENODEV (not attached), or the errno of the first failed
 * ibv_dereg_mr() (the PD is detached all the same; the failure is counted).
 */
int rdma_malloc_detach_pd(struct ibv_pd *pd);

#define RDMA_MALLOC_MAX_PDS 8

/* ------------------------------------------------------------------------
 * Heaps.
 *
 * A heap is an arena of its own with one set of access flags: memory peers
 * may write lives apart from memory they may not.  Each thread keeps one
 * cache per heap, so a heap's memory never reaches another heap.
 * rdma_free() and rdma_malloc_usable_size() take memory of any heap.
 * ------------------------------------------------------------------------ */

typedef struct rdma_heap rdma_heap_t;

struct rdma_heap_attr {
	/** IBV_ACCESS_* flags every chunk of the heap is registered with. */
	unsigned int access;
	/** Reserved, must be 0. */
	unsigned int flags;
};

#define RDMA_MALLOC_MAX_HEAPS 128

/**
 * rdma_heap_create - a new heap.
 *
 * @attr NULL gives the default heap's access flags.
 * Return: the heap, or NULL with errno EINVAL (unknown access bits, remote
 * write or atomic access without LOCAL_WRITE, or flags not 0) or EAGAIN
 * (RDMA_MALLOC_MAX_HEAPS heaps alive, or jemalloc has no arena left).
 */
rdma_heap_t *rdma_heap_create(const struct rdma_heap_attr *attr);

/**
 * rdma_heap_destroy - free every allocation of @heap at once, deregister and
 * unmap its chunks.
 *
 * No other thread may use @heap or its memory during or after the call; no
 * work request may still use its keys.  Like a freed pointer, @heap must not
 * be used again: a second destroy is refused with EINVAL only as long as no
 * new heap has taken its place.  The default heap (or NULL) is refused.
 * Return: 0 or EINVAL.
 */
int rdma_heap_destroy(rdma_heap_t *heap);

/** rdma_heap_default - the heap rdma_malloc() allocates from. */
rdma_heap_t *rdma_heap_default(void);

/** rdma_heap_access - the IBV_ACCESS_* flags of @heap (NULL: default). */
unsigned int rdma_heap_access(const rdma_heap_t *heap);

void *rdma_heap_malloc(rdma_heap_t *heap, size_t size) RDMA_MALLOC_ATTR_MALLOC
	RDMA_MALLOC_ATTR_SIZE(2);
void *rdma_heap_calloc(rdma_heap_t *heap, size_t nmemb, size_t size)
	RDMA_MALLOC_ATTR_MALLOC RDMA_MALLOC_ATTR_SIZE(2, 3);
/**
 * rdma_heap_realloc - as rdma_realloc(), but the result lives in @heap; a
 * @ptr of another heap is moved (copied and freed).
 */
void *rdma_heap_realloc(rdma_heap_t *heap, void *ptr, size_t size)
	RDMA_MALLOC_ATTR_SIZE(3) RDMA_MALLOC_ATTR_NODISCARD;
void *rdma_heap_aligned_alloc(rdma_heap_t *heap, size_t alignment, size_t size)
	RDMA_MALLOC_ATTR_MALLOC RDMA_MALLOC_ATTR_ALIGN(2) RDMA_MALLOC_ATTR_SIZE(3);

/* ------------------------------------------------------------------------
 * Statistics.
 *
 * Every counter is defined once, here.  X(name, kind, description) where
 * kind is "gauge" (a current value) or "counter" (a total since start).
 * ------------------------------------------------------------------------ */

#define RDMA_MALLOC_STATS_FIELDS(X)                                                  \
	X(chunks, gauge, "chunks held (each registered with every attached PD)")    \
	X(chunk_bytes, gauge, "bytes in chunks held")                               \
	X(unregistered_chunks, gauge, "chunks held with no registration (no PD)")   \
	X(live_bytes, gauge, "bytes in live allocations (jemalloc's count)")        \
	X(registered_bytes, gauge, "bytes under live registrations, summed over PDs") \
	X(mrs, gauge, "live memory regions")                                        \
	X(heaps, gauge, "heaps alive, the default heap included")                   \
	X(pds, gauge, "protection domains attached")                                \
	X(registrations, counter, "ibv_reg_mr calls that succeeded")                \
	X(registration_failures, counter, "ibv_reg_mr calls that failed")          \
	X(registration_ns, counter, "nanoseconds spent in ibv_reg_mr")              \
	X(deregistrations, counter, "ibv_dereg_mr calls that succeeded")            \
	X(deregistration_failures, counter, "ibv_dereg_mr calls that failed")      \
	X(limit_refusals, counter, "chunks refused by RDMALLOC_MAX_REGISTERED")     \
	X(purges_refused, counter, "purge/decommit/unmap requests refused on held chunks") \
	X(lookups, counter, "key lookups that succeeded")                           \
	X(lookup_failures, counter, "key lookups that failed (ENOENT/ERANGE/ENODEV)") \
	X(tcache_fallbacks, counter, "threads that had to run a heap uncached")    \
	X(elided_registrations, counter, "ibv_reg_mr calls of the program answered from a chunk (LD_PRELOAD)") \
	X(passthrough_registrations, counter, "ibv_reg_mr calls of the program passed to libibverbs (LD_PRELOAD)") \
	X(fallbacks, counter, "fallbacks taken (each also logged once)")

#define RDMA_MALLOC_STATS_VERSION 1

struct rdma_malloc_stats {
	/** Set by the caller to RDMA_MALLOC_STATS_VERSION. */
	uint32_t version;
	/** Set by the caller to sizeof(struct rdma_malloc_stats). */
	uint32_t size;
#define RDMA_MALLOC_STATS_MEMBER_(name, kind, desc) uint64_t name;
	RDMA_MALLOC_STATS_FIELDS(RDMA_MALLOC_STATS_MEMBER_)
#undef RDMA_MALLOC_STATS_MEMBER_
};

/**
 * rdma_malloc_stats_get - fill @stats (version and size set by the caller).
 * Return: 0, or EINVAL for a NULL @stats or an unknown version/size.
 */
int rdma_malloc_stats_get(struct rdma_malloc_stats *stats);

enum rdma_malloc_stats_format {
	RDMA_MALLOC_STATS_TEXT = 0,
	RDMA_MALLOC_STATS_JSON = 1,
};

/**
 * rdma_malloc_stats_print - print the current stats to @out (NULL: stderr).
 * Return: 0, EINVAL (unknown format) or the errno of a failed write.
 */
int rdma_malloc_stats_print(FILE *out, enum rdma_malloc_stats_format format);

#ifdef __cplusplus
}
#endif

#endif /* RDMA_MALLOC_H */
