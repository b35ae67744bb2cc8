/* SPDX-License-Identifier: MIT */
/*
 * invalid_pointer.c - under the drop-in, free(), realloc() and
 * malloc_usable_size() of memory it never handed out (on the stack, in an
 * mmap) abort with a message
 * naming the call, as glibc's free() and rdma_free() do, instead of
 * crashing inside jemalloc or returning garbage (issue 10, item 8; commit
 * 0c281c6 died of SIGSEGV).  Each call runs in a child; prints one line per
 * case and "N passed, M failed".
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile size_t sink;

static void call(int which, void *p)
{
	switch (which) {
	case 0:
		free(p);
		break;
	case 1:
		sink = (size_t)realloc(p, 100);
		break;
	default:
		sink = malloc_usable_size(p);
		break;
	}
}

int main(void)
{
	static const char *names[] = { "free", "realloc", "malloc_usable_size" };
	char on_stack[64];
	void *mapped = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *targets[] = { on_stack + 16, (char *)mapped + 64 };
	const char *where[] = { "the stack", "an mmap" };
	int passed = 0, failed = 0;
	for (int t = 0; t < 2; t++)
		for (int w = 0; w < 3; w++) {
			int pfd[2];
			if (pipe(pfd))
				return 2;
			pid_t pid = fork();
			if (pid == 0) {
				dup2(pfd[1], 2);
				close(pfd[0]);
				call(w, targets[t]);
				_exit(0); /* survived: the call accepted foreign memory */
			}
			close(pfd[1]);
			char out[1024];
			ssize_t n = read(pfd[0], out, sizeof(out) - 1);
			out[n > 0 ? n : 0] = '\0';
			close(pfd[0]);
			int st = 0;
			waitpid(pid, &st, 0);
			char want[64];
			snprintf(want, sizeof(want), "%s(%p): not memory from", names[w], targets[t]);
			int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(out, want);
			printf("%s %s of %s: %s %d%s%s", ok ? "ok  " : "FAIL", names[w], where[t],
			       WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
			       *out ? ", said: " : "\n", out);
			if (ok)
				passed++;
			else
				failed++;
		}
	/* Its own memory still works, of every kind. */
	void *a = malloc(10), *b = malloc(1 << 20), *c = realloc(NULL, 3);
	int mine = a && b && c && malloc_usable_size(a) >= 10 && malloc_usable_size(b) >= (1 << 20);
	free(a), free(b), free(c);
	printf("%s the drop-in's own blocks\n", mine ? "ok  " : "FAIL");
	passed += mine, failed += !mine;
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
