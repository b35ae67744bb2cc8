// SPDX-License-Identifier: MIT
// alloc_cxx.cc - the C++ allocation calls of alloc.c's xthread-sized
// workload: ::operator new and the sized ::operator delete, which a C++14
// compiler emits for `delete p` of a complete type (-fsized-deallocation).
#include <cstddef>
#include <new>

extern "C" void *bench_new(std::size_t n)
{
	return ::operator new(n);
}

extern "C" void bench_delete_sized(void *p, std::size_t n)
{
	::operator delete(p, n);
}
