/* SPDX-License-Identifier: MIT */
/*
 * verbs_local.c - the drop-in's wrappers of libibverbs find it when a
 * plugin loaded it RTLD_LOCAL (as UCX's uct_ib and libfabric's verbs
 * provider do) and nothing in the global scope has it: this program is not
 * linked against libibverbs.  The plugin calls ibv_rereg_mr() with flags
 * libibverbs refuses before it looks at the region (no device needed), so
 * the wrapper must hand the call on to libibverbs, which answers
 * IBV_REREG_MR_ERR_INPUT with EINVAL.  The guest's engines found the class
 * (every UCX process aborted: "cannot find libibverbs' ibv_dealloc_pd").
 *   verbs_local PLUGIN
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: verbs_local PLUGIN\n");
		return 2;
	}
	if (dlsym(RTLD_DEFAULT, "ibv_get_device_list")) {
		fprintf(stderr, "verbs_local: libibverbs is in the global scope already: the test tries nothing\n");
		return 1;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "verbs_local: %s\n", dlerror());
		return 2;
	}
	int (*try_rereg)(int *err) = (int (*)(int *))dlsym(h, "verbs_local_try_rereg");
	if (!try_rereg) {
		fprintf(stderr, "verbs_local: %s\n", dlerror());
		return 2;
	}
	int err = 0;
	int rc = try_rereg(&err);
	if (rc != -1 || err != EINVAL) { /* -1: IBV_REREG_MR_ERR_INPUT */
		fprintf(stderr, "verbs_local: ibv_rereg_mr with unknown flags: %d (%s), not -1 (EINVAL)\n", rc,
			strerror(err));
		return 1;
	}
	printf("verbs_local: ok (ibv_rereg_mr reached libibverbs loaded RTLD_LOCAL by a plugin)\n");
	return 0;
}
