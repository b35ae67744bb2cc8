// SPDX-License-Identifier: MIT
// edge_args_new.cc - the C++ half of edge_args.c: every operator new's
// edge arguments (size 0, sizes no allocator can give, alignments that are
// not powers of two) and its new_handler loop, answered as libstdc++'s
// operators answer them.  Prints what a program can see; edge-args.sh
// compares a plain run with one under the drop-in.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <malloc.h>
#include <new>

namespace {

std::size_t hidden(std::size_t x)
{
	__asm__("" : "+r"(x));
	return x;
}

int handler_calls;

// Gives up after three calls: the loop must call it until it is gone.
void handler()
{
	if (++handler_calls == 3)
		std::set_new_handler(nullptr);
}

void said(const char *call, void *p, std::size_t align, std::size_t n)
{
	if (!p) {
		std::printf("%-40s nullptr\n", call);
		return;
	}
	std::printf("%-40s a pointer, %s, %s\n", call,
		    align && reinterpret_cast<std::uintptr_t>(p) % align ? "MISALIGNED" : "aligned",
		    malloc_usable_size(p) >= n ? "big enough" : "TOO SMALL");
}

template <typename F> void throws(const char *call, F f)
{
	handler_calls = 0;
	try {
		void *p = f();
		std::printf("%-40s a pointer%s\n", call, p ? "" : " (null!)"); // (kept: a test's leak)
	} catch (const std::bad_alloc &) {
		std::printf("%-40s bad_alloc\n", call);
	}
	if (handler_calls)
		std::printf("%-40s   after %d new_handler calls\n", "", handler_calls);
}

} // namespace

// An alignment the compiler cannot see: clang 14 warns of a constant one,
// and crashes optimizing some.
static std::align_val_t odd(size_t a)
{
	static volatile size_t v;
	v = a;
	return std::align_val_t(v);
}

int main()
{
	std::setvbuf(stdout, nullptr, _IOLBF, 0);
	const std::size_t max = hidden(SIZE_MAX), big = hidden(static_cast<std::size_t>(PTRDIFF_MAX) + 1);

	void *p = ::operator new(0);
	said("operator new(0)", p, 0, 0);
	::operator delete(p);
	p = ::operator new[](0);
	said("operator new[](0)", p, 0, 0);
	::operator delete[](p);
	throws("operator new(SIZE_MAX)", [&] { return ::operator new(max); });
	throws("operator new[](PTRDIFF_MAX + 1)", [&] { return ::operator new[](big); });
	said("operator new(SIZE_MAX, nothrow)", ::operator new(max, std::nothrow), 0, 0);
	said("operator new[](SIZE_MAX, nothrow)", ::operator new[](max, std::nothrow), 0, 0);

	std::set_new_handler(handler);
	throws("operator new(SIZE_MAX), a handler", [&] { return ::operator new(max); });
	std::set_new_handler(handler);
	handler_calls = 0;
	p = ::operator new(max, std::nothrow);
	std::printf("%-40s %s after %d new_handler calls\n", "operator new(SIZE_MAX, nothrow), a handler",
		    p ? "a pointer" : "nullptr", handler_calls);

	static const std::size_t aligns[] = { 1, 2, 8, 16, 64, 4096, std::size_t(2) << 20 };
	char call[96];
	for (std::size_t a : aligns) {
		for (std::size_t n : { std::size_t(0), std::size_t(1), std::size_t(100) }) {
			std::snprintf(call, sizeof(call), "operator new(%zu, align %zu)", n, a);
			p = ::operator new(n, std::align_val_t(a));
			said(call, p, a, n);
			::operator delete(p, std::align_val_t(a));
			std::snprintf(call, sizeof(call), "operator new[](%zu, align %zu, nothrow)", n, a);
			p = ::operator new[](n, std::align_val_t(a), std::nothrow);
			said(call, p, a, n);
			::operator delete[](p, std::align_val_t(a));
		}
	}
	throws("operator new(1, align SIZE_MAX/2+1)", [&] { return ::operator new(1, std::align_val_t(max / 2 + 1)); });
	// (Not operator new(SIZE_MAX, align 64, nothrow): libstdc++ 12 rounds
	// the size up to the alignment, which wraps to 0, and returns a block.)
	said("operator new(PTRDIFF_MAX + 1, align 64, nothrow)",
	     ::operator new(big, std::align_val_t(64), std::nothrow), 0, 0);
	// Not a power of two: undefined behaviour by the standard; libstdc++
	// throws bad_alloc at once, without calling the handler.
	std::set_new_handler(handler);
	throws("operator new(100, align 24), a handler", [&] { return ::operator new(100, odd(24)); });
	std::set_new_handler(nullptr);
	said("operator new(100, align 48, nothrow)", ::operator new(100, odd(48), std::nothrow), 0, 0);
	said("operator new(100, align 0, nothrow)", ::operator new(100, odd(0), std::nothrow), 0, 0);
	throws("operator new[](100, align 0)", [&] { return ::operator new[](100, odd(0)); });
	return 0;
}
