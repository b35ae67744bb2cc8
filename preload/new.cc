// SPDX-License-Identifier: MIT
// new.cc - the C++ allocation ABI (every operator new and delete) on the
// drop-in's malloc: new throws std::bad_alloc after the new_handler loop.
#include <cerrno>
#include <cstdlib>
#include <new>

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

} // namespace

PRELOAD_API void *operator new(std::size_t n) { return alloc_or_throw(n, 0, false); }
PRELOAD_API void *operator new[](std::size_t n) { return alloc_or_throw(n, 0, false); }
PRELOAD_API void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return alloc_or_null(n, 0, false); }
PRELOAD_API void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return alloc_or_null(n, 0, false); }
PRELOAD_API void *operator new(std::size_t n, std::align_val_t a) { return alloc_or_throw(n, static_cast<std::size_t>(a), true); }
PRELOAD_API void *operator new[](std::size_t n, std::align_val_t a) { return alloc_or_throw(n, static_cast<std::size_t>(a), true); }
PRELOAD_API void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return alloc_or_null(n, static_cast<std::size_t>(a), true);
}
PRELOAD_API void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return alloc_or_null(n, static_cast<std::size_t>(a), true);
}

PRELOAD_API void operator delete(void *p) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete[](void *p) noexcept { rdmalloc_preload_free(p); }
// The size is operator new's, hence malloc's (the aligned forms below
// keep free: their blocks' size classes depend on the alignment too).
PRELOAD_API void operator delete(void *p, std::size_t n) noexcept { rdmalloc_preload_free_sized(p, n); }
PRELOAD_API void operator delete[](void *p, std::size_t n) noexcept { rdmalloc_preload_free_sized(p, n); }
PRELOAD_API void operator delete(void *p, std::align_val_t) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete[](void *p, std::align_val_t) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete(void *p, std::size_t, std::align_val_t) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete(void *p, const std::nothrow_t &) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete[](void *p, const std::nothrow_t &) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { rdmalloc_preload_free(p); }
PRELOAD_API void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { rdmalloc_preload_free(p); }
