/* SPDX-License-Identifier: MIT */
/*
 * fork_init.c - fork() while another thread initialises the library (its
 * first rdma_malloc, inside the device probe).  The child must not run the
 * initialisation again: it would block on what the probing thread held at
 * fork (libibverbs' device-list lock; here a stand-in mutex).  A fake probe
 * that holds a mutex for a while makes the window certain.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma_malloc.h"
#include "verbs.h"

static pthread_mutex_t dev_list_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int probing;

static struct ibv_pd *slow_open(const char *device, char *why, size_t whylen)
{
	(void)device;
	pthread_mutex_lock(&dev_list_lock);
	atomic_store(&probing, 1);
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	snprintf(why, whylen, "no RDMA device (fake)");
	pthread_mutex_unlock(&dev_list_lock);
	errno = ENODEV;
	return NULL;
}

static struct ibv_mr *no_reg(struct ibv_pd *pd, void *addr, size_t len, unsigned int access)
{
	(void)pd, (void)addr, (void)len, (void)access;
	errno = ENODEV;
	return NULL;
}

static int no_dereg(struct ibv_mr *mr)
{
	(void)mr;
	return 0;
}

static const struct rdmalloc_verbs_ops slow_ops = {
	.reg_mr = no_reg, .dereg_mr = no_dereg, .open_default_pd = slow_open,
};

static void *first_use(void *arg)
{
	(void)arg;
	rdma_free(rdma_malloc(100)); /* initialises the library */
	return NULL;
}

int main(void)
{
	rdmalloc_verbs_set_ops(&slow_ops);
	pthread_t t;
	pthread_create(&t, NULL, first_use, NULL);
	while (!atomic_load(&probing))
		usleep(1000);
	pid_t pid = fork(); /* the other thread is inside the probe */
	if (pid == 0) {
		alarm(10);
		void *p = rdma_malloc((size_t)1 << 20);
		rdma_free(p);
		_exit(p ? 0 : 3);
	}
	int st = 0;
	pthread_join(t, NULL);
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "fork_init: child: %s %d\n", WIFSIGNALED(st) ? "killed by signal" : "exit status",
			WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		return 1;
	}
	printf("fork_init: the child forked during initialisation allocates\n");
	return 0;
}
