/* SPDX-License-Identifier: MIT */
/* test_options.c - RDMALLOC_* parsing and the stats interface. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "counters.h"
#include "fake_verbs.h"
#include "log.h"
#include "options.h"
#include "own_stack.h"
#include "reserve.h"
#include "rdma_malloc.h"

Test(options, sizes)
{
	struct { const char *in; size_t out; } ok[] = {
		{ "0", 0 }, { "4096", 4096 }, { "4k", 4096 }, { "4K", 4096 }, { "2M", 2u << 20 },
		{ "3G", (size_t)3 << 30 }, { "1T", (size_t)1 << 40 }, { "8MiB", 8u << 20 },
		{ "8MB", 8u << 20 }, { "100b", 100 },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		size_t v = 1;
		cr_assert_eq(rdmalloc_parse_size(ok[i].in, &v), 0, "\"%s\"", ok[i].in);
		cr_assert_eq(v, ok[i].out, "\"%s\" gave %zu", ok[i].in, v);
	}
	const char *bad[] = { "", "-1", "k", "1X", "1KK", "2 M", "99999999999999999999",
			      "20000000T", " 1", "0x10", "1.5M" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t v = 12345;
		cr_assert_eq(rdmalloc_parse_size(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
		cr_assert_eq(v, 12345);
	}
}

/* Names that are not options: whole names, prefixes where they end in '_'
 * (RDMALLOC_OTHER_NAMES); a name merely starting with a whole one is
 * warned about like any other. */
Test(options, other_names_whole_or_prefix)
{
	const char *known[] = { "DECAY_MS", "INFO", "PRELOAD_LIB", "JOB_NOTED", "VM_HOSTS", "VM_", "E2E_CHILD",
				"FUZZ_SECONDS", "DEBIAN_MIRROR" };
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		cr_assert(rdmalloc_option_known(known[i]), "%s not known", known[i]);
	const char *unknown[] = { "STAT", "INFOS", "INFO_LEVEL", "PRELOAD_LIBS", "JOB_NOTEDX", "VM", "DECAY_MSX",
				  "DEBIAN_MIRRORS", "" };
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
		cr_assert(!rdmalloc_option_known(unknown[i]), "\"%s\" known", unknown[i]);
}

Test(options, access_lists)
{
	unsigned v;
	cr_assert_eq(rdmalloc_parse_access("LOCAL_WRITE,REMOTE_READ", &v), 0);
	cr_assert_eq(v, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(rdmalloc_parse_access("ibv_access_local_write | remote_write", &v), 0);
	cr_assert_eq(v, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	cr_assert_eq(rdmalloc_parse_access("none", &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(rdmalloc_parse_access(" remote_read ", &v), 0);
	cr_assert_eq(v, IBV_ACCESS_REMOTE_READ);
	const char *bad[] = { "", ",", "REMOTE_WRITE", "REMOTE_ATOMIC", "LOCAL", "LOCAL_WRITE,bogus",
			      "ON_DEMAND", "LOCAL_WRITEX" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(rdmalloc_parse_access(bad[i], &v), -1, "\"%s\" accepted", bad[i]);
}

static const char *env_vals[][2] = {
	{ "RDMALLOC_LOG_LEVEL", "info" }, { "RDMALLOC_DEVICE", "mlx5_0" },
	{ "RDMALLOC_ACCESS", "LOCAL_WRITE" }, { "RDMALLOC_CHUNK_MAX", "64M" },
	{ "RDMALLOC_MAX_REGISTERED", "1G" }, { "RDMALLOC_STATS", "json" },
};
static const char *good_env(const char *name)
{
	for (size_t i = 0; i < sizeof(env_vals) / sizeof(env_vals[0]); i++)
		if (!strcmp(env_vals[i][0], name))
			return env_vals[i][1];
	return NULL;
}

Test(options, every_option_is_read)
{
	struct rdmalloc_options o;
	cr_assert_eq(rdmalloc_options_parse(&o, good_env), 0);
	cr_assert_eq(o.log_level, 3);
	cr_assert_str_eq(o.device, "mlx5_0");
	cr_assert_eq(o.access, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_eq(o.chunk_max, 64u << 20);
	cr_assert_eq(o.max_registered, (size_t)1 << 30);
	cr_assert_eq(o.stats, RDMALLOC_STATS_ON_JSON);
}

static const char *no_env(const char *name)
{
	(void)name;
	return NULL;
}

Test(options, defaults)
{
	struct rdmalloc_options o;
	cr_assert_eq(rdmalloc_options_parse(&o, no_env), 0);
	cr_assert_eq(o.log_level, 2);
	cr_assert_str_eq(o.device, "");
	cr_assert_eq(o.access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_ATOMIC);
	cr_assert_eq(o.chunk_max, RDMALLOC_CHUNK_MAX_AUTO);
	cr_assert_eq(o.max_registered, 0);
	cr_assert_eq(o.stats, RDMALLOC_STATS_OFF);
}

static const char *bad_env(const char *name)
{
	if (!strcmp(name, "RDMALLOC_ACCESS"))
		return "REMOTE_WRITE";
	if (!strcmp(name, "RDMALLOC_CHUNK_MAX"))
		return "lots";
	if (!strcmp(name, "RDMALLOC_DEVICE"))
		return "a name far too long to be the name of any RDMA device on any machine at all, really";
	return NULL;
}

Test(options, bad_values_warn_and_keep_defaults, .init = cr_redirect_stderr)
{
	struct rdmalloc_options o;
	cr_assert_eq(rdmalloc_options_parse(&o, bad_env), 3);
	cr_assert_eq(o.access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_ATOMIC);
	cr_assert_eq(o.chunk_max, RDMALLOC_CHUNK_MAX_AUTO);
	cr_assert_str_eq(o.device, "");
	fflush(stderr);
	cr_assert_stderr_eq_str(
		"rdmalloc: warning: RDMALLOC_DEVICE=\"a name far too long to be the name of any RDMA device on any "
		"mac\" is not valid (RDMA device of the default PD (default: first with an active "
		"port)); keeping the default \"\"\n"
		"rdmalloc: warning: RDMALLOC_ACCESS=\"REMOTE_WRITE\" is not valid (access flags of the default "
		"heap); keeping the default \"LOCAL_WRITE,REMOTE_READ,REMOTE_WRITE,REMOTE_ATOMIC\"\n"
		"rdmalloc: warning: RDMALLOC_CHUNK_MAX=\"lots\" is not valid (largest step a heap grows by: "
		"auto, 0 or >= 2M (auto: 2M in heaps with big blocks, else 0; 0: jemalloc's series)); keeping the "
		"default \"auto\"\n");
}

Test(options, chunk_max_below_a_granule_is_refused, .init = cr_redirect_stderr)
{
	const char *bad[] = { "1", "4095", "1K", "1M" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("RDMALLOC_CHUNK_MAX", bad[i], 1);
		struct rdmalloc_options o;
		cr_assert_eq(rdmalloc_options_parse(&o, (rdmalloc_getenv_fn)getenv), 1, "\"%s\" accepted", bad[i]);
		cr_assert_eq(o.chunk_max, RDMALLOC_CHUNK_MAX_AUTO);
	}
	/* And the library starts and grows by at most the limit. */
	setenv("RDMALLOC_CHUNK_MAX", "2M", 1);
	fake_verbs_install(1);
	for (int i = 0; i < 40; i++)
		cr_assert(rdma_malloc(100000));
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_leq(st.chunk_bytes, st.chunks * (4u << 20), "chunks larger than the growth limit");
}

Test(options, log_level_none_silences_warnings, .init = cr_redirect_stderr)
{
	setenv("RDMALLOC_LOG_LEVEL", "none", 1);
	setenv("RDMALLOC_ACCESS", "nonsense", 1);
	fake_verbs_install(0); /* would warn about the missing device */
	void *p = rdma_malloc(1);
	rdma_free(p);
	fflush(stderr);
	cr_assert_stderr_eq_str("");
}

Test(options, env_access_sets_the_default_heap)
{
	setenv("RDMALLOC_ACCESS", "LOCAL_WRITE,REMOTE_READ", 1);
	fake_verbs_install(1);
	void *p = rdma_malloc(10);
	cr_assert_eq(fake_find(fake_pd(0), p)->access, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	rdma_free(p);
}

Test(stats, versioning)
{
	struct rdma_malloc_stats st = { .version = 99, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), EINVAL);
	st.version = RDMA_MALLOC_STATS_VERSION;
	st.size = 8;
	cr_assert_eq(rdma_malloc_stats_get(&st), EINVAL);
	cr_assert_eq(rdma_malloc_stats_get(NULL), EINVAL);
	cr_assert_eq(rdma_malloc_stats_print(stdout, 7), EINVAL);
}

Test(stats, counts_follow_activity)
{
	fake_verbs_install(1);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	void *p = rdma_malloc(5 << 20);
	for (int i = 0; i < 10; i++)
		rdma_malloc_keys(p, 1, NULL, NULL, NULL);
	int x;
	rdma_malloc_keys(&x, 1, NULL, NULL, NULL);
	rdmalloc_reserves_settle(); /* the reserve's thread done: counts hold still */
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(st.version, RDMA_MALLOC_STATS_VERSION);
	cr_assert_eq(st.lookups, 10);
	cr_assert_eq(st.lookup_failures, 1);
	cr_assert_eq(st.pds, 1);
	cr_assert_eq(st.heaps, 1);
	cr_assert_geq(st.live_bytes, 5 << 20);
	cr_assert_eq(st.registrations, st.chunks + st.reserve_discards); /* one PD; reserves included */
	cr_assert_eq(st.registered_bytes, st.chunk_bytes);
	cr_assert_eq(st.mrs, fake_live_mrs());
	rdma_free(p);
}

static void *lookup_100(void *p)
{
	for (int i = 0; i < 100; i++)
		rdma_malloc_keys(p, 1, NULL, NULL, NULL);
	int x = 0;
	rdma_malloc_keys(&x, 1, NULL, NULL, NULL);
	return NULL;
}

Test(stats, lookups_of_exited_threads_still_count)
{
	fake_verbs_install(1);
	void *p = rdma_malloc(64);
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, lookup_100, p);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	lookup_100(p); /* and this live thread */
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(st.lookups, 500);
	cr_assert_eq(st.lookup_failures, 5);
	rdma_free(p);
}

/* The lookup counters were blocks in each thread's TLS on a global list,
 * unlinked by a key destructor.  A first lookup in glibc's last round of
 * key destructors (PTHREAD_DESTRUCTOR_ITERATIONS, 4) linked a block that
 * no destructor unlinked, and the next stats read walked into the dead
 * thread's TLS, gone with its stack (found in review, as the thread caches'
 * same bug).  The thread runs on a stack of ours, unmapped after the
 * join. */
static pthread_key_t late_key;
static void *late_p;

static void late_lookup(void *arg)
{
	uintptr_t round = (uintptr_t)arg;
	if (round < 4)
		pthread_setspecific(late_key, (void *)(round + 1));
	else
		rdma_malloc_keys(late_p, 1, NULL, NULL, NULL);
}

static void *arm_late_lookup(void *arg)
{
	pthread_setspecific(late_key, (void *)1);
	return arg;
}

Test(stats, a_lookup_in_the_last_destructor_round)
{
	fake_verbs_install(1);
	late_p = rdma_malloc(64);
	cr_assert(late_p);
	lookup_100(late_p); /* the counters' key is made before late_key: its destructor runs first in a round */
	cr_assert_eq(pthread_key_create(&late_key, late_lookup), 0);
	cr_assert_eq(run_on_own_stack(arm_late_lookup, NULL), 0);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	cr_assert_eq(st.lookups, 101, "%llu lookups", (unsigned long long)st.lookups);
	pthread_key_delete(late_key);
	rdma_free(late_p);
}

/* A fork child has one thread, but the list still linked the blocks of the
 * parent's other threads, in their TLS: once the child's own threads come
 * and go, glibc reuses or unmaps those stacks, and the child's stats read
 * walked into them (a crash, or a list looped by a new thread's block at
 * an old one's address: a hang).  The child keeps the forking thread's
 * slot and gives the others' back. */
enum { FORK_THREADS = 8 };
static pthread_barrier_t fork_up, fork_down;

static void *lookup_then_wait(void *p)
{
	lookup_100(p);
	pthread_barrier_wait(&fork_up);
	pthread_barrier_wait(&fork_down); /* alive across the fork */
	return NULL;
}

static void *nothing(void *arg)
{
	return arg;
}

Test(stats, lookups_in_a_fork_child, .timeout = 60)
{
	fake_verbs_install(1);
	void *p = rdma_malloc(64);
	cr_assert(p);
	pthread_barrier_init(&fork_up, NULL, FORK_THREADS + 1);
	pthread_barrier_init(&fork_down, NULL, FORK_THREADS + 1);
	pthread_t th[FORK_THREADS];
	for (int i = 0; i < FORK_THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, lookup_then_wait, p), 0);
	pthread_barrier_wait(&fork_up);
	lookup_100(p);
	cr_assert_eq(rdmalloc_counters_slots_used(), FORK_THREADS + 1);
	pid_t pid = fork();
	if (pid == 0) {
		if (rdmalloc_counters_slots_used() != 1) {
			fprintf(stderr, "the child holds %u slots, not its own alone\n",
				rdmalloc_counters_slots_used());
			_exit(4);
		}
		/* 8 dead threads' stacks (8 MiB each) are over glibc's 40 MiB
		 * cache: threads created and joined reuse some, unmap others. */
		for (int i = 0; i < 4; i++) {
			pthread_t t;
			if (pthread_create(&t, NULL, i % 2 ? nothing : lookup_100, p) == 0)
				pthread_join(t, NULL);
		}
		lookup_100(p); /* the forking thread's slot, kept */
		struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
		if (rdma_malloc_stats_get(&st))
			_exit(2);
		/* The parent's 909 (the child's past) and the child's 303
		 * (failures: the child has none of the parent's
		 * registrations). */
		uint64_t all = st.lookups + st.lookup_failures;
		if (all != 1212)
			fprintf(stderr, "%llu lookups and failures, not 1212\n", (unsigned long long)all);
		_exit(all == 1212 ? 0 : 3);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	pthread_barrier_wait(&fork_down);
	for (int i = 0; i < FORK_THREADS; i++)
		pthread_join(th[i], NULL);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: %s %d",
		  WIFSIGNALED(status) ? "killed by signal" : "exit",
		  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	rdma_free(p);
}

Test(stats, printers)
{
	fake_verbs_install(1);
	void *p = rdma_malloc(100);
	/* The reserve's thread done (the first growth starts it): the counts
	 * hold still from here.  Before, a reserve chunk made between the text
	 * print and the read below failed the test (1 run in 60 under ASan). */
	rdmalloc_reserves_settle();
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	cr_assert_eq(rdma_malloc_stats_print(f, RDMA_MALLOC_STATS_JSON), 0);
	fclose(f);
	cr_assert(buf[0] == '{' && buf[len - 2] == '}', "not a JSON object: %s", buf);
#define CHECK_JSON_(name, kind, desc) cr_assert(strstr(buf, "\"" #name "\": "), "%s missing", #name);
	RDMA_MALLOC_STATS_FIELDS(CHECK_JSON_)
	free(buf);
	struct rdma_malloc_stats st = { .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(st) };
	f = open_memstream(&buf, &len);
	cr_assert_eq(rdma_malloc_stats_print(f, RDMA_MALLOC_STATS_TEXT), 0);
	fclose(f);
	cr_assert_eq(rdma_malloc_stats_get(&st), 0);
	/* Zero rows are left out. */
	int hidden = 0;
#define CHECK_TEXT_(name, kind, desc)                                                        \
	if (st.name && strcmp(#name, "lookups"))                                             \
		cr_assert(strstr(buf, "  " #name " "), "%s missing:\n%s", #name, buf);        \
	hidden += !strstr(buf, "  " #name " ");
	RDMA_MALLOC_STATS_FIELDS(CHECK_TEXT_)
#undef CHECK_TEXT_
	cr_assert_gt(hidden, 0, "no zero row left out:\n%s", buf);
	free(buf);
	f = open_memstream(&buf, &len);
	cr_assert_eq(rdma_malloc_stats_print(f, RDMA_MALLOC_STATS_TEXT | RDMA_MALLOC_STATS_ALL_ROWS), 0);
	fclose(f);
#define CHECK_TEXT_(name, kind, desc) cr_assert(strstr(buf, "  " #name " "), "%s missing", #name);
	RDMA_MALLOC_STATS_FIELDS(CHECK_TEXT_)
	free(buf);
	rdma_free(p);
}

/* A message to a stderr with no reader left (`prog 2>&1 | head`, a log
 * collector gone): the write's SIGPIPE must not kill the program, which
 * never asked for the message (src/sys/sigpipe.h).  The caller's errno and
 * signal mask are kept; a SIGPIPE the program had pending stays pending. */
static int log_to_nobody(void)
{
	int fds[2], saved = dup(STDERR_FILENO);
	cr_assert(saved >= 0 && pipe(fds) == 0);
	close(fds[0]);
	dup2(fds[1], STDERR_FILENO);
	close(fds[1]);
	errno = ENOMEM;
	rdmalloc_log(RDMALLOC_LOG_ERROR, "to nobody");
	int err = errno;
	dup2(saved, STDERR_FILENO);
	close(saved);
	return err;
}

static int pipe_pending(void)
{
	sigset_t p;
	sigpending(&p);
	return sigismember(&p, SIGPIPE);
}

Test(log, stderr_without_reader_neither_kills_nor_changes_errno)
{
	sigset_t before, after, pipe_set;
	cr_assert_eq(signal(SIGPIPE, SIG_DFL), SIG_DFL, "the test wants SIGPIPE's default action: death");
	pthread_sigmask(SIG_SETMASK, NULL, &before);
	cr_assert_eq(log_to_nobody(), ENOMEM, "errno changed");
	pthread_sigmask(SIG_SETMASK, NULL, &after);
	cr_assert_eq(sigismember(&after, SIGPIPE), sigismember(&before, SIGPIPE), "the signal mask changed");
	cr_assert(!pipe_pending(), "a SIGPIPE of ours left pending");

	/* The program's own SIGPIPE, blocked and pending, is left to it. */
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
	raise(SIGPIPE);
	cr_assert(pipe_pending());
	cr_assert_eq(log_to_nobody(), ENOMEM);
	cr_assert(pipe_pending(), "the program's pending SIGPIPE was taken");
	const struct timespec now = { 0, 0 };
	cr_assert_eq(sigtimedwait(&pipe_set, NULL, &now), SIGPIPE);
	pthread_sigmask(SIG_SETMASK, &before, NULL);
}
