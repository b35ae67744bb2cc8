/* SPDX-License-Identifier: MIT */
/*
 * startup.c - time from process start to the first allocation with keys.
 *
 * The parent reads the monotonic clock, spawns this program again as a child
 * (posix_spawn of /proc/self/exe), and the child reports, against that
 * clock, when main() started and when its first buffer with keys was ready:
 *
 *   exec      nothing: the floor (exec, dynamic loading of this program)
 *   malloc    malloc(64): a first allocation without keys
 *   rdmalloc  rdma_malloc(64) + rdma_malloc_keys(): library initialisation
 *             (device, PD, first chunk registered) included
 *   verbs     malloc(64), then what a user does by hand: ibv_get_device_list,
 *             ibv_open_device, ibv_alloc_pd, ibv_reg_mr of the buffer
 *   devices   ibv_get_device_list + ibv_free_device_list only (a diagnostic:
 *             loading libibverbs' providers)
 *   rdmalloc-nodev  rdmalloc with RDMALLOC_DEVICE=nodevice0, a device that
 *             does not exist: the no-device path, interleaved with the rest
 *
 * Without a device rdma_malloc still allocates (lookups say ENODEV) and the
 * verbs method finds nothing: the "keys" column says whether keys came back.
 * Methods are interleaved within each repetition.
 *
 *   rdmalloc-bench-startup [--reps R] [--methods exec,malloc,rdmalloc,verbs]
 *       [--env LABEL] [--header]
 */
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "rdma_malloc.h"

#define PROG "bench-startup"

extern char **environ;

static int child(const char *method)
{
	uint64_t t_main = bench_now_ns();
	int keys = 0;
	if (!strcmp(method, "malloc")) {
		/* Kept where the compiler cannot drop it: gcc removes a
		 * malloc whose block is only written to. */
		char *volatile p = malloc(64);
		p[0] = 1;
		keys = 0;
	} else if (!strcmp(method, "rdmalloc")) {
		char *p = rdma_malloc(64);
		uint32_t lkey, rkey;
		keys = p && rdma_malloc_keys(p, 64, NULL, &lkey, &rkey) == 0;
	} else if (!strcmp(method, "devices")) {
		int n = 0;
		struct ibv_device **list = ibv_get_device_list(&n);
		if (list)
			ibv_free_device_list(list);
	} else if (!strcmp(method, "verbs")) {
		char *p = malloc(64);
		p[0] = 1;
		int n = 0;
		struct ibv_device **list = ibv_get_device_list(&n);
		if (list && n > 0) {
			struct ibv_context *ctx = ibv_open_device(list[0]);
			struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
			struct ibv_mr *mr =
				pd ? ibv_reg_mr(pd, p, 64,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							IBV_ACCESS_REMOTE_READ)
				   : NULL;
			keys = mr != NULL;
		}
	}
	uint64_t t_first = bench_now_ns();
	printf("%llu %llu %d\n", (unsigned long long)t_main, (unsigned long long)t_first, keys);
	return 0;
}

static int spawn_one(const char *method, double *us_main, double *us_first, int *keys)
{
	int fd[2];
	if (pipe(fd))
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
	posix_spawn_file_actions_addclose(&fa, fd[0]);
	/* "rdmalloc-nodev": rdmalloc with RDMALLOC_DEVICE naming no device. */
	char **envp = environ;
	static char *nodev_env[512];
	const char *mode = method;
	if (!strcmp(method, "rdmalloc-nodev")) {
		size_t n = 0;
		for (char **e = environ; *e && n < 510; e++)
			if (strncmp(*e, "RDMALLOC_DEVICE=", 16))
				nodev_env[n++] = *e;
		nodev_env[n++] = "RDMALLOC_DEVICE=nodevice0";
		nodev_env[n] = NULL;
		envp = nodev_env;
		mode = "rdmalloc";
	}
	char *args[] = { "rdmalloc-bench-startup", "--child", (char *)mode, NULL };
	pid_t pid;
	uint64_t t0 = bench_now_ns();
	int err = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, envp);
	posix_spawn_file_actions_destroy(&fa);
	close(fd[1]);
	if (err) {
		close(fd[0]);
		fprintf(stderr, "%s: posix_spawn: %s\n", PROG, strerror(err));
		return -1;
	}
	char buf[128] = { 0 };
	size_t got = 0;
	ssize_t r;
	while (got < sizeof(buf) - 1 && (r = read(fd[0], buf + got, sizeof(buf) - 1 - got)) > 0)
		got += (size_t)r;
	close(fd[0]);
	int status;
	waitpid(pid, &status, 0);
	unsigned long long tm, tf;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
	    sscanf(buf, "%llu %llu %d", &tm, &tf, keys) != 3) {
		fprintf(stderr, "%s: child %s failed (status %d)\n", PROG, method, status);
		return -1;
	}
	*us_main = (double)(tm - t0) / 1e3;
	*us_first = (double)(tf - t0) / 1e3;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--child"))
		return child(argv[2]);
	int reps = (int)bench_opt_long(argc, argv, "--reps", 20);
	const char *env = bench_opt(argc, argv, "--env", "host");
	char methods[256];
	snprintf(methods, sizeof(methods), "%s",
		 bench_opt(argc, argv, "--methods", "exec,malloc,rdmalloc,verbs"));
	const char *m[8];
	int nm = 0;
	for (char *save = NULL, *t = strtok_r(methods, ",", &save); t && nm < 8;
	     t = strtok_r(NULL, ",", &save))
		m[nm++] = t;
	if (reps < 1 || nm == 0)
		bench_die(PROG, "bad options");
	if (bench_flag(argc, argv, "--header"))
		printf("env,method,rep,us_to_main,us_to_first,keys\n");
	for (int rep = 1; rep <= reps; rep++) {
		for (int i = 0; i < nm; i++) {
			const char *method = m[(i + rep) % nm];
			double um, uf;
			int keys;
			if (spawn_one(method, &um, &uf, &keys))
				return 1;
			printf("%s,%s,%d,%.1f,%.1f,%d\n", env, method, rep, um, uf, keys);
		}
		fflush(stdout);
	}
	bench_progress(PROG, "%s: %d reps of %d methods done", env, reps, nm);
	return 0;
}
