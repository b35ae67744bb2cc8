/* SPDX-License-Identifier: MIT */
/*
 * fuzz_options.c - libFuzzer target over the RDMALLOC_* option parser.
 *
 * Input: byte 0 says which variables are set (bit i%8 = option i of
 * RDMALLOC_OPTIONS, options.h); the rest, split at NUL bytes, gives their values in
 * order (an environment value cannot hold a NUL).  Each value also goes
 * through rdmalloc_parse_size() and rdmalloc_parse_access() directly.
 *
 * Checked against a reference model written apart from src/sys/options.c: the
 * answer of every parser (accepted or not, and the value), the options'
 * fields (the parsed value, or the default when refused) and the count of
 * refused values.  A difference, a crash, or ASan/UBSan report is a finding.
 *
 * Built two ways (tests/fuzz/meson.build, tests/fuzz/fuzz.sh):
 *  - clang -fsanitize=fuzzer,address,undefined with src/sys/options.c and
 *    src/sys/log.c compiled in (coverage-guided), run for a bounded time;
 *  - with the normal compiler and replay.c, against the test library, to
 *    replay tests/fuzz/corpus/ in every build (suite "host").
 */
#include <ctype.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options.h"

/* The options, from the one table that defines them (options.h). */
#define OPT_NAME_(NAME, field, parser, def, doc) "RDMALLOC_" #NAME,
static const char *const names[] = { RDMALLOC_OPTIONS(OPT_NAME_) };
#undef OPT_NAME_
#define NOPT (sizeof(names) / sizeof(names[0]))
static const char *vals[NOPT];

static const char *get(const char *name)
{
	for (size_t i = 0; i < NOPT; i++)
		if (!strcmp(name, names[i]))
			return vals[i];
	return NULL;
}

static void finding(const char *what, const char *value)
{
	fprintf(stderr, "fuzz_options: %s for \"%.200s\"\n", what, value ? value : "(unset)");
	abort();
}

/* ---- the reference model ---------------------------------------------- */

static int ci_eq(const char *a, const char *b) /* ASCII case-insensitive */
{
	for (; *a && *b; a++, b++)
		if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
			return 0;
	return *a == *b;
}

/* digits, then an optional K/M/G/T (any case) with an optional i/I, then an
 * optional b/B, then the end; the value must fit size_t. */
__attribute__((unused)) static int ref_size(const char *s, size_t *out)
{
	if (!isdigit((unsigned char)s[0]))
		return -1;
	unsigned __int128 v = 0;
	size_t i = 0;
	for (; isdigit((unsigned char)s[i]); i++) {
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > UINT64_MAX)
			return -1; /* strtoull: ERANGE */
	}
	unsigned shift = 0;
	switch (s[i]) {
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	case 't': case 'T': shift = 40; break;
	}
	if (shift) {
		i++;
		if (s[i] == 'i' || s[i] == 'I')
			i++;
	}
	if (s[i] == 'b' || s[i] == 'B')
		i++;
	if (s[i])
		return -1;
	v <<= shift;
	if (v > SIZE_MAX)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int sep(char c)
{
	return c == ',' || c == '|' || c == '+' || c == ' ' || c == '\t' || c == '\n' || c == '\v' ||
	       c == '\f' || c == '\r';
}

__attribute__((unused)) static int ref_access(const char *s, unsigned *out)
{
	static const char *const w[] = { "LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "MW_BIND" };
	static const unsigned bit[] = { IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
					IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND };
	unsigned acc = 0, words = 0;
	char tok[256];
	for (size_t i = 0; s[i];) {
		if (sep(s[i])) {
			i++;
			continue;
		}
		size_t n = 0;
		while (s[i] && !sep(s[i])) {
			if (n < sizeof(tok) - 1)
				tok[n] = s[i];
			n++, i++;
		}
		if (n >= sizeof(tok))
			return -1; /* longer than any name */
		tok[n] = '\0';
		const char *t = tok;
		if (n > 11 && !strncasecmp(t, "IBV_ACCESS_", 11))
			t += 11;
		int found = ci_eq(t, "none") || !strcmp(t, "0");
		for (int k = 0; k < 5 && !found; k++)
			if (ci_eq(t, w[k]))
				acc |= bit[k], found = 1;
		if (!found)
			return -1;
		words++;
	}
	if (!words)
		return -1;
	if ((acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(acc & IBV_ACCESS_LOCAL_WRITE))
		return -1;
	*out = acc;
	return 0;
}

__attribute__((unused)) static int ref_loglevel(const char *s, int *out)
{
	static const char *const n[] = { "none", "error", "warn", "info", "debug" };
	for (int i = 0; i < 5; i++)
		if (ci_eq(s, n[i]) || (s[0] == '0' + i && !s[1]))
			return *out = i, 0;
	if (ci_eq(s, "warning"))
		return *out = 2, 0;
	return -1;
}

__attribute__((unused)) static int ref_stats(const char *s, int *out)
{
	if (!strcmp(s, "0") || ci_eq(s, "off") || ci_eq(s, "no") || ci_eq(s, "false"))
		return *out = RDMALLOC_STATS_OFF, 0;
	if (!strcmp(s, "1") || ci_eq(s, "on") || ci_eq(s, "yes") || ci_eq(s, "true") || ci_eq(s, "text"))
		return *out = RDMALLOC_STATS_ON_TEXT, 0;
	if (ci_eq(s, "json"))
		return *out = RDMALLOC_STATS_ON_JSON, 0;
	return -1;
}

__attribute__((unused)) static int ref_device(const char *s, char (*out)[RDMALLOC_DEVICE_NAME_MAX])
{
	size_t n = strlen(s);
	if (n >= RDMALLOC_DEVICE_NAME_MAX)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isgraph((unsigned char)s[i]))
			return -1;
	strcpy(*out, s);
	return 0;
}

/* A file name: any bytes but ASCII control characters, shorter than 256;
 * empty is none. */
__attribute__((unused)) static int ref_path(const char *s, char (*out)[RDMALLOC_PATH_MAX])
{
	size_t n = strlen(s);
	if (n >= RDMALLOC_PATH_MAX)
		return -1;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return -1;
	strcpy(*out, s);
	return 0;
}

/* A heap's growth step: auto (any case), 0 or at least one 2 MiB granule. */
__attribute__((unused)) static int ref_growth(const char *s, size_t *out)
{
	size_t v;
	if (ci_eq(s, "auto"))
		return *out = RDMALLOC_CHUNK_MAX_AUTO, 0;
	if (ref_size(s, &v) || (v != 0 && v < ((size_t)2 << 20)))
		return -1;
	*out = v;
	return 0;
}

/* first-use or eager, any case. */
__attribute__((unused)) static int ref_policy(const char *s, int *out)
{
	if (ci_eq(s, "first-use"))
		return *out = RDMALLOC_PRELOAD_FIRST_USE, 0;
	if (ci_eq(s, "eager"))
		return *out = RDMALLOC_PRELOAD_EAGER, 0;
	return -1;
}

/* 0, or 4 KiB to 1 GiB. */
__attribute__((unused)) static int ref_big(const char *s, size_t *out)
{
	size_t v;
	if (ref_size(s, &v) || (v != 0 && (v < ((size_t)4 << 10) || v > ((size_t)1 << 30))))
		return -1;
	*out = v;
	return 0;
}

/* 0 to 16, plain decimal digits (leading zeros allowed, at most 3 digits). */
__attribute__((unused)) static int ref_arenas(const char *s, unsigned *out)
{
	size_t n = strlen(s);
	if (n == 0 || n > 3 || strspn(s, "0123456789") != n)
		return -1;
	unsigned v = (unsigned)atoi(s);
	if (v > 16)
		return -1;
	*out = v;
	return 0;
}

/* -1, or 0 to 1000000000 in plain decimal digits (leading zeros allowed). */
__attribute__((unused)) static int ref_decay(const char *s, long *out)
{
	if (!strcmp(s, "-1"))
		return *out = -1, 0;
	size_t n = strlen(s);
	if (n == 0 || strspn(s, "0123456789") != n)
		return -1;
	while (n > 1 && *s == '0')
		s++, n--;
	if (n > 10 || (n == 10 && strcmp(s, "1000000000") > 0))
		return -1;
	*out = atol(s);
	return 0;
}

__attribute__((unused)) static int ref_bool(const char *s, int *out)
{
	if (!strcmp(s, "0") || ci_eq(s, "off") || ci_eq(s, "no") || ci_eq(s, "false"))
		return *out = 0, 0;
	if (!strcmp(s, "1") || ci_eq(s, "on") || ci_eq(s, "yes") || ci_eq(s, "true"))
		return *out = 1, 0;
	return -1;
}

/* Field comparison, by parser.  (A new parser kind in options.h fails to
 * compile here until the model knows it; a kind no option uses is fine.) */
#define same_bool(a, b) (*(a) == *(b))
#define same_loglevel(a, b) (*(a) == *(b))
#define same_access(a, b) (*(a) == *(b) && rdmalloc_access_valid(*(a)))
#define same_size(a, b) (*(a) == *(b))
#define same_growth(a, b) (*(a) == *(b))
#define same_policy(a, b) (*(a) == *(b))
#define same_big(a, b) (*(a) == *(b))
#define same_stats(a, b) (*(a) == *(b))
#define same_arenas(a, b) (*(a) == *(b))
#define same_decay(a, b) (*(a) == *(b))
#define same_path(a, b) (strnlen(*(a), RDMALLOC_PATH_MAX) < RDMALLOC_PATH_MAX && !strcmp(*(a), *(b)))
#define same_device(a, b) (strnlen(*(a), RDMALLOC_DEVICE_NAME_MAX) < RDMALLOC_DEVICE_NAME_MAX && !strcmp(*(a), *(b)))

#ifdef RDMALLOC_FUZZ_QUIET
/* The libFuzzer build compiles src/sys/log.c with quiet_write.h: its one write()
 * comes here.  Check the line and drop it (millions of warnings otherwise). */
ssize_t rdmalloc_fuzz_write(int fd, const void *buf, size_t len)
{
	const char *b = buf;
	if (fd != 2 || len < 12 || len > 511 || b[len - 1] != '\n' || memcmp(b, "rdmalloc: ", 10))
		finding("a malformed log line", NULL);
	return (ssize_t)len;
}
#endif

/* ---- the target -------------------------------------------------------- */

static void check_parsers(const char *v)
{
	size_t a = 0x5a5a, b = 0x5a5a;
	int ra = rdmalloc_parse_size(v, &a), rb = ref_size(v, &b);
	if (ra != rb)
		finding(ra ? "rdmalloc_parse_size refuses what the model accepts"
			   : "rdmalloc_parse_size accepts what the model refuses", v);
	if (ra == 0 && a != b)
		finding("rdmalloc_parse_size gives another value than the model", v);
	if (ra != 0 && a != 0x5a5a)
		finding("rdmalloc_parse_size wrote its output on failure", v);
	unsigned x = 0xa5, y = 0xa5;
	ra = rdmalloc_parse_access(v, &x), rb = ref_access(v, &y);
	if (ra != rb)
		finding(ra ? "rdmalloc_parse_access refuses what the model accepts"
			   : "rdmalloc_parse_access accepts what the model refuses", v);
	if (ra == 0 && (x != y || !rdmalloc_access_valid(x)))
		finding("rdmalloc_parse_access gives another value than the model", v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned mask = data[0];
	/* Values: NUL-terminated copies of the NUL-separated fields. */
	char *buf = malloc(size);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = '\0';
	char *field[NOPT];
	size_t nf = 0, pos = 0;
	while (nf < NOPT) {
		field[nf++] = buf + pos;
		pos += strlen(buf + pos) + 1;
		if (pos >= size)
			break;
	}
	for (size_t i = nf; i < NOPT; i++)
		field[i] = buf + size - 1; /* "" */
	for (size_t i = 0; i < NOPT; i++)
		vals[i] = (mask >> (i % 8)) & 1 ? field[i] : NULL;

	for (size_t i = 0; i < NOPT; i++)
		check_parsers(field[i]);

	/* The whole parser: each field the model's value, or the default. */
	struct rdmalloc_options o, def;
	const char *saved[NOPT];
	memcpy(saved, vals, sizeof(saved));
	memset(vals, 0, sizeof(vals));
	if (rdmalloc_options_parse(&def, get) != 0)
		finding("the defaults do not parse", NULL);
	memcpy(vals, saved, sizeof(saved));
	memset(&o, 0xee, sizeof(o));
	int bad = rdmalloc_options_parse(&o, get), want_bad = 0;
	struct rdmalloc_options m = def;
	size_t idx = 0;
#define MODEL_(NAME, field, parser, def, doc)                                              \
	do {                                                                               \
		const char *v_ = vals[idx++];                                              \
		if (v_ && ref_##parser(v_, &m.field))                                      \
			want_bad++;                                                        \
		if (!same_##parser(&o.field, &m.field))                                    \
			finding("RDMALLOC_" #NAME " differs from the model", v_);          \
	} while (0);
	RDMALLOC_OPTIONS(MODEL_)
#undef MODEL_
	if (bad != want_bad)
		finding("rdmalloc_options_parse counts another number of bad values", vals[0]);
	free(buf);
	return 0;
}
