/* SPDX-License-Identifier: MIT */
/*
 * job.h - messages said once per job, not once per process: a job (a
 * shell script, an MPI rank's tree) is a process and every process it
 * starts, which inherit its environment.
 */
#ifndef RDMALLOC_JOB_H
#define RDMALLOC_JOB_H

/*
 * The environment variable that carries what a job was already told: keys
 * separated by commas, set by the first process that says each message
 * and inherited by its children (doc/preload.md, "Messages").
 * `rdmalloc run --quiet` sets it to "no-device" before the program starts.
 */
#define RDMALLOC_JOB_NOTED "RDMALLOC_JOB_NOTED"

/*
 * Say a message about @key at warning level if no ancestor said it (then
 * record @key for this process's children), else at info level.  Called
 * at initialisation.  Recording calls setenv(), which is not safe against
 * another thread's getenv() (glibc 2.36): it is done only while the
 * process has one thread (the drop-in's core initialisation runs before
 * main(); RDMA's, and the library's without the drop-in, at the first call
 * that needs it, when there may be others).  Unrecorded, the children say
 * it again.
 */
void rdmalloc_log_job_once(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether @list (comma-separated) holds @key; exposed for the tests. */
int rdmalloc_job_has(const char *list, const char *key);

#endif
