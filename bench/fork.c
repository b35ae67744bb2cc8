/* SPDX-License-Identifier: MIT */
/*
 * fork.c - what fork() + the child's exit + waitpid() cost a program with a
 * large heap, plain or under the drop-in, and with the heap used for RDMA
 * or not.
 *
 * The program mallocs --heap bytes in blocks of --block and writes every
 * page.  With --register it then asks the drop-in for the keys of every
 * block (rdma_malloc_keys, found at run time: the program links nothing of
 * rdmalloc's), which registers the chunks as an RDMA library's first
 * transfer would; the kernel copies pinned pages at fork instead of sharing
 * them.  Then --reps times: fork, the child _exit(0)s at once, the parent
 * waits.  One CSV row per repetition; VmPin is the kernel's count of the
 * process's pinned pages, whatever pinned them.
 *
 *   rdmalloc-bench-fork [--heap 512M] [--block 1M] [--reps 5] [--register]
 *       [--env LABEL] [--alloc LABEL] [--header]
 */
#include <dlfcn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#define PROG "bench-fork"

struct ibv_pd;
typedef int (*keys_fn)(const void *, size_t, struct ibv_pd *, uint32_t *, uint32_t *);

/* A line "Name:   N kB" of /proc/self/status, in bytes; 0 when absent. */
static size_t status_bytes(const char *name)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0, n = strlen(name);
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && line[n] == ':')
			kb = strtoull(line + n + 1, NULL, 10);
	fclose(f);
	return kb << 10;
}

int main(int argc, char **argv)
{
	size_t heap, block;
	if (bench_parse_size(bench_opt(argc, argv, "--heap", "512M"), &heap) ||
	    bench_parse_size(bench_opt(argc, argv, "--block", "1M"), &block) || !block || !heap)
		bench_die(PROG, "bad --heap or --block");
	long reps = bench_opt_long(argc, argv, "--reps", 5);
	int reg = bench_flag(argc, argv, "--register");
	const char *env = bench_opt(argc, argv, "--env", "host");
	const char *alloc = bench_opt(argc, argv, "--alloc", "plain");
	if (reps < 1)
		bench_die(PROG, "bad --reps");
	if (bench_flag(argc, argv, "--header"))
		printf("env,alloc,registered,heap_mib,rep,fork_ms,total_ms,vmpin_mib,rss_mib\n");

	size_t n = (heap + block - 1) / block;
	void **b = calloc(n, sizeof(void *));
	if (!b)
		bench_die(PROG, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (!(b[i] = malloc(block)))
			bench_die(PROG, "malloc(%zu) failed", block);
		memset(b[i], (int)i, block);
	}
	if (reg) {
		keys_fn keys = (keys_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "rdma_malloc_keys");
		if (!keys)
			bench_die(PROG, "--register needs the drop-in (no rdma_malloc_keys)");
		for (size_t i = 0; i < n; i++) {
			uint32_t lkey, rkey;
			int rc = keys(b[i], block, NULL, &lkey, &rkey);
			if (rc)
				bench_die(PROG, "rdma_malloc_keys of block %zu: %s", i, strerror(rc));
		}
	}
	for (long r = 1; r <= reps; r++) {
		uint64_t t0 = bench_now_ns();
		pid_t pid = fork();
		if (pid < 0)
			bench_die(PROG, "fork: %s", strerror(errno));
		if (pid == 0)
			_exit(0);
		uint64_t t1 = bench_now_ns();
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			bench_die(PROG, "the child did not exit cleanly");
		uint64_t t2 = bench_now_ns();
		printf("%s,%s,%s,%zu,%ld,%.3f,%.3f,%.1f,%.1f\n", env, alloc, reg ? "yes" : "no", heap >> 20, r,
		       (double)(t1 - t0) / 1e6, (double)(t2 - t0) / 1e6,
		       (double)status_bytes("VmPin") / 1048576.0, (double)bench_rss_bytes() / 1048576.0);
		fflush(stdout);
	}
	for (size_t i = 0; i < n; i++)
		free(b[i]);
	free(b);
	return 0;
}
