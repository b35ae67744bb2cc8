// SPDX-License-Identifier: MIT
// cxx_replaced.cc - a program that replaces some of the C++ allocation
// functions and leaves the others to the library (as [new.delete] allows):
// under the drop-in, every form the program did not replace calls the one
// the standard says it calls, so that each block the program's new made
// reaches the program's delete, and no block of its goes to free().
// Built three times: new(size_t) and delete(void *) replaced; with
// -DREPLACE_ARRAY new[] and delete[] too; with -DREPLACE_ALIGNED the
// aligned new and delete too.  Each replacement puts a header
// of its own before the block, which its delete checks: a block of the
// program's freed by the library, or one of the library's deleted by the
// program, fails the check or is refused by free() (abort).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

static long made, unmade;
static const std::uint64_t MAGIC = 0x6e65772062792075ull;

// The program's allocation: malloc'd, 64 bytes of header (any alignment
// up to 64), the magic word just before the block.
static void *make(std::size_t n)
{
	char *p = static_cast<char *>(std::malloc(n + 64));
	if (!p)
		throw std::bad_alloc();
	made++;
	std::memcpy(p + 56, &MAGIC, 8);
	return p + 64;
}

static void unmake(void *p, const char *who)
{
	if (!p)
		return;
	char *volatile header = static_cast<char *>(p) - 64; /* gcc -O3 follows p to the object */
	char *h = header;
	std::uint64_t m;
	std::memcpy(&m, h + 56, 8);
	if (m != MAGIC) {
		std::fprintf(stderr, "cxx_replaced: %s(%p): not a block of the program's new\n", who, p);
		std::abort();
	}
	std::memset(h + 56, 0, 8);
	unmade++;
	std::free(h);
}

void *operator new(std::size_t n)
{
	return make(n);
}
void operator delete(void *p) noexcept
{
	unmake(p, "operator delete");
}

#ifdef REPLACE_ARRAY
void *operator new[](std::size_t n)
{
	return make(n);
}
void operator delete[](void *p) noexcept
{
	unmake(p, "operator delete[]");
}
#endif
#ifdef REPLACE_ALIGNED
void *operator new(std::size_t n, std::align_val_t a)
{
	if (static_cast<std::size_t>(a) > 64)
		throw std::bad_alloc();
	return make(n);
}
void operator delete(void *p, std::align_val_t) noexcept
{
	unmake(p, "operator delete(align_val_t)");
}
#endif

struct with_dtor { // new[] keeps a cookie: delete[] is sized
	long v[3];
	~with_dtor() { v[0] = 0; }
};
struct alignas(64) wide {
	long v[9];
	~wide() { v[0] = 0; }
};

int main()
{
#if defined(REPLACE_ALIGNED)
	const char *mode = "aligned";
#elif defined(REPLACE_ARRAY)
	const char *mode = "array";
#else
	const char *mode = "basic";
#endif
	long expect = 0;
	for (int i = 0; i < 100; i++) {
		long *a = new long(i); // new, sized delete
		delete a;
		int *b = new int[10]; // new[], delete[]
		delete[] b;
		with_dtor *c = new with_dtor[5]; // new[], sized delete[]
		delete[] c;
		long *d = new (std::nothrow) long(i); // nothrow new
		delete d;
		int *e = new (std::nothrow) int[7]; // nothrow new[]
		delete[] e;
		void *f = ::operator new(100, std::nothrow);
		::operator delete(f, std::nothrow); // nothrow delete
		void *g = ::operator new[](100, std::nothrow);
		::operator delete[](g, std::nothrow);
		expect += 7;
		wide *w = new wide; // aligned new, sized aligned delete
		delete w;
		wide *x = new wide[3]; // aligned new[], sized aligned delete[]
		delete[] x;
		wide *y = new (std::nothrow) wide; // aligned nothrow new
		delete y;
		void *z = ::operator new(100, std::align_val_t(64), std::nothrow);
		::operator delete(z, std::align_val_t(64), std::nothrow);
		void *z2 = ::operator new[](100, std::align_val_t(64));
		::operator delete[](z2, std::align_val_t(64));
#ifdef REPLACE_ALIGNED
		expect += 5;
#endif
	}
	// The library's own blocks are still the library's: malloc and free.
	void *m = std::malloc(1000);
	std::free(m);
	std::printf("cxx_replaced %s: %ld made, %ld unmade, %ld expected\n", mode, made, unmade, expect);
	if (made != expect || unmade != expect) {
		std::fprintf(stderr, "cxx_replaced: FAIL: a form the program did not replace went around its "
				     "replacement\n");
		return 1;
	}
	return 0;
}
