// SPDX-License-Identifier: MIT
// calls_count_new.cc - calls_kept's operator new and delete, each call
// counted, and a new expression whose block nobody uses.
#include <cstdlib>
#include <new>

extern "C" {
#include "calls_count.h"
}

void *operator new(std::size_t n)
{
	calls_new++;
	if (void *p = std::malloc(n ? n : 1))
		return p;
	throw std::bad_alloc();
}

void operator delete(void *p) noexcept
{
	calls_delete++;
	std::free(p);
}

void operator delete(void *p, std::size_t) noexcept
{
	calls_delete++;
	std::free(p);
}

extern "C" __attribute__((noinline)) void calls_unused_new(void)
{
	delete new int(3);
}
