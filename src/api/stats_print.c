/* SPDX-License-Identifier: MIT */
/*
 * stats_print.c - rdma_malloc_stats_print(): the stats as text for people
 * (units, zero rows left out, one aligned column, a header naming the
 * process and the library) or as one JSON line with every field.  Works
 * for any RDMA_MALLOC_STATS_FIELDS list: the unit of a field comes from
 * its name (*_bytes and bytes_* are bytes, *_ns nanoseconds).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h"
#include "rdma_malloc.h"
#include "text.h"

static const struct field {
	const char *name, *desc;
	size_t offset;
} fields[] = {
#define FIELD_(name, kind, desc) { #name, desc, offsetof(struct rdma_malloc_stats, name) },
	RDMA_MALLOC_STATS_FIELDS(FIELD_)
#undef FIELD_
};

enum unit { UNIT_COUNT, UNIT_BYTES, UNIT_NS };

static enum unit unit_of(const char *name)
{
	size_t n = strlen(name);
	if ((n > 6 && !strcmp(name + n - 6, "_bytes")) || !strncmp(name, "bytes_", 6))
		return UNIT_BYTES;
	if (n > 3 && !strcmp(name + n - 3, "_ns"))
		return UNIT_NS;
	return UNIT_COUNT;
}

/* @v in @unit, for people: "3", "512 B", "6.0 MiB", "950 ns", "1.2 ms". */
static void human(char *buf, size_t len, uint64_t v, enum unit unit)
{
	if (unit == UNIT_BYTES) {
		rdmalloc_text_bytes(buf, len, v);
	} else if (unit == UNIT_NS && v >= 1000000000) {
		snprintf(buf, len, "%.2f s", (double)v / 1e9);
	} else if (unit == UNIT_NS && v >= 1000000) {
		snprintf(buf, len, "%.1f ms", (double)v / 1e6);
	} else if (unit == UNIT_NS && v >= 1000) {
		snprintf(buf, len, "%.1f \xc2\xb5s", (double)v / 1e3); /* µs */
	} else if (unit == UNIT_NS) {
		snprintf(buf, len, "%" PRIu64 " ns", v);
	} else {
		snprintf(buf, len, "%" PRIu64, v);
	}
}

/* Columns a UTF-8 string takes (µ is two bytes, one column). */
static int columns(const char *s)
{
	int n = 0;
	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

static uint64_t value(const struct rdma_malloc_stats *st, const struct field *f)
{
	uint64_t v;
	memcpy(&v, (const char *)st + f->offset, sizeof(v));
	return v;
}

static int print_text(FILE *out, const struct rdma_malloc_stats *st, int all)
{
	int name_w = 0, value_w = 0, shown = 0;
	char v[32];
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		if (!all && !value(st, &fields[i]))
			continue;
		shown++;
		int n = (int)strlen(fields[i].name);
		name_w = n > name_w ? n : name_w;
		human(v, sizeof(v), value(st, &fields[i]), unit_of(fields[i].name));
		n = columns(v);
		value_w = n > value_w ? n : value_w;
	}
	int rc = fprintf(out, "rdmalloc %s stats of pid %ld (%s): ", rdma_malloc_version(NULL, NULL, NULL),
			 (long)getpid(), program_invocation_short_name);
	if (rc >= 0 && all)
		rc = fprintf(out, "all %zu rows\n", ARRAY_SIZE(fields));
	else if (rc >= 0)
		rc = fprintf(out, "%d of %zu rows, the zero ones left out (RDMALLOC_STATS_ALL=1 shows them)\n", shown,
			     ARRAY_SIZE(fields));
	for (size_t i = 0; i < ARRAY_SIZE(fields) && rc >= 0; i++) {
		uint64_t x = value(st, &fields[i]);
		if (!all && !x)
			continue;
		human(v, sizeof(v), x, unit_of(fields[i].name));
		rc = fprintf(out, "  %-*s  %*s%s  %s\n", name_w, fields[i].name, value_w - columns(v), "", v,
			     fields[i].desc);
	}
	return rc;
}

static int print_json(FILE *out, const struct rdma_malloc_stats *st)
{
	int rc = fprintf(out, "{\"version\": %u", (unsigned)st->version);
	for (size_t i = 0; i < ARRAY_SIZE(fields) && rc >= 0; i++)
		rc = fprintf(out, ", \"%s\": %" PRIu64, fields[i].name, value(st, &fields[i]));
	if (rc >= 0)
		rc = fprintf(out, ", \"pid\": %ld, \"program\": \"", (long)getpid());
	if (rc >= 0)
		rc = rdmalloc_text_json(out, program_invocation_short_name);
	if (rc >= 0)
		rc = fprintf(out, "\", \"library_version\": \"%s\"}\n", rdma_malloc_version(NULL, NULL, NULL));
	return rc;
}

RDMA_EXPORT int rdma_malloc_stats_print(FILE *out, enum rdma_malloc_stats_format format)
{
	unsigned base = (unsigned)format & ~(unsigned)RDMA_MALLOC_STATS_ALL_ROWS;
	if (base != RDMA_MALLOC_STATS_TEXT && base != RDMA_MALLOC_STATS_JSON)
		return EINVAL;
	if (!out)
		out = stderr;
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	int err = rdma_malloc_stats_get(&st);
	if (err)
		return err;
	errno = 0;
	int rc = base == RDMA_MALLOC_STATS_JSON ? print_json(out, &st)
						: print_text(out, &st, ((unsigned)format & RDMA_MALLOC_STATS_ALL_ROWS) != 0);
	if (rc >= 0 && fflush(out) == EOF)
		rc = -1;
	return rc < 0 ? (errno ? errno : EIO) : 0;
}
