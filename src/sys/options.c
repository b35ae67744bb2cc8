/* SPDX-License-Identifier: MIT */
/* options.c - the RDMALLOC_* environment variables, defined once. */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"

struct rdmalloc_options rdmalloc_opts;

int rdmalloc_access_valid(unsigned int access)
{
	_Static_assert(RDMALLOC_ACCESS_REMOTE ==
			       (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC),
		       "RDMALLOC_ACCESS_REMOTE is the remote access bits");
	if (access & ~RDMALLOC_ACCESS_ALLOWED)
		return 0;
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return 0;
	return 1;
}

int rdmalloc_parse_size(const char *s, size_t *out)
{
	if (!s || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	unsigned shift = 0;
	switch (toupper((unsigned char)*end)) {
	case 'K': shift = 10; end++; break;
	case 'M': shift = 20; end++; break;
	case 'G': shift = 30; end++; break;
	case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0')
		return -1;
	if (shift && v > (SIZE_MAX >> shift))
		return -1;
	if (v > SIZE_MAX)
		return -1;
	*out = (size_t)(v << shift);
	return 0;
}

static const struct {
	const char *name;
	unsigned int bit;
} access_names[] = {
	{ "LOCAL_WRITE", IBV_ACCESS_LOCAL_WRITE },
	{ "REMOTE_WRITE", IBV_ACCESS_REMOTE_WRITE },
	{ "REMOTE_READ", IBV_ACCESS_REMOTE_READ },
	{ "REMOTE_ATOMIC", IBV_ACCESS_REMOTE_ATOMIC },
	{ "MW_BIND", IBV_ACCESS_MW_BIND },
};

/* "LOCAL_WRITE,REMOTE_READ", names with or without IBV_ACCESS_, any case,
 * separated by ',', '|', '+' or blanks.  "none" or "0" is the empty set
 * (registered for the NIC's own use only through the lkey: sends from it). */
int rdmalloc_parse_access(const char *s, unsigned int *out)
{
	if (!s)
		return -1;
	unsigned int acc = 0;
	int words = 0;
	const char *p = s;
	for (;;) {
		while (*p == ',' || *p == '|' || *p == '+' || isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		const char *w = p;
		while (*p && *p != ',' && *p != '|' && *p != '+' && !isspace((unsigned char)*p))
			p++;
		size_t n = (size_t)(p - w);
		if (n > 11 && strncasecmp(w, "IBV_ACCESS_", 11) == 0) {
			w += 11;
			n -= 11;
		}
		int found = 0;
		if ((n == 4 && strncasecmp(w, "none", 4) == 0) || (n == 1 && *w == '0'))
			found = 1;
		for (size_t i = 0; !found && i < ARRAY_SIZE(access_names); i++) {
			if (strlen(access_names[i].name) == n &&
			    strncasecmp(w, access_names[i].name, n) == 0) {
				acc |= access_names[i].bit;
				found = 1;
			}
		}
		if (!found)
			return -1;
		words++;
	}
	if (!words || !rdmalloc_access_valid(acc))
		return -1;
	*out = acc;
	return 0;
}

static int parse_loglevel(const char *s, int *out)
{
	static const char *const names[] = { "none", "error", "warn", "info", "debug" };
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (strcasecmp(s, names[i]) == 0 || (s[0] == (char)('0' + i) && !s[1])) {
			*out = (int)i;
			return 0;
		}
	}
	if (strcasecmp(s, "warning") == 0) {
		*out = RDMALLOC_LOG_WARN;
		return 0;
	}
	return -1;
}

static int parse_stats(const char *s, int *out)
{
	if (!strcmp(s, "0") || !strcasecmp(s, "off") || !strcasecmp(s, "no") || !strcasecmp(s, "false"))
		*out = RDMALLOC_STATS_OFF;
	else if (!strcmp(s, "1") || !strcasecmp(s, "on") || !strcasecmp(s, "yes") ||
		 !strcasecmp(s, "true") || !strcasecmp(s, "text"))
		*out = RDMALLOC_STATS_ON_TEXT;
	else if (!strcasecmp(s, "json"))
		*out = RDMALLOC_STATS_ON_JSON;
	else
		return -1;
	return 0;
}

int rdmalloc_parse_bool(const char *s, int *out)
{
	if (!s)
		return -1;
	if (!strcmp(s, "0") || !strcasecmp(s, "off") || !strcasecmp(s, "no") || !strcasecmp(s, "false"))
		*out = 0;
	else if (!strcmp(s, "1") || !strcasecmp(s, "on") || !strcasecmp(s, "yes") || !strcasecmp(s, "true"))
		*out = 1;
	else
		return -1;
	return 0;
}

static int parse_device(const char *s, char (*out)[RDMALLOC_DEVICE_NAME_MAX])
{
	size_t n = strlen(s);
	if (n >= sizeof(*out))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isgraph((unsigned char)s[i]))
			return -1;
	memcpy(*out, s, n + 1);
	return 0;
}

/* A file name: any bytes but control characters, shorter than the field;
 * empty is none. */
static int parse_path(const char *s, char (*out)[RDMALLOC_PATH_MAX])
{
	size_t n = strlen(s);
	if (n >= sizeof(*out))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (iscntrl((unsigned char)s[i]))
			return -1;
	memcpy(*out, s, n + 1);
	return 0;
}

/* A growth step: auto, 0 (jemalloc's series) or at least one 2 MiB
 * granule. */
static int parse_growth(const char *s, size_t *out)
{
	size_t v;
	if (!strcasecmp(s, "auto")) {
		*out = RDMALLOC_CHUNK_MAX_AUTO;
		return 0;
	}
	if (rdmalloc_parse_size(s, &v) || (v != 0 && v < ((size_t)2 << 20)))
		return -1;
	*out = v;
	return 0;
}

/* RDMALLOC_PRELOAD_REGISTER: first-use or eager, any case. */
static int parse_policy(const char *s, int *out)
{
	if (!strcasecmp(s, "first-use"))
		*out = RDMALLOC_PRELOAD_FIRST_USE;
	else if (!strcasecmp(s, "eager"))
		*out = RDMALLOC_PRELOAD_EAGER;
	else
		return -1;
	return 0;
}

/* The smallest big block: 0 (none) or a size from RDMALLOC_BIG_BLOCK_MIN
 * to RDMALLOC_BIG_BLOCK_MAX. */
static int parse_big(const char *s, size_t *out)
{
	size_t v;
	if (rdmalloc_parse_size(s, &v) || (v && (v < RDMALLOC_BIG_BLOCK_MIN || v > RDMALLOC_BIG_BLOCK_MAX)))
		return -1;
	*out = v;
	return 0;
}

/* A count of arenas: 0 (automatic) to RDMALLOC_ARENAS_MAX, decimal. */
static int parse_arenas(const char *s, unsigned int *out)
{
	unsigned v = 0;
	size_t i = 0;
	for (; s[i] >= '0' && s[i] <= '9' && i < 3; i++)
		v = v * 10 + (unsigned)(s[i] - '0');
	if (i == 0 || s[i] || v > RDMALLOC_ARENAS_MAX)
		return -1;
	*out = v;
	return 0;
}

/* A decay time in ms: -1 (never) to RDMALLOC_DECAY_MS_MAX, decimal. */
static int parse_decay(const char *s, long *out)
{
	if (!strcmp(s, "-1")) {
		*out = -1;
		return 0;
	}
	long v = 0;
	size_t i = 0;
	for (; s[i] >= '0' && s[i] <= '9'; i++) {
		v = v * 10 + (s[i] - '0');
		if (v > RDMALLOC_DECAY_MS_MAX)
			return -1;
	}
	if (i == 0 || s[i])
		return -1;
	*out = v;
	return 0;
}

#define parse_size rdmalloc_parse_size
#define parse_access rdmalloc_parse_access
#define parse_bool rdmalloc_parse_bool

int rdmalloc_options_parse(struct rdmalloc_options *o, rdmalloc_getenv_fn get)
{
	int bad = 0;
	memset(o, 0, sizeof(*o));
#define SET_DEFAULT(NAME, field, parser, def, doc)                                  \
	if (parse_##parser(def, &o->field))                                         \
		rdmalloc_fatal("built-in default of RDMALLOC_" #NAME " does not parse");
	RDMALLOC_OPTIONS(SET_DEFAULT)
#undef SET_DEFAULT
#define READ_ENV(NAME, field, parser, def, doc)                                     \
	do {                                                                        \
		const char *v_ = get("RDMALLOC_" #NAME);                           \
		if (v_ && parse_##parser(v_, &o->field)) {                          \
			bad++;                                                      \
			rdmalloc_log(RDMALLOC_LOG_WARN,                             \
				     "RDMALLOC_" #NAME "=\"%.64s\" is not valid (%s); " \
				     "keeping the default \"%s\"", v_, doc, def);      \
		}                                                                   \
		if (!strcmp(#NAME, "LOG_LEVEL"))                                    \
			rdmalloc_log_set_level(o->log_level);                      \
	} while (0);
	RDMALLOC_OPTIONS(READ_ENV)
#undef READ_ENV
	return bad;
}
