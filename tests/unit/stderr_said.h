/* SPDX-License-Identifier: MIT */
/* stderr_said.h - what the code under test wrote to standard error, with
 * criterion's redirection on (.init = cr_redirect_stderr). */
#ifndef STDERR_SAID_H
#define STDERR_SAID_H

#include <criterion/redirect.h>
#include <stdio.h>

/* Everything said so far into @buf (@size bytes, NUL-terminated); @buf. */
static inline const char *stderr_said(char *buf, size_t size)
{
	fflush(stderr);
	size_t n = fread(buf, 1, size - 1, cr_get_redirected_stderr());
	buf[n] = 0;
	return buf;
}

#endif
