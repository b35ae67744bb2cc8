/* SPDX-License-Identifier: MIT */
/*
 * rdmalloc-info - what `rdmalloc info` and `rdmalloc --version` print, and
 * the option check of `rdmalloc run`: the library's version and path, every
 * RDMALLOC_* option (default, value in force, source), the RDMA devices and
 * ports it would use, huge pages, RLIMIT_MEMLOCK, and the address space it
 * reserves.  Installed in libexec/rdmalloc; the rdmalloc command runs it.
 *
 *   rdmalloc-info [--json] [--preload PATH]
 *   rdmalloc-info --version
 *   rdmalloc-info --check-option RDMALLOC_NAME VALUE   (exit 0 valid, 1 not)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "info.h"
#include "out.h"
#include "rdma_malloc.h"

static int usage(FILE *f, int rc)
{
	fputs("Usage: rdmalloc-info [--json] [--preload PATH]\n"
	      "       rdmalloc-info --version\n"
	      "       rdmalloc-info --check-option RDMALLOC_NAME VALUE\n",
	      f);
	return rc;
}

int main(int argc, char **argv)
{
	int json = 0;
	const char *preload = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = 1;
		} else if (!strcmp(argv[i], "--preload") && i + 1 < argc) {
			preload = argv[++i];
		} else if (!strcmp(argv[i], "--version")) {
			printf("rdmalloc %s\n", rdma_malloc_version(NULL, NULL, NULL));
			return 0;
		} else if (!strcmp(argv[i], "--check-option") && i + 2 < argc) {
			return info_option_valid(argv[i + 1], argv[i + 2]) ? 0 : 1;
		} else if (!strcmp(argv[i], "--probe-vm") && i + 1 < argc) {
			return info_space_probe(!strcmp(argv[i + 1], "api"));
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			return usage(stdout, 0);
		} else {
			fprintf(stderr, "rdmalloc-info: unknown argument '%s'\n", argv[i]);
			return usage(stderr, 2);
		}
	}
	out_init(json);
	out_begin("library");
	unsigned ma, mi, pa;
	out_str("version", rdma_malloc_version(&ma, &mi, &pa));
	char hv[32];
	snprintf(hv, sizeof(hv), "%u.%u.%u", RDMA_MALLOC_VERSION_MAJOR, RDMA_MALLOC_VERSION_MINOR,
		 RDMA_MALLOC_VERSION_PATCH);
	out_str("built_against", hv);
	Dl_info dl;
	char real[4096];
	if (dladdr((void *)rdma_malloc_version, &dl) && dl.dli_fname)
		out_str("path", realpath(dl.dli_fname, real) ? real : dl.dli_fname);
	else
		out_null("path", "(unknown)");
	if (preload)
		out_str("preload", realpath(preload, real) ? real : preload);
	else
		out_null("preload", "(not found)");
	out_end();
	info_options();
	const char *device = getenv("RDMALLOC_DEVICE");
	info_devices(device && info_option_valid("RDMALLOC_DEVICE", device) ? device : "");
	info_system();
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		info_space(self, preload);
	}
	out_finish();
	return 0;
}
