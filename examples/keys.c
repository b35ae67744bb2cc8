/* SPDX-License-Identifier: MIT */
/*
 * keys.c - allocate a few buffers with rdma_malloc() and print their keys.
 *
 * Build: cc keys.c $(pkg-config --cflags --libs rdmalloc)
 * With no RDMA device the buffers still work; the lookup says ENODEV.
 */
#include <errno.h>
#include <rdma_malloc.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	static const size_t sizes[] = { 8, 4096, 1 << 20, 64 << 20 };
	int ret = 0;

	if (!rdma_malloc_default_pd())
		printf("no RDMA device: %s (memory is allocated but not registered)\n", strerror(errno));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *buf = rdma_malloc(sizes[i]);
		if (!buf) {
			perror("rdma_malloc");
			return 1;
		}
		memset(buf, 0xab, sizes[i]);
		uint32_t lkey, rkey;
		int err = rdma_malloc_keys(buf, sizes[i], NULL, &lkey, &rkey);
		if (err == 0)
			printf("%9zu bytes at %p: lkey 0x%08x rkey 0x%08x\n", sizes[i], (void *)buf, lkey, rkey);
		else
			printf("%9zu bytes at %p: no keys (%s)\n", sizes[i], (void *)buf, strerror(err));
		if (err && err != ENODEV)
			ret = 1;
		rdma_free(buf);
	}
	rdma_malloc_stats_print(stdout, RDMA_MALLOC_STATS_TEXT);
	return ret;
}
