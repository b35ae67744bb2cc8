/* SPDX-License-Identifier: MIT */
/*
 * mpi_check.c - two MPI ranks move freshly malloc'ed buffers and check every
 * byte: what an MPI job does to the drop-in (tests/middleware/run.sh).
 *
 *   1. ping-pong, 1 KiB .. 4 MiB: rank 0 mallocs and fills a buffer, sends
 *      it; rank 1 receives into a buffer of its own malloc, checks it, sends
 *      back a second pattern; rank 0 checks that.  Every buffer is new, so
 *      the engine registers (or finds in its cache) memory it has not seen.
 *      After each free, malloc_trim(0): under the drop-in, an idle chunk
 *      the engine still holds a cached registration in is given back (its
 *      pages dropped) and taken back with fresh pages; the engine's memory
 *      hooks must see that, or its next transfer there moves pages the
 *      process no longer has.  (Whether a chunk goes idle depends on what
 *      else lives in it: in the guest runs, 0-1 chunks per rank did.)
 *   2. one-sided on a window whose memory is malloc'ed (MPI_Win_create):
 *      MPI_Put into rank 1, MPI_Get back, MPI_Accumulate (MPI_SUM) from both
 *      ranks; every element checked.
 * Prints one line per phase; exits 0 only if every byte matched.
 *   mpirun -n 2 mpi_check [ROUNDS]
 */
#include <malloc.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t pattern(size_t off, uint32_t seed)
{
	uint64_t x = ((uint64_t)off + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed + 1) * 0xD1B54A32D192ED03ull;
	x ^= x >> 29;
	return (uint8_t)(x >> 56);
}

static void fill(uint8_t *b, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pattern(i, seed);
}

static int rank;

/* The first differing byte of @b against the pattern of @seed: fatal. */
static void check(const uint8_t *b, size_t n, uint32_t seed, const char *what)
{
	for (size_t i = 0; i < n; i++) {
		if (b[i] != pattern(i, seed)) {
			size_t bad = 0;
			for (size_t j = i; j < n; j++)
				bad += b[j] != pattern(j, seed);
			fprintf(stderr, "mpi_check: rank %d: %s (%zu bytes): byte %zu is 0x%02x, want 0x%02x; %zu differ\n",
				rank, what, n, i, b[i], pattern(i, seed), bad);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
	}
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "mpi_check: rank %d: malloc(%zu) failed\n", rank, n);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

static size_t pingpong(int rounds)
{
	size_t checked = 0;
	for (int r = 0; r < rounds; r++) {
		for (size_t n = 1024; n <= ((size_t)4 << 20); n *= 4) {
			uint32_t seed = (uint32_t)(r * 64 + __builtin_ctzl(n));
			uint8_t *b = xmalloc(n);
			if (rank == 0) {
				fill(b, n, seed);
				MPI_Send(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
				memset(b, 0, n);
				MPI_Recv(b, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check(b, n, seed + 1000, "pong");
			} else {
				memset(b, 0, n);
				MPI_Recv(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				check(b, n, seed, "ping");
				fill(b, n, seed + 1000);
				MPI_Send(b, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
			}
			checked += n;
			free(b);
			malloc_trim(0);
		}
	}
	return checked;
}

#define WIN_INTS ((size_t)256 << 10) /* 1 MiB window */

static size_t one_sided(void)
{
	size_t n = WIN_INTS * sizeof(int32_t);
	int32_t *win_mem = xmalloc(n);
	for (size_t i = 0; i < WIN_INTS; i++)
		win_mem[i] = (int32_t)i * (rank + 1);
	MPI_Win win;
	MPI_Win_create(win_mem, (MPI_Aint)n, sizeof(int32_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win);

	/* Put: rank 0 writes a pattern into rank 1's window. */
	uint8_t *src = xmalloc(n);
	fill(src, n, 77);
	MPI_Win_fence(0, win);
	if (rank == 0)
		MPI_Put(src, (int)n, MPI_BYTE, 1, 0, (int)WIN_INTS, MPI_INT32_T, win);
	MPI_Win_fence(0, win);
	if (rank == 1)
		check((uint8_t *)win_mem, n, 77, "window after MPI_Put");

	/* Get: rank 0 reads it back into a fresh buffer. */
	uint8_t *dst = xmalloc(n);
	memset(dst, 0, n);
	if (rank == 0)
		MPI_Get(dst, (int)n, MPI_BYTE, 1, 0, (int)WIN_INTS, MPI_INT32_T, win);
	MPI_Win_fence(0, win);
	if (rank == 0)
		check(dst, n, 77, "MPI_Get of the window");

	/* Accumulate: both ranks add i + rank + 1 to rank 1's element i. */
	for (size_t i = 0; i < WIN_INTS; i++)
		win_mem[i] = (int32_t)i;
	MPI_Win_fence(0, win);
	int32_t *add = xmalloc(n);
	for (size_t i = 0; i < WIN_INTS; i++)
		add[i] = (int32_t)i + rank + 1;
	MPI_Accumulate(add, (int)WIN_INTS, MPI_INT32_T, 1, 0, (int)WIN_INTS, MPI_INT32_T, MPI_SUM, win);
	MPI_Win_fence(0, win);
	if (rank == 1) {
		for (size_t i = 0; i < WIN_INTS; i++) {
			int32_t want = (int32_t)i + ((int32_t)i + 1) + ((int32_t)i + 2);
			if (win_mem[i] != want) {
				fprintf(stderr, "mpi_check: rank 1: MPI_Accumulate: element %zu is %d, want %d\n", i,
					win_mem[i], want);
				MPI_Abort(MPI_COMM_WORLD, 1);
			}
		}
	}
	MPI_Win_free(&win);
	free(add);
	free(dst);
	free(src);
	free(win_mem);
	return 3 * n;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_check: run with exactly 2 ranks (got %d)\n", size);
		MPI_Finalize();
		return 2;
	}
	int rounds = argc > 1 ? atoi(argv[1]) : 3;
	size_t pp = pingpong(rounds > 0 ? rounds : 1);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: ping-pong ok, %zu bytes each way checked\n", pp);
	size_t os = one_sided();
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_check: one-sided ok (MPI_Put, MPI_Get, MPI_Accumulate), %zu bytes checked\n", os);
	MPI_Finalize();
	return 0;
}
