// SPDX-License-Identifier: MIT
// dlopen_lib.cc - a plugin that allocates in its constructor, at call time
// (C and C++), and frees what the program allocated.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static std::vector<std::string> *made_in_ctor;

__attribute__((constructor)) static void plugin_init()
{
	made_in_ctor = new std::vector<std::string>(100, std::string(200, 'c'));
}

__attribute__((destructor)) static void plugin_fini()
{
	delete made_in_ctor;
}

extern "C" void *plugin_make(std::size_t n)
{
	char *p = static_cast<char *>(std::malloc(n));
	if (p)
		std::memset(p, 'p', n);
	return p;
}

extern "C" void plugin_take(void *p)
{
	std::free(p);
}

extern "C" std::size_t plugin_ctor_bytes()
{
	std::size_t n = 0;
	for (auto &s : *made_in_ctor)
		n += s.size();
	return n;
}
