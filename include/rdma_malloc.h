/* SPDX-License-Identifier: MIT */
/*
 * rdma_malloc.h - memory that is already registered for RDMA.
 *
 * rdmalloc is a malloc whose memory comes from chunks that were registered
 * with ibv_reg_mr() when the allocator created them.  Any pointer it returned
 * maps to its lkey/rkey in constant time, with no system call and no lock
 * (but once per thread, rdma_malloc_keys(3)):
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
struct ibv_qp;
struct ibv_mw;

/*
 * The version of this header; rdma_malloc_version() tells the library's.
 * The ABI and how it may change between versions: doc/abi.md.  A function
 * added after 0.1 says "Since 0.N" in its comment.
 */
#define RDMA_MALLOC_VERSION_MAJOR 0
#define RDMA_MALLOC_VERSION_MINOR 2
#define RDMA_MALLOC_VERSION_PATCH 0

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
 * An allocation from a pthread key destructor that runs after the library's
 * allocator has cleaned its thread up is a chunk of its own (a page at
 * least; ENOMEM from an ODP heap), counted in fallbacks.
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
 * Returns 0, EINVAL (@memptr NULL, or a bad alignment) or ENOMEM; *@memptr
 * is set only on success.
 */
int rdma_posix_memalign(void **memptr, size_t alignment, size_t size);

/**
 * rdma_free - free memory from any rdmalloc heap.  NULL is a no-op.
 *
 * A pointer that did not come from rdmalloc is a fatal error: the process is
 * aborted with a message, as glibc does for an invalid free().  So is a
 * block that is free already (a double free, with or without allocations
 * between, or the old pointer after rdma_realloc() moved the block), and
 * rdma_realloc() of one: rdma_free writes a random word of
 * the process into the block's first 8 bytes, and every allocation clears
 * it, as glibc's tcache does; a second free after the block's memory was
 * given back (rdma_malloc_trim, the decay) is caught from the pages not in
 * use, until jemalloc uses the page again.
 * A block freed, handed out again and freed by its two owners is not
 * caught.  The drop-in's free() checks the same way
 * with RDMALLOC_CHECK_FREE=1 (rdmalloc(7)); without it, memory of the
 * drop-in's malloc is not checked, whichever call frees it.
 */
void rdma_free(void *ptr);

/** rdma_malloc_usable_size - bytes usable at @ptr (0 for NULL). */
size_t rdma_malloc_usable_size(const void *ptr);

/**
 * rdma_malloc_version - the version of the library the program runs with
 * (which may be newer than the header it was built with).  Since 0.2.
 *
 * @major, @minor, @patch: set to its parts, each may be NULL.
 * Return: the version as a string, e.g. "0.2.0"; never NULL.  Needs no
 * initialisation: it opens no device and allocates nothing.
 */
const char *rdma_malloc_version(unsigned int *major, unsigned int *minor, unsigned int *patch);

/*
 * Giving memory back (doc/design.md, "Giving memory back").  A region
 * covers a whole chunk, so a chunk is pinned as long as one byte of it is
 * allocated; a block of RDMALLOC_BIG_BLOCK bytes (64 KiB) or more is a
 * chunk of its own, given back once freed for the decay time (sooner past
 * a bound: the most recently freed is kept, others up to an eighth of the
 * heap's big bytes in use).  Once every page of a chunk has been free for its heap's
 * decay time (RDMALLOC_DECAY_MS, or rdma_heap_attr.decay_ms), the chunk is
 * deregistered from every PD and its pages go back to the system; the
 * smallest such chunk of each heap is kept registered, against growing and
 * shrinking around one chunk.  Decay runs as the heap is used, and while
 * the program is idle the reserve's background thread ticks it (started
 * with the heap's first chunk or big block, RDMALLOC_RESERVE=0 too).
 * Blocks of up to 1 MiB a thread freed last stay in its cache until it
 * allocates again, or until the background thread flushes a cache its thread has not used for the decay
 * time.  A lookup of an address in a given-back chunk of an rdma_* heap
 * fails with ENOENT (the LD_PRELOAD drop-in's heap registers the chunk
 * again instead, with new keys), and its old keys are invalid: a peer's
 * RDMA access with them fails (remote access error) and changes no byte.
 * Memory allocated there later has new keys.  Never given back: a chunk with an
 * allocation, a memory window allocated on it (rdma_malloc_mw_grant()), or
 * an ibv_reg_mr() region the LD_PRELOAD drop-in answered from it.  When a
 * registration fails for want of memory (RLIMIT_MEMLOCK) or
 * RDMALLOC_MAX_REGISTERED, idle chunks are given back and it is tried once
 * more; when the allocation fails all the same, every free page is given
 * back as rdma_malloc_trim() does and the allocation is tried once more
 * (counted in pressure_trims) before it fails with ENOMEM.
 */

/**
 * rdma_malloc_trim - give back now every idle chunk of every heap (the
 * kept ones too), after flushing the calling thread's caches and
 * decommitting every free page, without waiting for the decay time.  Other
 * threads' caches keep what they hold.
 * Return: the bytes of chunks given back during the call (other threads'
 * give-backs meanwhile included).
 */
size_t rdma_malloc_trim(void);

/* ------------------------------------------------------------------------
 * Key lookup.
 *
 * Constant time, lock-free and free of system calls: three dependent loads
 * (two table levels and the chunk descriptor), and a per-thread counter
 * (a thread's first lookup, and its exit, take the counters' list lock
 * once).  Safe while other threads allocate, free, attach, detach or change
 * access flags: the lkey and rkey returned are always one region's pair,
 * of a region of @pd; a lookup that overlaps the attach or detach of @pd
 * returns its keys or ENODEV.  @len 0 is treated as 1.
 *
 * Under the LD_PRELOAD drop-in, memory of plain malloc() is registered with
 * a PD when it is first looked up there (RDMALLOC_PRELOAD_REGISTER): that
 * first lookup of a chunk takes the PD lock and calls ibv_reg_mr(), and
 * fails with ENOMEM when the registration is refused (RLIMIT_MEMLOCK,
 * RDMALLOC_MAX_REGISTERED).  Memory of the rdma_* heaps is registered when
 * it is allocated: its lookups never register.
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
 *  ENODEV  @pd is not attached (or, for NULL, there is no default PD);
 *  ENOMEM  the drop-in's first registration of @ptr's chunk with @pd was
 *          refused (see above).
 * The region stays valid until its chunk is released (rdma_heap_destroy)
 * or given back (its memory all freed), @pd is detached, or an access change replaces it (rdma_heap_set_access():
 * always on devices that refuse ibv_rereg_mr, such as rxe).  Do not
 * deregister it.  Where another thread may change the heap's access, use
 * rdma_malloc_keys(), which returns values, not a region.
 *
 * The rule for every key rdmalloc hands out (here, rdma_malloc_keys(), the
 * drop-in's elided ibv_reg_mr): it stays valid until the program lets go
 * of what it came from (frees the memory, detaches or deallocates the PD,
 * deregisters the elided region) or is told at a defined point: an access
 * change's callback (rdma_heap_set_access()).  Nothing else takes it away:
 * the drop-in never detaches a PD on its own once keys of it were handed
 * out, and refuses rdma_malloc_detach_pd() and rdma_heap_set_access() with
 * EBUSY while elided regions carry the keys they would change.
 */
struct ibv_mr *rdma_malloc_mr(const void *ptr, size_t len, struct ibv_pd *pd);

/**
 * rdma_malloc_keys - the lkey and rkey of [@ptr, @ptr+@len) under @pd.
 *
 * Same lookup as rdma_malloc_mr().  @lkey and @rkey may each be NULL.
 * Return: 0 or ENOENT, ERANGE, ENODEV, ENOMEM as for rdma_malloc_mr().
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
 * PDs), or the errno of the failed ibv_reg_mr().  Under the drop-in, 0 and
 * EEXIST make @pd the program's: the drop-in's elision, which may have
 * attached it, never detaches it (the program does, before
 * ibv_dealloc_pd()).
 */
int rdma_malloc_attach_pd(struct ibv_pd *pd);

/**
 * rdma_malloc_detach_pd - deregister every chunk from @pd.
 *
 * The caller must have no work request in flight that uses keys of @pd.
 * Lookups with @pd made meanwhile return its keys or ENODEV.  A chunk being
 * created meanwhile by another thread registers with @pd or not; either way
 * the call returns only once no registration with @pd is left or under way,
 * so ibv_dealloc_pd(@pd) may follow at once.  The default PD may be
 * detached too; NULL-PD lookups then fail with ENODEV.
 * Return: 0, ENODEV (@pd NULL or not attached), EBUSY (a memory window granted with
 * rdma_malloc_mw_grant() on one of its regions is not freed yet, or, under the
 * drop-in, an elided region of @pd is alive: nothing is done; free or
 * deregister it first), or EIO: the ibv_dereg_mr() of one of its regions
 * failed, in this call or in another since @pd was attached (a chunk given
 * back, a big block let go of): the PD is detached all the same, that
 * region stays registered, and its failure is logged with the provider's
 * errno and counted in deregistration_failures.
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

/*
 * How this struct grows (doc/abi.md): fields are only appended.
 * rdma_heap_create() is a macro that hands the library the size of the
 * struct the program was compiled with (rdma_heap_create_sized()): the
 * library reads the fields that size covers and takes 0 (the default) for
 * the others, so a program built against an older header keeps its
 * meaning; bytes past the struct this library knows must be 0 (a newer
 * program asking for something this library cannot do is refused).  So
 * initialise the struct whole (an initialiser, or memset), not field by
 * field: padding a newer header adds counts as such bytes.
 */
struct rdma_heap_attr {
	/** IBV_ACCESS_* flags every chunk of the heap is registered with. */
	unsigned int access;
	/** RDMA_HEAP_* bits below; every other bit must be 0. */
	unsigned int flags;
	/**
	 * Milliseconds free pages stay registered before the chunks they
	 * empty are given back: 0 for RDMALLOC_DECAY_MS (default 10000),
	 * -1 for never (only rdma_malloc_trim() gives back), else 1 to
	 * 1000000000 (1 is as near "at once" as a heap can ask; the option
	 * takes 0).  An RDMA_HEAP_ODP heap, which pins nothing, gives its
	 * free pages back to the kernel after this time (its chunks stay).
	 * Read since 0.2, through rdma_heap_create_sized(): a program built
	 * against a 0.1 header calls the 0.1 function rdma_heap_create(),
	 * which reads access and flags only (0.1 could not tell a struct
	 * with this field from one without it) and applies RDMALLOC_DECAY_MS.
	 */
	long decay_ms;
};

/*
 * Heap flags (doc/modes.md).  Bit 0 is reserved and refused.
 *
 * RDMA_HEAP_HUGEPAGES: chunks backed by huge pages, for fewer, larger
 * translation entries on the NIC: explicit 2 MiB pages (MAP_HUGETLB; 1 GiB
 * pages for chunks of 1 GiB or more) when the system has free ones, else
 * transparent huge pages (MADV_HUGEPAGE) on 2 MiB-aligned chunks, else
 * 4 KiB pages.  Each fallback is logged once and counted in the stats
 * (hugepage_fallbacks).  A chunk's mapping, and its registration, is
 * rounded up to whole pages of the size in use; jemalloc uses only the
 * bytes it asked for.  The default heap gets it from RDMALLOC_HUGEPAGES.
 *
 * RDMA_HEAP_MW_BIND: chunks are registered with IBV_ACCESS_MW_BIND as well,
 * so that memory windows can be bound on them (rdma_malloc_mw_grant()).
 * Such a heap usually has no remote access flags of its own: peers then
 * reach its memory only through windows.
 */
#define RDMA_HEAP_HUGEPAGES (1u << 1)
#define RDMA_HEAP_MW_BIND (1u << 2)
/*
 * RDMA_HEAP_ODP: chunks registered with IBV_ACCESS_ON_DEMAND (explicit ODP):
 * the NIC faults pages in through the kernel instead of pinning them, so
 * the heap gives freed pages back to the kernel after its decay time
 * (decay_ms; its chunks stay).  The default PD's device must report ODP
 * for RC with the operations the heap's access flags allow (ibv_query_device_ex(),
 * odp_caps), else rdma_heap_create() fails with EOPNOTSUPP.  Exclusive
 * with RDMA_HEAP_HUGEPAGES.
 *
 * RDMA_HEAP_ODP_IMPLICIT, given with RDMA_HEAP_ODP: instead of one region
 * per chunk, every chunk of every such heap shares one implicit ODP region
 * per PD and access flags, ibv_reg_mr(pd, NULL, SIZE_MAX,
 * IBV_ACCESS_ON_DEMAND | access), registered with the first chunk and
 * deregistered with the last: one registration per PD for the whole
 * process, one lkey for all of it.  That region covers the whole address
 * space, so its keys reach every byte of the process, not only the heap:
 * remote access flags are refused (EPERM), here and in
 * rdma_heap_set_access(); use RDMA_HEAP_ODP for memory peers may reach.
 * The device must also report IBV_ODP_SUPPORT_IMPLICIT, else EOPNOTSUPP.
 * Exclusive with RDMA_HEAP_MW_BIND and with IBV_ACCESS_MW_BIND in the access
 * flags (EINVAL, here and in rdma_heap_set_access()): a window could be
 * bound anywhere in the process.
 */
#define RDMA_HEAP_ODP (1u << 3)
#define RDMA_HEAP_ODP_IMPLICIT (1u << 4)

#define RDMA_MALLOC_MAX_HEAPS 128

/**
 * rdma_heap_create - a new heap.
 *
 * A macro: rdma_heap_create_sized(@attr, sizeof(struct rdma_heap_attr)).
 * The function of that name is the 0.1 one, kept for programs built
 * against a 0.1 header (see struct rdma_heap_attr); taking its address
 * gets that function, so a program that needs a pointer uses
 * rdma_heap_create_sized().
 * @attr NULL gives the default heap's access flags (and no flags).
 * Return: the heap, or NULL with errno EINVAL (unknown access bits, remote
 * write or atomic access without LOCAL_WRITE, decay_ms out of range, a flag other than the
 * RDMA_HEAP_* bits, ODP with HUGEPAGES, ODP_IMPLICIT without ODP or with
 * MW_BIND), EPERM (ODP_IMPLICIT with remote access flags), EOPNOTSUPP
 * (RDMA_HEAP_ODP on a device without RC ODP for the heap's operations, or
 * ODP_IMPLICIT without implicit ODP, or whose capabilities cannot be
 * queried) or EAGAIN (RDMA_MALLOC_MAX_HEAPS
 * heaps alive, or jemalloc has no arena left).
 */
rdma_heap_t *rdma_heap_create(const struct rdma_heap_attr *attr);

/**
 * rdma_heap_create_sized - rdma_heap_create() with the size of @attr's
 * struct as the program knows it.  Since 0.2.
 *
 * @attr_size: at least offsetof(struct rdma_heap_attr, decay_ms) (access
 * and flags), else EINVAL; fields past it are taken as 0; bytes past this
 * library's struct must be 0, else EINVAL.  Ignored when @attr is NULL.
 * Return: as rdma_heap_create().
 */
rdma_heap_t *rdma_heap_create_sized(const struct rdma_heap_attr *attr, size_t attr_size);
/* Variadic, so that a compound literal's commas pass through. */
#define rdma_heap_create(...) rdma_heap_create_sized((__VA_ARGS__), sizeof(struct rdma_heap_attr))

/**
 * rdma_heap_destroy - free every allocation of @heap at once, deregister and
 * unmap its chunks.
 *
 * No other thread may use @heap or its memory during or after the call; no
 * work request may still use its keys.  Like a freed pointer, @heap must not
 * be used again: a second destroy is refused with EINVAL only as long as no
 * new heap has taken its place.  The default heap (or NULL) is refused.
 * Return: 0, EINVAL, or EBUSY (a memory window is still allocated on its
 * memory, or under the LD_PRELOAD drop-in a region the program registered
 * on it with ibv_reg_mr() is not deregistered yet: rdma_malloc_mw_free()
 * or ibv_dereg_mr() it first; nothing is done, but for the chunk registered
 * ahead for its next growth, given up if the heap was pinned while the call
 * gave it up); or, in a fork child, fork() went ahead of the library
 * giving the heap's memory back (said once; never destroyed there).
 */
int rdma_heap_destroy(rdma_heap_t *heap);

/** rdma_heap_default - the heap rdma_malloc() allocates from. */
rdma_heap_t *rdma_heap_default(void);

/** rdma_heap_access - the IBV_ACCESS_* flags of @heap (NULL: default);
 * includes IBV_ACCESS_MW_BIND for an RDMA_HEAP_MW_BIND heap and
 * IBV_ACCESS_ON_DEMAND for an RDMA_HEAP_ODP one (rdma_heap_set_access()
 * takes them back as they are). */
unsigned int rdma_heap_access(const rdma_heap_t *heap);

/** rdma_heap_flags - the RDMA_HEAP_* flags of @heap (NULL: default). */
unsigned int rdma_heap_flags(const rdma_heap_t *heap);

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
 * Re-registration: changing the access flags of a whole heap.
 * ------------------------------------------------------------------------ */

/*
 * Called once for each registration (chunk x attached PD) whose keys changed,
 * with its keys before the call and after it (a change undone after a
 * failure is reported as its net effect, or not at all): the program
 * re-sends the new rkey to its peers.  [@addr, @addr+@len) is the chunk's
 * region.  It runs on the thread of rdma_heap_set_access(), after every
 * region has changed and with no lock of the library held: it may use any
 * rdma_* call, including another rdma_heap_set_access().  Two threads
 * changing the same heap at once each report their own changes, in no
 * order between them: a program that does so serialises the calls, or
 * looks the keys up (rdma_malloc_keys()) once they return.
 */
typedef void (*rdma_heap_key_change_fn)(void *ctx, struct ibv_pd *pd, void *addr, size_t len,
					uint32_t old_lkey, uint32_t old_rkey, uint32_t new_lkey,
					uint32_t new_rkey);

/* rdma_heap_set_access() flag: replace every region (new keys), so that every
 * rkey a peer holds stops working, instead of changing it in place. */
#define RDMA_HEAP_SET_ACCESS_NEW_KEYS (1u << 0)

/**
 * rdma_heap_set_access - register every chunk of @heap (NULL: the default
 * heap) with every attached PD under new access flags @access, e.g. to
 * revoke IBV_ACCESS_REMOTE_WRITE from all of its memory at once.
 *
 * Each region is changed in place with ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS);
 * where the device refuses that (or with RDMA_HEAP_SET_ACCESS_NEW_KEYS) a new
 * region is registered, published and only then is the old one deregistered,
 * so the lookup never returns a key that was already deregistered.  Once the
 * call returns, every lookup returns the new keys and every new chunk gets
 * @access; a lookup made during the call may still return the old keys.
 * Keys that change are reported through @cb (may be NULL) and bump the heap's
 * key generation (rdma_heap_key_generation()).  A region with a memory
 * window bound on it can be neither changed nor replaced: while any window
 * granted on the heap's memory is allocated, or any chunk of the heap is
 * pinned by an elided region of the drop-in (whose struct ibv_mr carries
 * the keys), the call is refused with EBUSY.  An RDMA_HEAP_MW_BIND heap
 * keeps MW_BIND.
 * An RDMA_HEAP_ODP_IMPLICIT heap never changes its shared region: its
 * chunks move to the implicit region of the new flags (new keys); asking
 * for RDMA_HEAP_SET_ACCESS_NEW_KEYS there is EOPNOTSUPP (the region is
 * shared with other heaps, and grants no remote access to revoke).
 *
 * Not to be called concurrently with rdma_heap_destroy() of the same heap.
 * IBV_ACCESS_ON_DEMAND in @access is ignored for an RDMA_HEAP_ODP heap (it
 * keeps it), EINVAL for another.
 * Return: 0; EINVAL (bad @heap, @access as for rdma_heap_create(), unknown
 * @flags, IBV_ACCESS_MW_BIND for an RDMA_HEAP_ODP_IMPLICIT heap); EPERM
 * (remote access for such a heap); EOPNOTSUPP (NEW_KEYS for such a heap);
 * EBUSY (a memory window is allocated on the heap's memory, or an elided
 * region pins one of its chunks); ENOMEM (no memory to record the key
 * changes in for @cb: nothing is done; or, rarely, the change was made but
 * its key changes could not all be recorded: @cb is not called, an error
 * says so, and the program looks its keys up again; rdma_heap_access()
 * tells the two apart); or
 * the errno of a failed registration: then the chunks already
 * changed are changed back (best effort; reported too, unless the changes
 * could not all be recorded) and the heap keeps its old flags.
 */
int rdma_heap_set_access(rdma_heap_t *heap, unsigned int access, unsigned int flags,
			 rdma_heap_key_change_fn cb, void *ctx);

/**
 * rdma_heap_key_generation - a counter bumped by every rdma_heap_set_access()
 * of @heap (NULL: default) that changed at least one key, and by every
 * chunk of the heap given back (its keys are gone).  A program that cached
 * keys compares it with the value it saw when it sent them.
 */
uint64_t rdma_heap_key_generation(const rdma_heap_t *heap);

/**
 * rdma_malloc_prefetch - ask the NIC to fault [@ptr, @ptr+@len) of an
 * RDMA_HEAP_ODP heap in now, for reading (@write 0) or writing, rather than
 * on first access (ibv_advise_mr(IBV_ADVISE_MR_ADVICE_PREFETCH[_WRITE],
 * IBV_ADVISE_MR_FLAG_FLUSH): returns once the pages are mapped).  Any
 * length: one advice per gigabyte (an ibv_sge holds 32 bits of length).
 * @pd: an attached PD, or NULL for the default PD.
 * Return: 0; ENOENT/ERANGE/ENODEV as for rdma_malloc_keys(); EINVAL (the
 * memory's heap is not an ODP heap); or the errno of ibv_advise_mr()
 * (EOPNOTSUPP where the device has no ODP).
 */
int rdma_malloc_prefetch(const void *ptr, size_t len, struct ibv_pd *pd, int write);

/* ------------------------------------------------------------------------
 * Memory windows: remote access to exactly [ptr, ptr+len).
 *
 * A chunk's rkey covers the whole chunk.  A memory window covers exactly the
 * range it is bound to, with its own access rights, and can be revoked
 * without touching the chunk's registration.  The memory must come from a
 * heap created with RDMA_HEAP_MW_BIND.  Support: ibv_query_device()'s
 * device_cap_flags IBV_DEVICE_MEM_WINDOW / IBV_DEVICE_MEM_WINDOW_TYPE_2B
 * (rxe has both; mlx5 has both).
 * ------------------------------------------------------------------------ */

/**
 * rdma_malloc_mw_grant - allocate a memory window of @type (IBV_MW_TYPE_1 or
 * IBV_MW_TYPE_2) on @qp's PD and bind it to [@ptr, @ptr+@len) with
 * @access (IBV_ACCESS_REMOTE_READ, _WRITE, _ATOMIC).
 *
 * The bind is a work request posted on @qp's send queue (type 1 with
 * ibv_bind_mw(), type 2 with an IBV_WR_BIND_MW ibv_post_send()), with
 * @wr_id and @send_flags (e.g. IBV_SEND_SIGNALED): requests posted on @qp
 * after it see the window bound; the caller polls its completion (a failed
 * bind always completes with an error).  A type 2 window is usable only by
 * the peer connected to @qp.  The window's rkey is mw->rkey.
 * Free or revoke a type 2 window before destroying its QP.
 * Return: the window, or NULL with errno: EINVAL (NULL @qp, @len 0, bad
 * @type or @access, or the device refused the bind), ENOENT/ERANGE/ENODEV
 * as for rdma_malloc_keys() (under @qp's PD), EPERM (the memory's region
 * lacks IBV_ACCESS_MW_BIND: its heap has neither RDMA_HEAP_MW_BIND nor
 * that access flag), EOPNOTSUPP (the device has no memory windows), EIO
 * (the region is unusable after a failed rdma_heap_set_access()), ENOMEM,
 * or the errno of the verbs call.  Until rdma_malloc_mw_free(), the region
 * the window is bound on stays: access changes, detaching @qp's PD and
 * destroying the heap are refused with EBUSY.
 */
struct ibv_mw *rdma_malloc_mw_grant(struct ibv_qp *qp, const void *ptr, size_t len,
				    unsigned int access, int type, uint64_t wr_id,
				    unsigned int send_flags);

/**
 * rdma_malloc_mw_revoke - post the revocation of @mw on @qp: a local
 * invalidate of its rkey (type 2; @qp must be the QP it was bound on) or a
 * bind to zero length (type 1, which also gives it a new rkey).  Requests
 * posted after it on @qp no longer reach the memory; poll the completion to
 * know that the peer can no longer.  A type 2 window may then be freed.
 * Return: 0, EINVAL (NULL argument), or the errno of the verbs call.
 */
int rdma_malloc_mw_revoke(struct ibv_qp *qp, struct ibv_mw *mw, uint64_t wr_id,
			  unsigned int send_flags);

/**
 * rdma_malloc_mw_free - deallocate @mw (ibv_dealloc_mw(); it also ends any
 * binding).  NULL is a no-op.  Return: 0 or the errno of ibv_dealloc_mw().
 * A window of rdma_malloc_mw_grant() must be freed here, not with a plain
 * ibv_dealloc_mw(), which the library does not see: its region would stay
 * held (EBUSY) for good.
 */
int rdma_malloc_mw_free(struct ibv_mw *mw);

/* ------------------------------------------------------------------------
 * Statistics.
 *
 * Every counter is defined once, here.  X(name, kind, description) where
 * kind is "gauge" (a current value) or "counter" (a total since start).
 * The name gives the unit the text report prints: a name ending in _bytes
 * or starting with bytes_ counts bytes, one ending in _ns nanoseconds;
 * any other is a plain count.  New fields go at the end (doc/abi.md).
 * ------------------------------------------------------------------------ */

#define RDMA_MALLOC_STATS_FIELDS(X)                                                  \
	X(chunks, gauge, "chunks held (each registered with every attached PD)")    \
	X(chunk_bytes, gauge, "bytes in chunks held")                               \
	X(unregistered_chunks, gauge, "chunks with no registration: no PD, or the drop-in's that RDMA has not used yet")   \
	X(live_bytes, gauge, "bytes in live allocations (jemalloc's count)")        \
	X(registered_bytes, gauge, "bytes under live registrations, summed over PDs") \
	X(mrs, gauge, "live memory regions")                                        \
	X(heaps, gauge, "heaps alive, the default heap included")                   \
	X(pds, gauge, "protection domains attached")                                \
	X(registrations, counter, "ibv_reg_mr calls that succeeded")                \
	X(registration_failures, counter, "ibv_reg_mr calls that failed")          \
	X(registration_ns, counter, "nanoseconds spent in ibv_reg_mr, summed over threads")              \
	X(deregistrations, counter, "ibv_dereg_mr calls that succeeded")            \
	X(deregistration_failures, counter, "ibv_dereg_mr calls that failed")      \
	X(limit_refusals, counter, "chunks refused by RDMALLOC_MAX_REGISTERED")     \
	X(purges_refused, counter, "purge/unmap requests refused, on any chunk (a decommit does the work)") \
	X(lookups, counter, "key lookups that succeeded")                           \
	X(lookup_failures, counter, "key lookups that failed (ENOENT/ERANGE/ENODEV/ENOMEM)") \
	X(tcache_fallbacks, counter, "threads that had to run a heap uncached")    \
	X(elided_registrations, counter, "ibv_reg_mr calls of the program answered from a chunk (LD_PRELOAD)") \
	X(passthrough_registrations, counter, "ibv_reg_mr calls of the program passed to libibverbs (LD_PRELOAD)") \
	X(passthrough_ns, counter, "nanoseconds the program's ibv_reg_mr calls passed to libibverbs took (LD_PRELOAD)") \
	X(elided_regions, gauge, "elided regions the program holds (LD_PRELOAD)")   \
	X(elision_no_pd_slot, counter, "registrations passed to libibverbs: every PD slot held by a busy PD (LD_PRELOAD)") \
	X(elision_pool_full, counter, "registrations passed to libibverbs: no elided-region record left (LD_PRELOAD)") \
	X(elided_pds_detached, counter, "PDs elision attached and detached again: deallocated or idle and evicted (LD_PRELOAD)") \
	X(elided_rereg_in_place, counter, "ibv_rereg_mr calls on elided regions answered in place (LD_PRELOAD)") \
	X(elided_rereg_backed, counter, "ibv_rereg_mr calls that gave an elided region a registration of its own (LD_PRELOAD)") \
	X(hugetlb_chunks, gauge, "chunks backed by explicit huge pages (MAP_HUGETLB)") \
	X(thp_chunks, gauge, "chunks backed by transparent huge pages (MADV_HUGEPAGE)") \
	X(hugepage_fallbacks, counter, "huge-page chunks that fell back (to THP or 4 KiB pages)") \
	X(rereg_in_place, counter, "regions changed in place by ibv_rereg_mr")         \
	X(rereg_replaced, counter, "regions replaced (register new, deregister old) on an access change") \
	X(key_changes, counter, "registrations whose keys changed on an access change") \
	X(mws, gauge, "memory windows alive (rdma_malloc_mw_grant)")                \
	X(mw_binds, counter, "memory-window binds posted")                          \
	X(mw_revokes, counter, "memory-window revocations posted")                 \
	X(odp_purges, counter, "free ranges of ODP heaps given back to the kernel")   \
	X(fallbacks, counter, "fallbacks taken (each also logged once)")         \
	X(chunks_given_back, counter, "idle chunks deregistered and their pages given back") \
	X(bytes_given_back, counter, "bytes of the chunks given back")             \
	X(chunks_taken_back, counter, "given-back chunks registered again for reuse (new keys)") \
	X(pressure_trims, counter, "failed allocations that gave idle memory back and were tried again") \
	X(reserve_hits, counter, "chunks handed to jemalloc from the reserve: registered ahead, off the allocating thread") \
	X(inline_chunks, counter, "chunks an allocation waited for: registered on the allocating thread (no reserve fitted)") \
	X(reserve_waits, counter, "growths that waited for the reserve chunk being made (growth outran the thread)") \
	X(reserve_resyncs, counter, "reserve chunks whose registrations were redone at hand-over (a PD or the access changed)") \
	X(reserve_discards, counter, "reserve chunks released unused (size mispredicted, memory pressure, trim, heap destroyed)") \
	X(reserve_skipped, counter, "reserve chunks not made: RDMALLOC_MAX_REGISTERED, or the mapping or a registration failed") \
	X(reserve_chunks, gauge, "reserve chunks ready: held (counted in chunks) and registered, not yet jemalloc's") \
	X(reserve_bytes, gauge, "bytes in reserve chunks ready (counted in chunk_bytes)") \
	X(refused_chunks, counter, "chunks the drop-in left unregistered: their registration was refused (RDMALLOC_MAX_REGISTERED, RLIMIT_MEMLOCK, a failure)") \
	X(demand_registrations, counter, "registrations made on first use: a lookup or an elided ibv_reg_mr needed them") \
	X(demand_refusals, counter, "registrations on first use refused: the lookup failed, the ibv_reg_mr went to libibverbs") \
	X(pinned_bytes, gauge, "bytes of chunks held for registration, counted once whatever the PDs (none attached yet included): the rdma_* heaps' and an eager drop-in's from creation, the drop-in's on first use while registered; what RDMALLOC_MAX_REGISTERED limits") \
	X(peak_pinned_bytes, gauge, "the most pinned_bytes so far")               \
	X(peak_chunk_bytes, gauge, "the most chunk_bytes so far")                 \
	X(peak_live_bytes, gauge, "the most live_bytes seen: sampled at each read and each decay tick (a lower bound of the peak)") \
	X(big_blocks, gauge, "blocks of RDMALLOC_BIG_BLOCK bytes or more in use, each a chunk of its own") \
	X(big_bytes, gauge, "bytes of the chunks of big blocks in use")          \
	X(big_cached_bytes, gauge, "bytes of freed big blocks' chunks kept for reuse, registrations included, until their decay time") \
	X(big_cache_hits, counter, "big blocks served from a freed one's chunk: no mapping, no registration") \
	X(big_suspensions, counter, "times a heap's big blocks churned (sizes that never repeat: freed ones released unused) so that its next 4096 went to jemalloc's chunks") \
	X(idle_cache_flushes, counter, "thread caches flushed because their thread had not used their heap for its decay time (the blocks they held kept chunks registered)") \
	X(populated_chunks, counter, "chunks of 16 MiB or more whose pages the registration crew faulted in, its threads together, before registering them (RDMALLOC_REG_THREADS)") \
	X(discarded_bytes, counter, "bytes of free pages given back to the kernel as jemalloc decommits them (the decay time, a trim), their chunk kept: pages nothing pins (ODP heaps, the drop-in's unregistered chunks)") \
	X(unmap_failures, counter, "munmap calls of the library's own memory the kernel refused (vm.max_map_count): the range stays mapped and held; the first is logged") \
	X(reserve_wait_timeouts, counter, "waits of an allocation or a trim for the reserve's thread, or for an attach or detach of a PD, that stopped after 5 s (its ibv_reg_mr may wait for a lock the allocating thread holds): the allocation went on without that work, never waited for again; the first is logged")

/*
 * How the stats grow (doc/abi.md): fields are only appended to the list
 * above, never removed, reordered or given another meaning, so a program
 * built against an older header (a smaller struct, the same version) keeps
 * working: the library fills the fields its size covers.  The version
 * changes only if a field had to change its meaning; a library refuses a
 * version it does not know.
 */
#define RDMA_MALLOC_STATS_VERSION 1

struct rdma_malloc_stats {
	/** Set by the caller to RDMA_MALLOC_STATS_VERSION. */
	uint32_t version;
	/**
	 * Set by the caller to sizeof(struct rdma_malloc_stats); on return,
	 * the bytes the library filled (the smaller of that and its own
	 * struct's size): fields past it are unknown to the library, and 0.
	 */
	uint32_t size;
#define RDMA_MALLOC_STATS_MEMBER_(name, kind, desc) uint64_t name;
	RDMA_MALLOC_STATS_FIELDS(RDMA_MALLOC_STATS_MEMBER_)
#undef RDMA_MALLOC_STATS_MEMBER_
};

/**
 * rdma_malloc_stats_get - fill @stats (version and size set by the caller).
 *
 * Fills the fields that @stats->size covers, zeroes the rest of it, and
 * sets @stats->size to the bytes filled (see struct rdma_malloc_stats).
 * Return: 0, or EINVAL for a NULL @stats, an unknown version, or a size
 * that holds no field (less than 16) or is not a multiple of 8.
 */
int rdma_malloc_stats_get(struct rdma_malloc_stats *stats);

enum rdma_malloc_stats_format {
	/* For people: a header line (library version, pid, program), then
	 * one row per field that is not 0, with units (KiB, MiB, µs, ms...
	 * from the field's name: *_bytes and bytes_* are bytes, *_ns
	 * nanoseconds), values in one aligned column. */
	RDMA_MALLOC_STATS_TEXT = 0,
	/* One JSON object on one line: every field, raw, then "pid",
	 * "program" and "library_version". */
	RDMA_MALLOC_STATS_JSON = 1,
	/* Or'ed into RDMA_MALLOC_STATS_TEXT: the rows that are 0 too (JSON has
	 * every field: ignored there).  Since 0.2. */
	RDMA_MALLOC_STATS_ALL_ROWS = 1 << 8,
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
