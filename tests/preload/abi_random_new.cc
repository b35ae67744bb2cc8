// SPDX-License-Identifier: MIT
// abi_random_new.cc - the C++ half of abi_random: every operator new and
// delete of the ABI, called by name so that each exported symbol is the one
// that runs (a new-expression may pick another overload or be elided).
#include <cstddef>
#include <cstdint>
#include <new>

#include "abi_random.h"

// abi_new and abi_delete pair each form with its own by `kind`; GCC 12 at -O3
// inlines both switches and warns about pairs the kinds never make.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

extern "C" void *abi_new(int kind, std::size_t n, std::size_t align)
{
	const std::align_val_t a = static_cast<std::align_val_t>(align);
	switch (kind) {
	case ABI_NEW:
		return ::operator new(n);
	case ABI_NEW_ARR:
		return ::operator new[](n);
	case ABI_NEW_NT:
		return ::operator new(n, std::nothrow);
	case ABI_NEW_ARR_NT:
		return ::operator new[](n, std::nothrow);
	case ABI_NEW_AL:
		return ::operator new(n, a);
	case ABI_NEW_ARR_AL:
		return ::operator new[](n, a);
	case ABI_NEW_AL_NT:
		return ::operator new(n, a, std::nothrow);
	case ABI_NEW_ARR_AL_NT:
		return ::operator new[](n, a, std::nothrow);
	}
	return nullptr;
}

extern "C" void abi_delete(int kind, void *p, std::size_t n, std::size_t align)
{
	const std::align_val_t a = static_cast<std::align_val_t>(align);
	switch (kind) {
	case ABI_DELETE:
		::operator delete(p);
		break;
	case ABI_DELETE_SIZED:
		::operator delete(p, n);
		break;
	case ABI_DELETE_NT:
		::operator delete(p, std::nothrow);
		break;
	case ABI_DELETE_ARR:
		::operator delete[](p);
		break;
	case ABI_DELETE_ARR_SIZED:
		::operator delete[](p, n);
		break;
	case ABI_DELETE_ARR_NT:
		::operator delete[](p, std::nothrow);
		break;
	case ABI_DELETE_AL:
		::operator delete(p, a);
		break;
	case ABI_DELETE_SIZED_AL:
		::operator delete(p, n, a);
		break;
	case ABI_DELETE_AL_NT:
		::operator delete(p, a, std::nothrow);
		break;
	case ABI_DELETE_ARR_AL:
		::operator delete[](p, a);
		break;
	case ABI_DELETE_ARR_SIZED_AL:
		::operator delete[](p, n, a);
		break;
	case ABI_DELETE_ARR_AL_NT:
		::operator delete[](p, a, std::nothrow);
		break;
	}
}

// What cannot be had: the throwing forms throw std::bad_alloc (no
// new_handler is installed), the nothrow forms return nullptr.  Returns the
// number of forms that misbehaved.
extern "C" int abi_new_exhaustion(void)
{
	const std::size_t huge = SIZE_MAX / 2;
	int bad = 0;
	for (int kind = ABI_NEW; kind <= ABI_NEW_ARR_AL_NT; kind++) {
		const bool nothrow = kind == ABI_NEW_NT || kind == ABI_NEW_ARR_NT || kind == ABI_NEW_AL_NT ||
				     kind == ABI_NEW_ARR_AL_NT;
		try {
			void *p = abi_new(kind, huge, 64);
			if (p) {
				bad++;
				abi_delete(kind, p, huge, 64); // the matching form
			} else if (!nothrow) {
				bad++; // a throwing new must not return nullptr
			}
		} catch (const std::bad_alloc &) {
			if (nothrow)
				bad++;
		}
	}
	return bad;
}
