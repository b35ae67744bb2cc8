/* SPDX-License-Identifier: MIT */
/*
 * replay.c - runs the fuzz target over files and directories (the committed
 * corpus), without libFuzzer: every build replays tests/fuzz/corpus/.
 *   fuzz-replay PATH...     prints "N inputs, 0 findings" (a finding aborts)
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long inputs;

static void one_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	static uint8_t buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	inputs++;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			return 2;
		}
		if (!S_ISDIR(st.st_mode)) {
			one_file(argv[i]);
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char p[4096];
			snprintf(p, sizeof(p), "%s/%s", argv[i], e->d_name);
			one_file(p);
		}
		if (d)
			closedir(d);
	}
	/* And every one-byte and two-byte input. */
	for (unsigned a = 0; a < 256; a++) {
		for (unsigned b = 0; b < 256; b++) {
			uint8_t in[3] = { (uint8_t)a, (uint8_t)b, 0 };
			LLVMFuzzerTestOneInput(in, b ? 2 : 1);
			inputs++;
		}
	}
	printf("fuzz replay: %lu inputs, 0 findings\n", inputs);
	return 0;
}
