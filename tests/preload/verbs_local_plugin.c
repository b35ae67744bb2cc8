/* SPDX-License-Identifier: MIT */
/* verbs_local_plugin.c - linked against libibverbs, loaded RTLD_LOCAL by
 * verbs_local.c. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>

__attribute__((visibility("default"))) int verbs_local_try_rereg(int *err);

int verbs_local_try_rereg(int *err)
{
	/* Room for libibverbs' struct verbs_mr around the ibv_mr: zeroed, so
	 * its type is a plain MR; the flags are refused before anything else
	 * of it is read. */
	static _Alignas(16) unsigned char mr[512];
	errno = 0;
	int rc = ibv_rereg_mr((struct ibv_mr *)mr, INT_MIN, NULL, NULL, 0, 0);
	*err = errno;
	return rc;
}
