/* SPDX-License-Identifier: MIT */
/* abi_random.h - the C++ operators, callable from abi_random.c. */
#ifndef ABI_RANDOM_H
#define ABI_RANDOM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum abi_new_kind {
	ABI_NEW,           /* operator new(size_t) */
	ABI_NEW_ARR,       /* operator new[](size_t) */
	ABI_NEW_NT,        /* operator new(size_t, nothrow_t const&) */
	ABI_NEW_ARR_NT,    /* operator new[](size_t, nothrow_t const&) */
	ABI_NEW_AL,        /* operator new(size_t, align_val_t) */
	ABI_NEW_ARR_AL,    /* operator new[](size_t, align_val_t) */
	ABI_NEW_AL_NT,     /* operator new(size_t, align_val_t, nothrow_t const&) */
	ABI_NEW_ARR_AL_NT, /* operator new[](size_t, align_val_t, nothrow_t const&) */
};

enum abi_delete_kind {
	ABI_DELETE,              /* operator delete(void*) */
	ABI_DELETE_SIZED,        /* operator delete(void*, size_t) */
	ABI_DELETE_NT,           /* operator delete(void*, nothrow_t const&) */
	ABI_DELETE_ARR,          /* operator delete[](void*) */
	ABI_DELETE_ARR_SIZED,    /* operator delete[](void*, size_t) */
	ABI_DELETE_ARR_NT,       /* operator delete[](void*, nothrow_t const&) */
	ABI_DELETE_AL,           /* operator delete(void*, align_val_t) */
	ABI_DELETE_SIZED_AL,     /* operator delete(void*, size_t, align_val_t) */
	ABI_DELETE_AL_NT,        /* operator delete(void*, align_val_t, nothrow_t const&) */
	ABI_DELETE_ARR_AL,       /* operator delete[](void*, align_val_t) */
	ABI_DELETE_ARR_SIZED_AL, /* operator delete[](void*, size_t, align_val_t) */
	ABI_DELETE_ARR_AL_NT,    /* operator delete[](void*, align_val_t, nothrow_t const&) */
};

/* The operator of @kind; NULL only from a nothrow form. */
void *abi_new(int kind, size_t n, size_t align);
/* The operator delete of @kind (@n and @align for the forms that take them). */
void abi_delete(int kind, void *p, size_t n, size_t align);
/* Every operator new asked for SIZE_MAX/2 bytes: the number that did not
 * throw std::bad_alloc (throwing forms) or return NULL (nothrow forms). */
int abi_new_exhaustion(void);

#ifdef __cplusplus
}
#endif

#endif
