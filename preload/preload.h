/* SPDX-License-Identifier: MIT */
/* preload.h - shared by the LD_PRELOAD drop-in's files. */
#ifndef RDMALLOC_PRELOAD_H
#define RDMALLOC_PRELOAD_H

/* The drop-in is built with -fvisibility=hidden: what it interposes (the
 * allocation ABI of glibc and C++, and libibverbs' registration calls) is
 * marked with this, and listed in librdmalloc-preload.map. */
#define PRELOAD_API __attribute__((visibility("default")))

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus /* new.cc */
extern "C" {
#endif

struct rdmalloc_heap;
struct ibv_pd;
struct ibv_mr;

/* The heap every plain malloc comes from, or NULL before it exists. */
struct rdmalloc_heap *rdmalloc_preload_heap(void);
/* Whether bound threads get jemalloc's thread cache (jemalloc_conf.c). */
int rdmalloc_preload_thread_cache_wanted(void);

/* They never throw: told so, a noexcept operator delete can end in a tail
 * call to them (else GCC keeps a frame to call std::terminate from). */
#define PRELOAD_NOTHROW __attribute__((nothrow))

/* malloc, aligned_alloc and free for new.cc: the same functions by
 * hidden names, called directly rather than through the PLT. */
PRELOAD_NOTHROW void *rdmalloc_preload_malloc(size_t size);
PRELOAD_NOTHROW void *rdmalloc_preload_aligned_alloc(size_t align, size_t size);
PRELOAD_NOTHROW void rdmalloc_preload_free(void *p);

/* free(@p) by C++'s sized delete: @size is what malloc() was asked for
 * (operator new's size), which spares jemalloc its lookup of the size. */
PRELOAD_NOTHROW void rdmalloc_preload_free_sized(void *p, size_t size);

/* Find out whether the program replaced a basic form of operator new or
 * delete, which the other forms then call (new.cc): at start, while the
 * process has one thread, so that no later operator call looks symbols up
 * (dlsym waits for the dynamic linker's lock, which a thread in dlopen
 * holds while it runs constructors). */
void rdmalloc_preload_cxx_init(void);

/*
 * What elide.c's wrappers of libibverbs hand on to: libibverbs' own
 * functions, found by name and version on first use.  The fake drop-in of
 * the tests (tests/preload/fake_dropin.c) installs stand-ins before the
 * library initialises, as the fake backend does for the library's verbs.
 */
struct rdmalloc_elide_next {
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
	struct ibv_mr *(*reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access);
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	int (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access);
	int (*dealloc_pd)(struct ibv_pd *pd);
};
void rdmalloc_elide_set_next(const struct rdmalloc_elide_next *next);

#ifdef __cplusplus
}
#endif

#endif
