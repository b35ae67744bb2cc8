/* SPDX-License-Identifier: MIT */
/*
 * info_space.c - rdmalloc-info's address space: what the library reserves,
 * measured rather than recited, so that it stays true as the library
 * changes.  This program runs itself again (--probe-vm) three ways: plain,
 * under the drop-in, and initialising librdmalloc.so; each child reports
 * its VmSize and its largest mappings.
 */
#include <errno.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "info.h"
#include "out.h"
#include "rdma_malloc.h"

extern char **environ;

#define LARGEST 4

int info_space_probe(int api)
{
	if (api) /* the library brought up as a program of the API does */
		rdma_free(rdma_malloc(1));
	unsigned long long vm = 0, largest[LARGEST] = { 0 };
	FILE *f = fopen("/proc/self/status", "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "VmSize: %llu kB", &vm);
	if (f)
		fclose(f);
	f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		if (sscanf(line, "%llx-%llx", &lo, &hi) != 2)
			continue;
		unsigned long long kib = (hi - lo) >> 10;
		for (int i = 0; i < LARGEST; i++) {
			if (kib > largest[i]) {
				memmove(&largest[i + 1], &largest[i], sizeof(largest[0]) * (LARGEST - 1 - (size_t)i));
				largest[i] = kib;
				break;
			}
		}
	}
	if (f)
		fclose(f);
	printf("%llu", vm);
	for (int i = 0; i < LARGEST; i++)
		printf(" %llu", largest[i]);
	printf("\n");
	return vm ? 0 : 1;
}

/* Run @self --probe-vm MODE with LD_PRELOAD=@preload (NULL: none) and
 * messages off; read its numbers.  0 or -1. */
static int probe(const char *self, const char *preload, const char *mode, unsigned long long v[1 + LARGEST])
{
	int pipefd[2];
	if (pipe(pipefd))
		return -1;
	size_t n = 0;
	for (char **e = environ; *e; e++)
		n++;
	char **env = calloc(n + 3, sizeof(char *));
	if (!env)
		return -1;
	size_t k = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "RDMALLOC_LOG_LEVEL=", 19))
			env[k++] = *e;
	char pre[4200];
	snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", preload ? preload : "");
	env[k++] = pre;
	env[k++] = "RDMALLOC_LOG_LEVEL=none";
	env[k] = NULL;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pipefd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, pipefd[0]);
	char *argv[] = { (char *)self, "--probe-vm", (char *)mode, NULL };
	pid_t pid;
	int err = posix_spawn(&pid, self, &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	close(pipefd[1]);
	if (err) {
		close(pipefd[0]);
		return -1;
	}
	char buf[256] = "";
	ssize_t r = read(pipefd[0], buf, sizeof(buf) - 1);
	close(pipefd[0]);
	int st;
	waitpid(pid, &st, 0);
	if (r <= 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return -1;
	buf[r] = '\0';
	return sscanf(buf, "%llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4]) == 1 + LARGEST ? 0 : -1;
}

static void report(const char *key, const char *what, const unsigned long long v[1 + LARGEST], int ok)
{
	char b[32], text[160];
	out_begin(key);
	out_str("what", what);
	if (!ok) {
		out_null("vmsize", "(could not be measured)");
		out_end();
		return;
	}
	out_u64("vmsize", v[0] << 10, out_bytes(v[0] << 10, b, sizeof(b)));
	out_list("largest_mappings");
	for (int i = 1; i <= LARGEST; i++) {
		if (out_json()) {
			out_u64(NULL, v[i] << 10, NULL);
		} else {
			snprintf(text, sizeof(text), "%s", out_bytes(v[i] << 10, b, sizeof(b)));
			out_str(NULL, text);
		}
	}
	out_list_end();
	out_end();
}

void info_space(const char *self, const char *preload)
{
	unsigned long long plain[1 + LARGEST], dropin[1 + LARGEST], api[1 + LARGEST];
	out_begin("address_space");
	report("plain", "this program, doing nothing: the baseline", plain, probe(self, NULL, "plain", plain) == 0);
	if (preload)
		report("dropin", "the same under the LD_PRELOAD drop-in", dropin,
		       probe(self, preload, "plain", dropin) == 0);
	else
		out_null("dropin", "(the drop-in was not found)");
	report("api", "the same with librdmalloc.so initialised", api, probe(self, NULL, "api", api) == 0);
	out_end();
}
