/* SPDX-License-Identifier: MIT */
/* out.c - rdmalloc-info's output, text or JSON (out.h). */
#include "out.h"

#include <inttypes.h>
#include <stdio.h>

#include "text.h"

static int json;
static int depth;
static int first[16] = { 1 }; /* JSON: no comma before the first member */

int out_json(void)
{
	return json;
}

void out_init(int as_json)
{
	json = as_json;
	if (json)
		fputs("{", stdout);
}

static void json_str(const char *s)
{
	putchar('"');
	rdmalloc_text_json(stdout, s);
	putchar('"');
}

/* JSON: the comma and the key; text: the indentation and the key. */
static void key(const char *k)
{
	if (json) {
		if (!first[depth])
			putchar(',');
		first[depth] = 0;
		if (k) {
			json_str(k);
			putchar(':');
		}
	} else {
		first[depth] = 0;
		printf("%*s", 2 * depth, "");
		if (k)
			printf("%s: ", k);
	}
}

static void push(void)
{
	depth++;
	first[depth] = 1;
}

void out_begin(const char *k)
{
	if (json) {
		key(k);
		putchar('{');
	} else if (k) {
		first[depth] = 0;
		printf("%*s%s:\n", 2 * depth, "", k);
	} else {
		first[depth] = 0;
		printf("%*s-\n", 2 * depth, "");
	}
	push();
}

void out_end(void)
{
	depth--;
	if (json)
		putchar('}');
}

void out_list(const char *k)
{
	if (json) {
		key(k);
		putchar('[');
	} else {
		first[depth] = 0;
		printf("%*s%s:\n", 2 * depth, "", k);
	}
	push();
}

void out_list_end(void)
{
	int empty = first[depth];
	depth--;
	if (json)
		putchar(']');
	else if (empty)
		printf("%*s(none)\n", 2 * depth + 2, "");
}

void out_str(const char *k, const char *v)
{
	key(k);
	if (json)
		json_str(v);
	else
		printf("%s\n", *v ? v : "(empty)");
}

void out_u64(const char *k, uint64_t v, const char *text)
{
	key(k);
	if (json)
		printf("%" PRIu64, v);
	else if (text)
		printf("%s\n", text);
	else
		printf("%" PRIu64 "\n", v);
}

void out_bool(const char *k, int v)
{
	key(k);
	printf(json ? "%s" : "%s\n", v ? (json ? "true" : "yes") : (json ? "false" : "no"));
}

void out_null(const char *k, const char *text)
{
	key(k);
	printf(json ? "null" : "%s\n", text);
}

void out_finish(void)
{
	if (json)
		puts("}");
}

const char *out_bytes(uint64_t v, char *buf, int len)
{
	return rdmalloc_text_bytes(buf, (size_t)len, v);
}
