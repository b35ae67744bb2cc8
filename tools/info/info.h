/* SPDX-License-Identifier: MIT */
/* info.h - the sections of rdmalloc-info, one file each. */
#ifndef RDMALLOC_INFO_H
#define RDMALLOC_INFO_H

/* Every option: default, value in force, source; unknown RDMALLOC_* names. */
void info_options(void);
/* Whether @value is valid for the option @name (RDMALLOC_*): the
 * library's own parser, with no message. */
int info_option_valid(const char *name, const char *value);
/* RDMA devices and ports, which one the library would use; huge pages;
 * RLIMIT_MEMLOCK. */
void info_devices(const char *device);
void info_system(void);
/* Address space: measured in child processes of this program, plain,
 * under the drop-in @preload (may be NULL) and with librdmalloc.so
 * initialised. */
void info_space(const char *self, const char *preload);
/* The child's side of info_space(): print "VMSIZE_KIB LARGEST_KIB..." for
 * this process, after initialising librdmalloc.so if @api. */
int info_space_probe(int api);

#endif
