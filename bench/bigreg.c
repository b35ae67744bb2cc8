/* SPDX-License-Identifier: MIT */
/*
 * bigreg.c - how long a large buffer waits for its keys: the time from
 * rdma_heap_malloc() of --size bytes to keys on every PD (one PD on the
 * default device, one more on --second-device with --pds 2), as GiB/s.
 * The threads that share the registration come from RDMALLOC_REG_THREADS
 * (read at start-up: one measurement per process); pages are 4 KiB, or
 * huge with --pages huge (RDMA_HEAP_HUGEPAGES: explicit 2 MiB pages when
 * the kernel has them reserved, else transparent ones).  --floor instead
 * times what one thread takes to fault in as many fresh pages (mmap and a
 * write to every page, madvise(MADV_HUGEPAGE) with --pages huge): the
 * machine's own single-thread page-fault rate, which a registration of
 * untouched memory cannot beat on one thread.
 *
 *   rdmalloc-bench-bigreg [--size 1G] [--pds 1|2] [--second-device NAME]
 *       [--pages 4k|huge] [--floor] [--rep N] [--env LABEL] [--header]
 *
 * One CSV row.  Needs a device (the Soft-RoCE guest: bench/guest.sh).
 */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "rdma_malloc.h"

#define PROG "bench-bigreg"

/* PD on device @name, or NULL. */
static struct ibv_pd *pd_on(const char *name)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_pd *pd = NULL;
	for (int i = 0; list && i < n && !pd; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			struct ibv_context *ctx = ibv_open_device(list[i]);
			pd = ctx ? ibv_alloc_pd(ctx) : NULL;
		}
	if (list)
		ibv_free_device_list(list);
	return pd;
}

/* Seconds for one thread to fault in @size fresh bytes. */
static double floor_s(size_t size, int huge)
{
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		bench_die(PROG, "mmap of %zu bytes failed", size);
	madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t t0 = bench_now_ns();
	for (size_t o = 0; o < size; o += page)
		p[o] = 1;
	uint64_t t1 = bench_now_ns();
	munmap(p, size);
	return (double)(t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
	size_t size;
	if (bench_parse_size(bench_opt(argc, argv, "--size", "1G"), &size) || !size)
		bench_die(PROG, "bad --size");
	long pds = bench_opt_long(argc, argv, "--pds", 1);
	const char *second = bench_opt(argc, argv, "--second-device", "");
	const char *pages = bench_opt(argc, argv, "--pages", "4k");
	int huge = !strcmp(pages, "huge"), flr = bench_flag(argc, argv, "--floor");
	long rep = bench_opt_long(argc, argv, "--rep", 0);
	const char *env = bench_opt(argc, argv, "--env", "guest");
	const char *threads = getenv("RDMALLOC_REG_THREADS");
	if ((pds != 1 && pds != 2) || (!huge && strcmp(pages, "4k")) || (pds == 2 && !*second))
		bench_die(PROG, "usage: --pds 1|2 (2 needs --second-device), --pages 4k|huge");
	if (bench_flag(argc, argv, "--header"))
		printf("env,what,size_mib,pds,threads,pages,rep,seconds,gib_per_s\n");
	double s;
	if (flr) {
		s = floor_s(size, huge);
		printf("%s,floor,%zu,0,1,%s,%ld,%.4f,%.3f\n", env, size >> 20, pages, rep, s,
		       (double)size / (1u << 30) / s);
		return 0;
	}
	struct ibv_pd *pd[2] = { rdma_malloc_default_pd(), NULL };
	if (!pd[0])
		bench_die(PROG, "no default PD (no device?)");
	if (pds == 2 && (!(pd[1] = pd_on(second)) || rdma_malloc_attach_pd(pd[1])))
		bench_die(PROG, "no PD on %s to attach", second);
	rdma_heap_t *h = rdma_heap_create(&(struct rdma_heap_attr){
		.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		.flags = huge ? RDMA_HEAP_HUGEPAGES : 0 });
	if (!h)
		bench_die(PROG, "rdma_heap_create: %s", strerror(errno));
	uint64_t t0 = bench_now_ns();
	char *p = rdma_heap_malloc(h, size);
	if (!p)
		bench_die(PROG, "rdma_heap_malloc of %zu bytes: %s", size, strerror(errno));
	for (long i = 0; i < pds; i++) {
		uint32_t l, r;
		int e = rdma_malloc_keys(p, size, pd[i], &l, &r);
		if (e)
			bench_die(PROG, "keys of PD %ld: %s", i, strerror(e));
	}
	s = (double)(bench_now_ns() - t0) / 1e9;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	rdma_malloc_stats_get(&st);
	printf("%s,register,%zu,%ld,%s,%s,%ld,%.4f,%.3f\n", env, size >> 20, pds, threads ? threads : "default",
	       pages, rep, s, (double)size / (1u << 30) / s);
	bench_progress(PROG, "%zu MiB, %ld PD(s), %s thread(s), %s pages: %.3f s (populated_chunks %llu)",
		       size >> 20, pds, threads ? threads : "default", pages, s,
		       (unsigned long long)st.populated_chunks);
	rdma_free(p);
	rdma_heap_destroy(h);
	return 0;
}
