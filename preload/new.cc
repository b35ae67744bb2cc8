// SPDX-License-Identifier: MIT
// new.cc - the C++ allocation ABI (every operator new and delete) on the
// drop-in's malloc: new throws std::bad_alloc after the new_handler loop.
//
// A program may replace the basic forms (new and delete, and their aligned
// forms) and leave the others to the library, whose every other form then
// calls them ([new.delete]: new[] calls new, nothrow new calls new, sized
// delete calls delete, ...), as libstdc++'s do.  The program's definitions
// win over ours, so ours of the other forms do the same when any basic or
// array form is not ours: they call whichever definition the dynamic
// linker gives the program.  Otherwise they go to malloc and free at once,
// sized delete with its size (tests/preload/cxx_replaced.cc).
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <dlfcn.h>
#include <new>
#include <pthread.h>

#include "compiler.h"
#include "preload.h"

namespace {

// @aligned: @align is an align_val_t's; else operator new's own (malloc's).
void *alloc_or_throw(std::size_t n, std::size_t align, bool aligned)
{
	// An alignment that is not a power of two (0 included) is undefined
	// behaviour; libstdc++ throws at once, without the handler (which could
	// never help), and so does the drop-in (tests/preload/edge_args_new.cc).
	if (aligned && !is_pow2(align))
		throw std::bad_alloc();
	for (;;) {
		void *p = aligned ? rdmalloc_preload_aligned_alloc(align, n) : rdmalloc_preload_malloc(n);
		if (p)
			return p;
		std::new_handler h = std::get_new_handler();
		if (!h)
			throw std::bad_alloc();
		h();
	}
}

void *alloc_or_null(std::size_t n, std::size_t align, bool aligned) noexcept
{
	try {
		return alloc_or_throw(n, align, aligned);
	} catch (...) {
		return nullptr;
	}
}

// The forms the others call, as the program sees them: set once
// (found_once) before `forward` says whether they are to be called.
struct basic_forms {
	void *(*new_)(std::size_t);
	void *(*new_array)(std::size_t);
	void (*delete_)(void *) noexcept;
	void (*delete_array)(void *) noexcept;
	void *(*new_aligned)(std::size_t, std::align_val_t);
	void *(*new_array_aligned)(std::size_t, std::align_val_t);
	void (*delete_aligned)(void *, std::align_val_t) noexcept;
	void (*delete_array_aligned)(void *, std::align_val_t) noexcept;
};
basic_forms basic;
std::atomic<int> forward{ -1 }; // -1: not known yet; 1: the program replaced one

// The definition the program's calls of @name reach: *@replaced set when
// it is not ours (dlsym may answer a non-PIE program's PLT stub of ours:
// then calls go the long way round to ours, still right).
template <class F> void find(F *out, const char *name, F ours, int *replaced)
{
	void *f = dlsym(RTLD_DEFAULT, name);
	Dl_info mine, theirs;
	if (f && dladdr(reinterpret_cast<void *>(&find<F>), &mine) && dladdr(f, &theirs) &&
	    theirs.dli_fbase != mine.dli_fbase) {
		*replaced = 1;
		*out = reinterpret_cast<F>(f);
	} else {
		*out = ours;
	}
}

void find_basic_forms()
{
	int replaced = 0;
	find<void *(*)(std::size_t)>(&basic.new_, "_Znwm", ::operator new, &replaced);
	find<void *(*)(std::size_t)>(&basic.new_array, "_Znam", ::operator new[], &replaced);
	find<void (*)(void *) noexcept>(&basic.delete_, "_ZdlPv", ::operator delete, &replaced);
	find<void (*)(void *) noexcept>(&basic.delete_array, "_ZdaPv", ::operator delete[], &replaced);
	find<void *(*)(std::size_t, std::align_val_t)>(&basic.new_aligned, "_ZnwmSt11align_val_t",
						       ::operator new, &replaced);
	find<void *(*)(std::size_t, std::align_val_t)>(&basic.new_array_aligned, "_ZnamSt11align_val_t",
						       ::operator new[], &replaced);
	find<void (*)(void *, std::align_val_t) noexcept>(&basic.delete_aligned, "_ZdlPvSt11align_val_t",
							  ::operator delete, &replaced);
	find<void (*)(void *, std::align_val_t) noexcept>(&basic.delete_array_aligned, "_ZdaPvSt11align_val_t",
							  ::operator delete[], &replaced);
	forward.store(replaced, std::memory_order_release);
}

pthread_once_t found_once = PTHREAD_ONCE_INIT;

__attribute__((noinline, cold)) bool forwarding_found()
{
	pthread_once(&found_once, find_basic_forms);
	return forward.load(std::memory_order_acquire) > 0;
}

// Whether the other forms call the basic ones (basic_forms): a load and a
// compare after the drop-in's constructor (a call before it finds them).
inline bool forwarding()
{
	int f = forward.load(std::memory_order_acquire);
	return __builtin_expect(f != 0, 0) && (f > 0 || forwarding_found());
}

} // namespace

void rdmalloc_preload_cxx_init(void)
{
	pthread_once(&found_once, find_basic_forms);
}

namespace {

template <class F> void *or_null(F f) noexcept
{
	try {
		return f();
	} catch (...) {
		return nullptr;
	}
}

} // namespace

// The basic forms.
PRELOAD_API void *operator new(std::size_t n) { return alloc_or_throw(n, 0, false); }
PRELOAD_API void *operator new(std::size_t n, std::align_val_t a) { return alloc_or_throw(n, static_cast<std::size_t>(a), true); }
PRELOAD_API void operator delete(void *p) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete(void *p, std::align_val_t) noexcept { rdmalloc_preload_free(p); }

// The others: each calls the form the standard says it calls, when the
// program replaced one.
PRELOAD_API void *operator new[](std::size_t n)
{
	return forwarding() ? basic.new_(n) : alloc_or_throw(n, 0, false);
}
PRELOAD_API void *operator new(std::size_t n, const std::nothrow_t &) noexcept
{
	return forwarding() ? or_null([n] { return basic.new_(n); }) : alloc_or_null(n, 0, false);
}
PRELOAD_API void *operator new[](std::size_t n, const std::nothrow_t &) noexcept
{
	return forwarding() ? or_null([n] { return basic.new_array(n); }) : alloc_or_null(n, 0, false);
}
PRELOAD_API void *operator new[](std::size_t n, std::align_val_t a)
{
	return forwarding() ? basic.new_aligned(n, a) : alloc_or_throw(n, static_cast<std::size_t>(a), true);
}
PRELOAD_API void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return forwarding() ? or_null([n, a] { return basic.new_aligned(n, a); })
			    : alloc_or_null(n, static_cast<std::size_t>(a), true);
}
PRELOAD_API void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return forwarding() ? or_null([n, a] { return basic.new_array_aligned(n, a); })
			    : alloc_or_null(n, static_cast<std::size_t>(a), true);
}

PRELOAD_API void operator delete[](void *p) noexcept
{
	if (forwarding())
		basic.delete_(p);
	else
		rdmalloc_preload_free(p);
}
// The size is operator new's, hence malloc's (the aligned forms below
// keep free: their blocks' size classes depend on the alignment too).
PRELOAD_API void operator delete(void *p, std::size_t n) noexcept
{
	if (forwarding())
		basic.delete_(p);
	else
		rdmalloc_preload_free_sized(p, n);
}
PRELOAD_API void operator delete[](void *p, std::size_t n) noexcept
{
	if (forwarding())
		basic.delete_array(p);
	else
		rdmalloc_preload_free_sized(p, n);
}
PRELOAD_API void operator delete[](void *p, std::align_val_t a) noexcept
{
	if (forwarding())
		basic.delete_aligned(p, a);
	else
		rdmalloc_preload_free(p);
}
PRELOAD_API void operator delete(void *p, std::size_t, std::align_val_t a) noexcept
{
	if (forwarding())
		basic.delete_aligned(p, a);
	else
		rdmalloc_preload_free(p);
}
PRELOAD_API void operator delete[](void *p, std::size_t, std::align_val_t a) noexcept
{
	if (forwarding())
		basic.delete_array_aligned(p, a);
	else
		rdmalloc_preload_free(p);
}
PRELOAD_API void operator delete(void *p, const std::nothrow_t &) noexcept
{
	if (forwarding())
		basic.delete_(p);
	else
		rdmalloc_preload_free(p);
}
PRELOAD_API void operator delete[](void *p, const std::nothrow_t &) noexcept
{
	if (forwarding())
		basic.delete_array(p);
	else
		rdmalloc_preload_free(p);
}
PRELOAD_API void operator delete(void *p, std::align_val_t a, const std::nothrow_t &) noexcept
{
	if (forwarding())
		basic.delete_aligned(p, a);
	else
		rdmalloc_preload_free(p);
}
PRELOAD_API void operator delete[](void *p, std::align_val_t a, const std::nothrow_t &) noexcept
{
	if (forwarding())
		basic.delete_array_aligned(p, a);
	else
		rdmalloc_preload_free(p);
}
