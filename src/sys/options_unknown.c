/* SPDX-License-Identifier: MIT */
/*
 * options_unknown.c - RDMALLOC_* names in the environment that are no
 * option: a misspelt option is otherwise silently ignored.  Each is warned
 * about once per job (job.h), naming the nearest option.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "compiler.h"
#include "job.h"
#include "options.h"

static const char *const option_names[] = {
#define NAME_(NAME, field, parser, def, doc) #NAME,
	RDMALLOC_OPTIONS(NAME_)
#undef NAME_
};

/* Read by rdmalloc's commands and tests, or the job marker: not options.
 * An entry ending in '_' is a prefix, any other a whole name. */
static const char *const other_names[] = { RDMALLOC_OTHER_NAMES };

#define NAME_MAX_ 64 /* longer names are compared by their first 64 bytes */

/* Optimal string alignment distance (insertions, deletions, substitutions,
 * swaps of neighbours), letters compared without case; no allocation. */
RDMALLOC_TESTABLE unsigned rdmalloc_edit_distance(const char *a, const char *b)
{
	size_t n = strnlen(a, NAME_MAX_), m = strnlen(b, NAME_MAX_);
	unsigned rows[3][NAME_MAX_ + 1];
	unsigned *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
	for (size_t j = 0; j <= m; j++)
		prev[j] = (unsigned)j;
	for (size_t i = 1; i <= n; i++) {
		cur[0] = (unsigned)i;
		for (size_t j = 1; j <= m; j++) {
			int same = toupper((unsigned char)a[i - 1]) == toupper((unsigned char)b[j - 1]);
			unsigned d = prev[j - 1] + !same;
			if (prev[j] + 1 < d)
				d = prev[j] + 1;
			if (cur[j - 1] + 1 < d)
				d = cur[j - 1] + 1;
			if (i > 1 && j > 1 && toupper((unsigned char)a[i - 1]) == toupper((unsigned char)b[j - 2]) &&
			    toupper((unsigned char)a[i - 2]) == toupper((unsigned char)b[j - 1]) && prev2[j - 2] + 1 < d)
				d = prev2[j - 2] + 1;
			cur[j] = d;
		}
		unsigned *t = prev2;
		prev2 = prev;
		prev = cur;
		cur = t;
	}
	return prev[m];
}

const char *rdmalloc_option_nearest(const char *name)
{
	const char *best = option_names[0];
	unsigned best_d = ~0u;
	for (size_t i = 0; i < ARRAY_SIZE(option_names); i++) {
		unsigned d = rdmalloc_edit_distance(name, option_names[i]);
		if (d < best_d) {
			best_d = d;
			best = option_names[i];
		}
	}
	return best;
}

int rdmalloc_option_known(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(option_names); i++)
		if (!strcmp(name, option_names[i]))
			return 1;
	for (size_t i = 0; i < ARRAY_SIZE(other_names); i++) {
		size_t n = strlen(other_names[i]);
		if (other_names[i][n - 1] == '_' ? !strncmp(name, other_names[i], n) : !strcmp(name, other_names[i]))
			return 1;
	}
	return 0;
}

int rdmalloc_options_warn_unknown(char *const *envp)
{
	static const char prefix[] = "RDMALLOC_";
	int unknown = 0;
	for (char *const *e = envp; e && *e; e++) {
		if (strncmp(*e, prefix, sizeof(prefix) - 1))
			continue;
		const char *name = *e + sizeof(prefix) - 1;
		const char *eq = strchr(name, '=');
		char n[NAME_MAX_ + 1];
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		if (len > NAME_MAX_)
			len = NAME_MAX_;
		memcpy(n, name, len);
		n[len] = '\0';
		if (rdmalloc_option_known(n))
			continue;
		unknown++;
		char key[sizeof(prefix) + NAME_MAX_];
		snprintf(key, sizeof(key), "%s%s", prefix, n);
		rdmalloc_log_job_once(key, "%s is not an rdmalloc option and is ignored; did you mean %s%s?",
				      key, prefix, rdmalloc_option_nearest(n));
	}
	return unknown;
}
