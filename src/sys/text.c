/* SPDX-License-Identifier: MIT */
/* text.c - numbers and strings for people and for JSON (text.h). */
#include "text.h"

#include <inttypes.h>

#include "compiler.h"

char *rdmalloc_text_bytes(char *buf, size_t len, uint64_t v)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	if (v < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", v);
		return buf;
	}
	double x = (double)v / 1024;
	size_t i = 0;
	while (x >= 1024 && i + 1 < ARRAY_SIZE(units)) {
		x /= 1024;
		i++;
	}
	snprintf(buf, len, "%.1f %s", x, units[i]);
	return buf;
}

int rdmalloc_text_json(FILE *out, const char *s)
{
	int rc = 0;
	for (; *s && rc >= 0; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			rc = fprintf(out, "\\%c", c);
		else if (c < 0x20)
			rc = fprintf(out, "\\u%04x", c);
		else
			rc = fputc(c, out) == EOF ? -1 : 0;
	}
	return rc;
}
