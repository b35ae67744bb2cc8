/* SPDX-License-Identifier: MIT */
/*
 * info_options.c - rdmalloc-info's options: the table of src/sys/options.h
 * (not a copy), each option's default, the value in force and where it
 * came from, judged by the library's own parser; and the RDMALLOC_* names
 * that are no option, with the nearest one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "log.h"
#include "options.h"
#include "out.h"

extern char **environ;

static const struct option_row {
	const char *name, *def, *doc;
} table[] = {
#define ROW_(NAME, field, parser, def, doc) { "RDMALLOC_" #NAME, def, doc },
	RDMALLOC_OPTIONS(ROW_)
#undef ROW_
};

static const char *probe_name, *probe_value;

/* The environment of a probe: the one variable, and no messages. */
static const char *probe_get(const char *name)
{
	if (!strcmp(name, probe_name))
		return probe_value;
	if (!strcmp(name, "RDMALLOC_LOG_LEVEL"))
		return "none";
	return NULL;
}

int info_option_valid(const char *name, const char *value)
{
	int saved = rdmalloc_log_level();
	rdmalloc_log_set_level(RDMALLOC_LOG_NONE);
	probe_name = name;
	probe_value = value;
	struct rdmalloc_options o;
	int bad = rdmalloc_options_parse(&o, probe_get);
	rdmalloc_log_set_level(saved);
	return bad == 0;
}

void info_options(void)
{
	int text = !out_json();
	if (text)
		printf("options (value in force, where it came from; default):\n");
	else
		out_list("options");
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		const struct option_row *r = &table[i];
		const char *env = getenv(r->name);
		int valid = env && info_option_valid(r->name, env);
		const char *value = valid ? env : r->def;
		const char *source = !env ? "default" : valid ? "environment" : "default, the environment's is not valid";
		if (text) {
			printf("  %-25s %-12s  %s", r->name, *value ? value : "\"\"", source);
			if (env && !valid)
				printf(": \"%s\"", env);
			if (env)
				printf(" (default %s)", *r->def ? r->def : "\"\"");
			printf("\n");
			continue;
		}
		out_begin(NULL);
		out_str("name", r->name);
		out_str("default", r->def);
		out_str("value", value);
		out_str("source", valid ? "environment" : "default");
		if (env && !valid)
			out_str("invalid", env);
		out_str("meaning", r->doc);
		out_end();
	}
	if (!text)
		out_list_end();

	int unknown = 0;
	if (!text)
		out_list("unknown_names");
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "RDMALLOC_", 9))
			continue;
		char name[80];
		size_t n = strcspn(*e + 9, "=");
		if (n >= sizeof(name))
			n = sizeof(name) - 1;
		memcpy(name, *e + 9, n);
		name[n] = '\0';
		if (rdmalloc_option_known(name))
			continue;
		char full[96], nearest[96];
		snprintf(full, sizeof(full), "RDMALLOC_%s", name);
		snprintf(nearest, sizeof(nearest), "RDMALLOC_%s", rdmalloc_option_nearest(name));
		if (text) {
			if (!unknown)
				printf("not options (ignored by the library):\n");
			printf("  %-25s did you mean %s?\n", full, nearest);
		} else {
			out_begin(NULL);
			out_str("name", full);
			out_str("nearest", nearest);
			out_end();
		}
		unknown++;
	}
	if (!text)
		out_list_end();
}
