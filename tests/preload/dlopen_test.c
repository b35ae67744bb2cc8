/* SPDX-License-Identifier: MIT */
/*
 * dlopen_test.c - under the drop-in: a plugin is dlopen'ed and dlclose'd
 * many times, from several threads; memory crosses dlclose in both
 * directions (the plugin's mallocs freed by the program after dlclose, the
 * program's freed by the plugin), and every pointer is covered by a lookup.
 *   dlopen_test PLUGIN.so     prints "N passed, M failed"
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_malloc.h"

static const char *plugin;
static int failures;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what)
{
	pthread_mutex_lock(&mu);
	if (failures++ < 10)
		fprintf(stderr, "dlopen_test: %s\n", what);
	pthread_mutex_unlock(&mu);
}

static void covered(void *p, size_t n)
{
	int e = rdma_malloc_keys(p, n, NULL, NULL, NULL);
	if (e != 0 && e != ENODEV) /* ENODEV: rdmalloc memory on a host without device */
		fail("a pointer is not covered by one registered chunk");
}

static void *worker(void *arg)
{
	(void)arg;
	for (int round = 0; round < 50; round++) {
		void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			fail(dlerror());
			return NULL;
		}
		void *(*make)(size_t) = (void *(*)(size_t))dlsym(h, "plugin_make");
		void (*take)(void *) = (void (*)(void *))dlsym(h, "plugin_take");
		size_t (*ctor_bytes)(void) = (size_t (*)(void))dlsym(h, "plugin_ctor_bytes");
		if (!make || !take || !ctor_bytes || ctor_bytes() != 100 * 200) {
			fail("plugin symbols or constructor state wrong");
			dlclose(h);
			return NULL;
		}
		char *from_plugin = make(5000);
		char *from_us = malloc(3000);
		if (!from_plugin || !from_us) {
			fail("allocation failed");
			return NULL;
		}
		covered(from_plugin, 5000);
		covered(from_us, 3000);
		take(from_us); /* the plugin frees ours */
		dlclose(h);
		for (int i = 0; i < 5000; i++)
			if (from_plugin[i] != 'p') {
				fail("plugin memory changed after dlclose");
				break;
			}
		free(from_plugin); /* we free the plugin's, after dlclose */
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: dlopen_test PLUGIN.so\n");
		return 2;
	}
	plugin = argv[1];
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, worker, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("dlopen_test: 4 threads x 50 dlopen/dlclose rounds, memory crossing dlclose both ways\n");
	printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
	return failures != 0;
}
