/* SPDX-License-Identifier: MIT */
/* text.h - numbers and strings for people and for JSON, written once for
 * the stats report (api/stats_print.c) and `rdmalloc info` (tools/info). */
#ifndef RDMALLOC_TEXT_H
#define RDMALLOC_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* @v bytes for people into @buf: "512 B", "6.0 MiB"; returns @buf. */
char *rdmalloc_text_bytes(char *buf, size_t len, uint64_t v);
/* @s as the contents of a JSON string (quotes not included): 0, or < 0
 * when @out failed. */
int rdmalloc_text_json(FILE *out, const char *s);

#endif
