/* SPDX-License-Identifier: MIT */
/* quiet_write.h - forced into the libFuzzer build (-include): src/sys/log.c's
 * write(2) goes to the fuzz target, which checks the line and drops it. */
#include <sys/types.h>
ssize_t rdmalloc_fuzz_write(int fd, const void *buf, size_t len);
#define write(fd, buf, len) rdmalloc_fuzz_write(fd, buf, len)
#define RDMALLOC_FUZZ_QUIET 1
