/* SPDX-License-Identifier: MIT */
/*
 * libc_locks.c - the drop-in leaves intact the locks glibc holds while it
 * calls malloc.  bindtextdomain() and textdomain() hold the message
 * catalogue's lock for writing and call malloc; under the drop-in that
 * malloc may make a chunk, and a chunk whose registration is refused says
 * why.  When the reason's text came from strerror(), which takes that
 * lock for reading, glibc answered the writer with EDEADLK, the catalogue
 * ignored it and unlocked, and the lock was corrupt: in the guest, sort(1)
 * under the drop-in with RLIMIT_MEMLOCK at 64 KiB hung for ever, its
 * reserve thread in strerror() and its main thread in malloc waiting for
 * that thread.
 *
 * Under the fake drop-in with RDMALLOC_PRELOAD_REGISTER=eager, every
 * registration refused from then on (fake_fail_reg_from): the case's
 * function makes a chunk inside the lock (a domain or directory name of
 * 40 MiB, copied there), then another thread must get through strerror(),
 * dgettext(), textdomain() and bindtextdomain() within 20 s.
 *
 * stdio: fflush(NULL) holds stdio's list lock and waits for each FILE's
 * lock, whose holder may be growing the FILE's buffer in malloc; nothing
 * of a malloc may take the list lock (fopen does).  With a finite
 * RLIMIT_MEMLOCK and the crew's workers started (RDMALLOC_REG_THREADS=2),
 * a chunk of 16 MiB or more is first checked against the limit
 * (rdmalloc_os_may_pin, which read /proc/self/status with fopen): this
 * thread holds the list lock while another mallocs such a chunk, which
 * must be made (populated_chunks) within 20 s.
 *
 * fork: glibc's fork takes stdio's list lock after the fork handlers and
 * before its own malloc's locks (a FILE's holder may malloc while
 * fflush(NULL) holds the list lock and waits for that FILE).  jemalloc's
 * prepare is a fork handler and took every arena lock before it: one
 * thread holding a FILE's lock, one in fflush(NULL) waiting for it, a
 * fork, and the first thread's malloc missing its thread cache hung all
 * three for good.  The malloc must return within 20 s, the fork too.
 * The same with the API's calls, under the fake drop-in: a thread's first
 * rdma_malloc (its cache for the heap, made under a lock the fork holds
 * from its outer prepare) and a big block's chunk (made in a section,
 * which waits while a fork is coming): the fork must take the list lock
 * before anything an allocation may wait for.
 *   libc_locks textdomain|bindtextdomain|stdio|fork|fork-growth|fork-cache|fork-big
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libintl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma_malloc.h"

#define BIG ((size_t)40 << 20)

/* glibc's, exported but in no header: stdio's list lock, as fflush(NULL),
 * fopen and fclose take it. */
extern void _IO_list_lock(void);
extern void _IO_list_unlock(void);

/* The catalogue, read and written, by another thread. */
static void *use_catalogue(void *arg)
{
	(void)arg;
	if (strlen(strerror(EINVAL)) == 0 || !dgettext("rdmalloc-test", "hello"))
		return "empty";
	if (!textdomain("rdmalloc-test") || !bindtextdomain("rdmalloc-test", "/nonexistent"))
		return "textdomain or bindtextdomain failed";
	return NULL;
}

/* 0 if another thread gets through the catalogue in time. */
static int catalogue_works(const char *after)
{
	pthread_t t;
	if (pthread_create(&t, NULL, use_catalogue, NULL)) {
		printf("FAIL %s: pthread_create\n", after);
		return 1;
	}
	struct timespec deadline; /* pthread_timedjoin_np's clock */
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 20;
	void *res;
	int err = pthread_timedjoin_np(t, &res, &deadline);
	if (err == ETIMEDOUT) {
		printf("FAIL %s: another thread's strerror/gettext/textdomain hangs (glibc's message "
		       "catalogue lock is corrupt)\n", after);
		return 1;
	}
	if (err || res) {
		printf("FAIL %s: %s\n", after, err ? strerror(err) : (const char *)res);
		return 1;
	}
	return 0;
}

static int (*stats_get)(struct rdma_malloc_stats *);

static int stats(struct rdma_malloc_stats *st)
{
	*st = (struct rdma_malloc_stats){ .version = RDMA_MALLOC_STATS_VERSION, .size = sizeof(*st) };
	if (!stats_get)
		stats_get = (int (*)(struct rdma_malloc_stats *))dlsym(RTLD_DEFAULT, "rdma_malloc_stats_get");
	if (!stats_get || stats_get(st)) {
		printf("FAIL: no rdma_malloc_stats_get\n");
		return 1;
	}
	return 0;
}

static int one_case(int bind)
{
	void (*fail_from)(unsigned long) = (void (*)(unsigned long))dlsym(RTLD_DEFAULT, "fake_fail_reg_from");
	if (!fail_from) {
		printf("FAIL: not under the fake drop-in (no fake_fail_reg_from)\n");
		return 1;
	}
	/* Not from malloc: its own chunk must be the one made inside the lock. */
	char *name = mmap(NULL, BIG + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (name == MAP_FAILED) {
		printf("FAIL: mmap\n");
		return 1;
	}
	memset(name, 'd', BIG);
	name[0] = '/';
	name[BIG] = '\0';
	struct rdma_malloc_stats before, st;
	if (stats(&before))
		return 1;
	fail_from(1); /* from now on every registration is refused */
	const char *what = bind ? "bindtextdomain" : "textdomain";
	if (!(bind ? bindtextdomain("rdmalloc-big", name) : textdomain(name))) {
		printf("FAIL: %s of a 40 MiB name failed\n", what);
		return 1;
	}
	/* Read at once: only the call in between made a chunk. */
	if (stats(&st) || st.refused_chunks == before.refused_chunks) {
		printf("FAIL: %s made no chunk that was refused registration: the case tests nothing\n", what);
		return 1;
	}
	char after[64];
	snprintf(after, sizeof(after), "after %s", what);
	if (catalogue_works(after))
		return 1;
	printf("ok: %s's malloc made a chunk left unregistered; the catalogue still works\n", what);
	return 0;
}

static void *big_malloc(void *arg)
{
	(void)arg;
	char *p = malloc(BIG);
	if (!p)
		return "malloc failed";
	memset(p, 1, BIG);
	free(p);
	return NULL;
}

static int stdio_case(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_MEMLOCK, &rl)) {
		printf("FAIL: getrlimit\n");
		return 1;
	}
	/* Finite, so that the check runs; with room for the chunks (or
	 * CAP_IPC_LOCK), so that it says yes and the chunk is populated. */
	const rlim_t want = (rlim_t)4 << 30, room = (rlim_t)256 << 20;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur < room) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
		if (setrlimit(RLIMIT_MEMLOCK, &rl)) {
			printf("FAIL: setrlimit(RLIMIT_MEMLOCK)\n");
			return 1;
		}
	}
	/* The first big chunk starts the crew's workers (after its call). */
	if (big_malloc(NULL)) {
		printf("FAIL: malloc of 40 MiB\n");
		return 1;
	}
	struct rdma_malloc_stats before, st;
	if (stats(&before))
		return 1;
	_IO_list_lock();
	pthread_t t;
	if (pthread_create(&t, NULL, big_malloc, NULL)) {
		_IO_list_unlock();
		printf("FAIL: pthread_create\n");
		return 1;
	}
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 20;
	void *res;
	int err = pthread_timedjoin_np(t, &res, &deadline);
	_IO_list_unlock();
	if (err == ETIMEDOUT) {
		printf("FAIL: a malloc of 40 MiB waits for stdio's list lock (held here, as fflush(NULL) "
		       "holds it)\n");
		pthread_join(t, NULL);
		return 1;
	}
	if (err || res) {
		printf("FAIL: %s\n", err ? strerror(err) : (const char *)res);
		return 1;
	}
	if (stats(&st))
		return 1;
	if (st.populated_chunks == before.populated_chunks && rl.rlim_cur < room) {
		printf("SKIP: RLIMIT_MEMLOCK is %llu bytes at most here: the check refuses the chunk, which "
		       "shows nothing\n", (unsigned long long)rl.rlim_cur);
		return 77;
	}
	if (st.populated_chunks == before.populated_chunks) {
		printf("FAIL: the malloc populated no chunk (populated_chunks %llu): the limit was not checked, "
		       "the case tests nothing\n", (unsigned long long)st.populated_chunks);
		return 1;
	}
	printf("ok: a 40 MiB chunk was checked against RLIMIT_MEMLOCK and made while stdio's list lock "
	       "was held\n");
	return 0;
}

/* The fork case (the header says why): a thread holds a FILE's lock and
 * then mallocs past its thread cache, while another is in fflush(NULL)
 * and a third forks. */
#define FORK_BLOCK ((size_t)4 << 20)
static FILE *held_file;
static atomic_int file_held, go_malloc, fork_returned;
static atomic_int flusher_tid, forker_tid;
/* What the holder allocates under the FILE's lock. */
static enum { FORK_WARM, FORK_GROWTH, FORK_CACHE, FORK_BIG } fork_how;
static void *(*api_malloc)(size_t); /* set for the API's cases only */
static void (*api_free)(void *);

static void *hold_file_then_malloc(void *arg)
{
	(void)arg;
	int api = api_malloc != NULL; /* fork-cache, fork-big */
	size_t size = fork_how == FORK_CACHE ? 64 : FORK_BLOCK;
	if (fork_how == FORK_WARM)
		free(malloc(FORK_BLOCK)); /* no growth under the lock */
	if (fork_how == FORK_BIG)
		api_free(api_malloc(64)); /* this thread's cache made: only the chunk is left */
	flockfile(held_file);
	atomic_store(&file_held, 1);
	while (!atomic_load(&go_malloc))
		usleep(1000);
	char *p = api ? api_malloc(size) : malloc(size);
	if (p)
		memset(p, 1, size);
	if (api)
		api_free(p);
	else
		free(p);
	funlockfile(held_file);
	return p ? NULL : "malloc failed";
}

static void *flush_all(void *arg)
{
	(void)arg;
	atomic_store(&flusher_tid, (int)syscall(SYS_gettid));
	fflush(NULL); /* the list lock, then each FILE's: waits for held_file */
	return NULL;
}

static void *fork_and_reap(void *arg)
{
	(void)arg;
	atomic_store(&forker_tid, (int)syscall(SYS_gettid));
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	atomic_store(&fork_returned, 1);
	if (pid < 0)
		return "fork failed";
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return "the child did not exit 0";
	return NULL;
}

/* Whether thread @tid of this process sleeps in futex(2): glibc's locks
 * (stdio's list lock and a FILE's) wait there.  Read with open/read: stdio
 * would take the list lock, which the flusher holds. */
static int in_futex(int tid)
{
	char path[64], buf[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strtol(buf, NULL, 10) == SYS_futex; /* "running" reads as 0 */
}

/* Wait until the thread whose id *@tid holds (0 until it starts) sleeps in
 * futex(2): 0, or -1 after 10 s.  A fixed sleep let a loaded machine run
 * the case before the threads were where it needs them, and pass with
 * nothing tested. */
static int until_in_futex(atomic_int *tid)
{
	for (int i = 0; i < 10000; i++) {
		int t = atomic_load(tid);
		if (t && in_futex(t))
			return 0;
		usleep(1000);
	}
	return -1;
}

/* Join @t within @s seconds: NULL, or why not.  On a hang, said with
 * write(2) and ended with _exit: stdio would malloc its buffer, and exit
 * flushes every FILE. */
static const char *join_within(pthread_t t, int s, const char *who)
{
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += s;
	void *res;
	int err = pthread_timedjoin_np(t, &res, &deadline);
	if (err == ETIMEDOUT) {
		char msg[256];
		int n = snprintf(msg, sizeof(msg), "FAIL: %s hangs: a FILE's holder mallocs, fflush(NULL) "
				 "waits for that FILE, another thread forks\n", who);
		if (write(1, msg, (size_t)n) < 0)
			_exit(2);
		_exit(1);
	}
	return err ? strerror(err) : (const char *)res;
}

static int fork_case(const char *how)
{
	fork_how = !strcmp(how, "fork-growth") ? FORK_GROWTH : !strcmp(how, "fork-cache") ? FORK_CACHE
		 : !strcmp(how, "fork-big") ? FORK_BIG : FORK_WARM;
	if (fork_how == FORK_CACHE || fork_how == FORK_BIG) {
		api_malloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "rdma_malloc");
		api_free = (void (*)(void *))dlsym(RTLD_DEFAULT, "rdma_free");
		if (!api_malloc || !api_free) {
			printf("FAIL: not under the drop-in (no rdma_malloc)\n");
			return 1;
		}
		void *p = api_malloc(64); /* the API's initialisation, not under the lock */
		if (!p) {
			printf("FAIL: rdma_malloc: %s\n", strerror(errno));
			return 1;
		}
		api_free(p);
	}
	held_file = fopen("/dev/null", "w");
	if (!held_file) {
		printf("FAIL: fopen /dev/null\n");
		return 1;
	}
	pthread_t holder, flusher, forker;
	if (pthread_create(&holder, NULL, hold_file_then_malloc, NULL)) {
		printf("FAIL: pthread_create\n");
		return 1;
	}
	while (!atomic_load(&file_held))
		usleep(1000);
	if (pthread_create(&flusher, NULL, flush_all, NULL)) {
		printf("FAIL: pthread_create\n");
		return 1;
	}
	if (until_in_futex(&flusher_tid)) { /* it holds the list lock and waits for held_file */
		printf("FAIL: fflush(NULL) did not wait for the held FILE within 10 s\n");
		atomic_store(&go_malloc, 1);
		return 1;
	}
	if (pthread_create(&forker, NULL, fork_and_reap, NULL)) {
		printf("FAIL: pthread_create\n");
		return 1;
	}
	/* The fork handlers have run, up to the list lock. */
	if (until_in_futex(&forker_tid) && !atomic_load(&fork_returned)) {
		printf("FAIL: fork() did not wait within 10 s\n");
		atomic_store(&go_malloc, 1);
		return 1;
	}
	usleep(20000); /* settled in that wait */
	if (atomic_load(&fork_returned)) { /* fflush(NULL) did not hold the list lock yet */
		printf("FAIL: the fork returned before the malloc: nothing tested\n");
		atomic_store(&go_malloc, 1);
		return 1;
	}
	atomic_store(&go_malloc, 1);
	const char *why = join_within(holder, 20, "the malloc");
	if (!why)
		why = join_within(flusher, 20, "fflush(NULL)");
	if (!why)
		why = join_within(forker, 20, "fork()");
	if (why) {
		printf("FAIL: %s\n", why);
		return 1;
	}
	fclose(held_file);
	static const char *const what[] = { "a malloc", "a malloc that grows the heap",
					    "a thread's first rdma_malloc", "an rdma_malloc of a big block" };
	printf("ok: %s under a FILE's lock, fflush(NULL) and fork() at once all returned\n", what[fork_how]);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "stdio"))
		return stdio_case();
	if (argc == 2 && (!strcmp(argv[1], "fork") || !strcmp(argv[1], "fork-growth") ||
			  !strcmp(argv[1], "fork-cache") || !strcmp(argv[1], "fork-big")))
		return fork_case(argv[1]);
	if (argc != 2 || (strcmp(argv[1], "textdomain") && strcmp(argv[1], "bindtextdomain"))) {
		fprintf(stderr, "usage: libc_locks textdomain|bindtextdomain|stdio|fork|fork-growth|fork-cache|"
			"fork-big\n");
		return 2;
	}
	return one_case(argv[1][0] == 'b');
}
