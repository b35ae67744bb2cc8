/* SPDX-License-Identifier: MIT */
/*
 * common.h - small helpers shared by the benchmark programs: a monotonic
 * clock, a seeded random generator, option parsing, progress on stderr,
 * the process's resident size.
 *
 * Every program writes its raw results as CSV rows on stdout (one header
 * line first) and progress on stderr; bench/run collects both.
 */
#ifndef RDMALLOC_BENCH_COMMON_H
#define RDMALLOC_BENCH_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef BENCH_FAKE_VERBS
#include "fake_verbs.h"
#endif

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread. */
static inline uint64_t bench_thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: fast, seeded, good enough to pick sizes and slots. */
static inline uint64_t bench_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/* A size in [lo, hi], uniform in log2 (as many 64 B as 64 KiB requests). */
static inline size_t bench_log_uniform(uint64_t *s, size_t lo, size_t hi)
{
	int a = 63 - __builtin_clzll(lo), b = 63 - __builtin_clzll(hi);
	uint64_t r = bench_rand(s);
	int e = a + (int)(r % (uint64_t)(b - a + 1));
	size_t base = (size_t)1 << e;
	size_t v = base + (size_t)((r >> 16) % base);
	if (v < lo)
		v = lo;
	if (v > hi)
		v = hi;
	return v;
}

/* "64", "4K", "16M", "1G" (powers of 1024). */
static inline int bench_parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -1;
	*out = (size_t)v;
	return 0;
}

/* Comma-separated list of sizes or integers into @out (at most @max). */
static inline int bench_parse_list(const char *s, size_t *out, int max)
{
	int n = 0;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == max || bench_parse_size(tok, &out[n]))
			return -1;
		n++;
	}
	return n;
}

static inline void bench_progress(const char *prog, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[%s] ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	fflush(stderr);
}

__attribute__((noreturn, format(printf, 2, 3))) static inline void bench_die(const char *prog, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: error: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* Value of option @name in argv ("--name VALUE"), or @def. */
static inline const char *bench_opt(int argc, char **argv, const char *name, const char *def)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return argv[i + 1];
	return def;
}

static inline int bench_flag(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return 1;
	return 0;
}

static inline long bench_opt_long(int argc, char **argv, const char *name, long def)
{
	const char *v = bench_opt(argc, argv, name, NULL);
	return v ? strtol(v, NULL, 10) : def;
}

static inline double bench_opt_double(int argc, char **argv, const char *name, double def)
{
	const char *v = bench_opt(argc, argv, name, NULL);
	return v ? strtod(v, NULL) : def;
}

/* The process's resident bytes (/proc/self/statm), 0 if unreadable. */
static inline size_t bench_rss_bytes(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

/* The registration backend of this build, installed: "fake" (the -fake
 * programs: the unit tests' fake backend, which pins pages as ibv_reg_mr
 * does) or "verbs" (libibverbs). */
static inline const char *bench_backend(void)
{
#ifdef BENCH_FAKE_VERBS
	fake_verbs_install(1);
	return "fake";
#else
	return "verbs";
#endif
}

#endif
