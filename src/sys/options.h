/* SPDX-License-Identifier: MIT */
/* options.h - the RDMALLOC_* environment variables, defined once. */
#ifndef RDMALLOC_OPTIONS_H
#define RDMALLOC_OPTIONS_H

#include <stddef.h>

#include "compiler.h"

enum rdmalloc_stats_mode { RDMALLOC_STATS_OFF = 0, RDMALLOC_STATS_ON_TEXT, RDMALLOC_STATS_ON_JSON };

/*
 * X(NAME, field, parser, default, description): the variable is
 * RDMALLOC_<NAME>.  LOG_LEVEL comes first so that warnings about the others
 * obey it.  doc/options.md documents the same table.
 */
#define RDMALLOC_OPTIONS(X)                                                      \
	X(LOG_LEVEL, log_level, loglevel, "warn",                                \
	  "messages shown: none, error, warn, info, debug")                      \
	X(DEVICE, device, device, "",                                            \
	  "RDMA device of the default PD (default: first with an active port)")  \
	X(ACCESS, access, access, "LOCAL_WRITE,REMOTE_READ,REMOTE_WRITE,REMOTE_ATOMIC", \
	  "access flags of the default heap")                                    \
	X(PRELOAD_ACCESS, preload_access, access, "LOCAL_WRITE",                \
	  "access flags of the LD_PRELOAD drop-in's heap (every plain malloc)")  \
	X(PRELOAD_ARENAS, preload_arenas, arenas, "0",                           \
	  "arenas of the drop-in's heap, 1-16 (0: one per online CPU, at most 16)") \
	X(PRELOAD_REGISTER, preload_register, policy, "first-use",              \
	  "when the drop-in's chunks are registered: first-use (when RDMA first needs them) or eager") \
	X(CHUNK_MAX, chunk_max, growth, "auto",                                 \
	  "largest step a heap grows by: auto, 0 or >= 2M (auto: 2M in heaps with big blocks, else 0; 0: jemalloc's series)") \
	X(BIG_BLOCK, big_block, big, "64K",                                    \
	  "the rdma_* heaps' blocks of this size or more are chunks of their own, 4K-1G (0: none)") \
	X(MAX_REGISTERED, max_registered, size, "0",                             \
	  "most bytes of chunks held at once (0: no limit)")                     \
	X(DECAY_MS, decay_ms, decay, "10000",                                    \
	  "ms free pages stay before idle chunks are given back (-1: never, 0: at once)") \
	X(STATS, stats, stats, "0",                                              \
	  "print stats at exit: 0, 1 (text) or json")                            \
	X(STATS_ALL, stats_all, bool, "0",                                       \
	  "the text stats show the rows that are 0 too: 0 or 1")                 \
	X(STATS_FILE, stats_file, path, "",                                      \
	  "file the stats at exit are appended to, %p the pid, %h the host (empty: standard error)") \
	X(HUGEPAGES, hugepages, bool, "0",                                       \
	  "default heap on huge pages (RDMA_HEAP_HUGEPAGES): 0 or 1")             \
	X(RESERVE, reserve, bool, "1",                                           \
	  "register each heap's next chunk ahead, on a background thread: 0 or 1") \
	X(CHECK_FREE, check_free, bool, "0",                                     \
	  "the drop-in's free, realloc and delete abort on a block that is free already: 0 or 1") \
	X(REG_THREADS, reg_threads, arenas, "0",                                 \
	  "threads that share a big chunk's registration (its pages faulted in together, then its PDs registered by the allocating thread), 1-16 (0: one per online CPU, at most 16)")

/*
 * RDMALLOC_* names that are not options: read by rdmalloc's commands
 * (rdmalloc run and info, rdmalloc vm, tools/check-packages), by its build
 * and tests, or the job marker (job.h), without RDMALLOC_: whole names,
 * or prefixes where they end in '_'.  Any other RDMALLOC_* name in the
 * environment is warned about (options_unknown.c);
 * tests/check-names-read.sh finds the names the tree reads and wants each
 * to be an option or here.
 */
#define RDMALLOC_OTHER_NAMES                                                                              \
	"PRELOAD_LIB", "INFO", "VM_", "BUILD_ROOT", "DEBIAN_MIRROR", "FUZZ_", "E2E_", "JOB_NOTED"

#define RDMALLOC_DEVICE_NAME_MAX 64
#define RDMALLOC_PATH_MAX 256 /* RDMALLOC_STATS_FILE */
#define RDMALLOC_ARENAS_MAX 16 /* RDMALLOC_PRELOAD_ARENAS */
#define RDMALLOC_DECAY_MS_MAX 1000000000L /* RDMALLOC_DECAY_MS: about 11 days */

struct rdmalloc_options {
	int log_level;
	char device[RDMALLOC_DEVICE_NAME_MAX];
	unsigned int access;
	unsigned int preload_access;
	unsigned int preload_arenas;
	int preload_register; /* enum rdmalloc_preload_register */
	size_t chunk_max;
	size_t big_block; /* 0: none */
	size_t max_registered;
	long decay_ms;
	int stats;
	int stats_all;
	char stats_file[RDMALLOC_PATH_MAX];
	int hugepages;
	int reserve;
	int check_free;
	unsigned int reg_threads;
};

/* RDMALLOC_PRELOAD_REGISTER */
enum rdmalloc_preload_register { RDMALLOC_PRELOAD_FIRST_USE = 0, RDMALLOC_PRELOAD_EAGER };
#define RDMALLOC_BIG_BLOCK_MIN ((size_t)4 << 10)
/* RDMALLOC_CHUNK_MAX=auto: RDMALLOC_CHUNK_SMALL in a heap whose big blocks
 * are chunks of their own, jemalloc's series elsewhere (heap.c). */
#define RDMALLOC_CHUNK_MAX_AUTO SIZE_MAX
#define RDMALLOC_CHUNK_SMALL ((size_t)2 << 20)
#define RDMALLOC_BIG_BLOCK_MAX ((size_t)1 << 30)

typedef const char *(*rdmalloc_getenv_fn)(const char *name);

/*
 * Fill @opts from the environment read through @get (getenv for real use).
 * A bad value is one warning naming the variable; the default is kept.
 * Returns the number of bad values.
 */
RDMALLOC_TESTABLE int rdmalloc_options_parse(struct rdmalloc_options *opts, rdmalloc_getenv_fn get);

/* Parsers, exposed for the tests and the fuzz target; 0 or -1. */
RDMALLOC_TESTABLE int rdmalloc_parse_size(const char *s, size_t *out);
RDMALLOC_TESTABLE int rdmalloc_parse_access(const char *s, unsigned int *out);
/* 0/1, off/on, no/yes, false/true (any case). */
RDMALLOC_TESTABLE int rdmalloc_parse_bool(const char *s, int *out);

/*
 * Warn, once per job, about each RDMALLOC_* name of @envp that is neither
 * an option nor one of RDMALLOC_OTHER_NAMES, naming the nearest option.
 * Returns how many there were.
 */
RDMALLOC_TESTABLE int rdmalloc_options_warn_unknown(char *const *envp);
/* Whether NAME (without RDMALLOC_) is an option or one of the other names;
 * the option nearest to it by edit distance. */
RDMALLOC_TESTABLE int rdmalloc_option_known(const char *name);
RDMALLOC_TESTABLE const char *rdmalloc_option_nearest(const char *name);
RDMALLOC_TESTABLE unsigned rdmalloc_edit_distance(const char *a, const char *b);

/* The options in force (parsed at initialisation). */
extern struct rdmalloc_options rdmalloc_opts;

/* The access bits a heap may ask for, and whether a set is one ibv_reg_mr
 * accepts (remote write and atomics need local write). */
#define RDMALLOC_ACCESS_ALLOWED 0x1fu /* LOCAL_WRITE..MW_BIND */
/* The bits that grant a peer something: REMOTE_WRITE, _READ, _ATOMIC. */
#define RDMALLOC_ACCESS_REMOTE 0x0eu
RDMALLOC_TESTABLE int rdmalloc_access_valid(unsigned int access);

#endif
