/* SPDX-License-Identifier: MIT */
/*
 * out.h - what rdmalloc-info prints, as indented text for people or as one
 * JSON document for scripts, through one set of calls.
 */
#ifndef RDMALLOC_INFO_OUT_H
#define RDMALLOC_INFO_OUT_H

#include <stdint.h>

/* Chooses the form; call once, before anything else. */
void out_init(int json);
/* Whether the form is JSON (a section may print its own text table). */
int out_json(void);
/* An object (text: a heading) or a list of objects under @key; @key is
 * NULL for an object inside a list. */
void out_begin(const char *key);
void out_end(void);
void out_list(const char *key);
void out_list_end(void);
/* key: value.  @text, when not NULL, is what people see instead of the raw
 * value (JSON keeps the raw value). */
void out_str(const char *key, const char *value);
void out_u64(const char *key, uint64_t value, const char *text);
void out_bool(const char *key, int value);
void out_null(const char *key, const char *text);
/* Closes the document. */
void out_finish(void);

/* "1.5 GiB", "512 B" */
const char *out_bytes(uint64_t v, char *buf, int len);

#endif
