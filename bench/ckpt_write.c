// SPDX-License-Identifier: MIT
/*
 * The checkpoint writer (nvswap/ckpt.h) alone: writes --size bytes of
 * ordinary malloc()ed memory (pageable, offset by --misalign bytes from a
 * page) to a new file in --dir, in pieces of --chunk bytes, timed from
 * nvs_ckpt_writer_open() to the end of nvs_ckpt_close() (so the fsync,
 * the rename and the directory fsync are inside). Each repeat deletes the
 * file first. Prints one line per repeat and the median with its spread;
 * bench/ckpt_write.py runs it interleaved with fio, nvswap.save and
 * torch.save.
 *
 *   nvswap-bench-ckpt [--dir D] [--size N] [--chunk N] [--reps N]
 *                     [--buffer-size N] [--buffer-count N]
 *                     [--misalign N] [--no-fsync]
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
	fprintf(stderr,
		"usage: nvswap-bench-ckpt [--dir D] [--size N] [--chunk N] "
		"[--reps N]\n"
		"                         [--buffer-size N] [--buffer-count N] "
		"[--misalign N] [--no-fsync]\n");
	exit(2);
}

static size_t size_arg(const char *what, const char *s)
{
	size_t v;

	if (bench_parse_size(s, &v) < 0) {
		fprintf(stderr, "nvswap-bench-ckpt: bad %s '%s'\n", what, s);
		exit(2);
	}
	return v;
}

/* One timed write of @n bytes at @src; GB/s, or -1 after printing why. */
static double one(const char *path, const struct nvs_ckpt_opts *o,
		  const char *src, size_t n, size_t chunk)
{
	struct nvs_ckpt_writer *w;
	double t0, t1;
	int r;

	unlink(path);
	sync();
	t0 = bench_now();
	r = nvs_ckpt_writer_open(path, o, &w);
	for (size_t off = 0; r == 0 && off < n; off += chunk)
		r = nvs_ckpt_write(w, src + off,
				   n - off < chunk ? n - off : chunk);
	if (r == 0) {
		r = nvs_ckpt_close(w);
	} else if (w) {
		fprintf(stderr, "nvswap-bench-ckpt: %s\n", nvs_last_error());
		nvs_ckpt_abort(w);
		return -1;
	}
	t1 = bench_now();
	if (r < 0) {
		fprintf(stderr, "nvswap-bench-ckpt: %s\n", nvs_last_error());
		return -1;
	}
	return (double)n / (t1 - t0) / 1e9;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dir", required_argument, NULL, 'd'},
		{"size", required_argument, NULL, 's'},
		{"chunk", required_argument, NULL, 'c'},
		{"reps", required_argument, NULL, 'r'},
		{"buffer-size", required_argument, NULL, 'b'},
		{"buffer-count", required_argument, NULL, 'n'},
		{"misalign", required_argument, NULL, 'm'},
		{"no-fsync", no_argument, NULL, 'F'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = ".";
	size_t size = (size_t)2 << 30, chunk = (size_t)64 << 20, mis = 0;
	struct nvs_ckpt_opts o;
	int reps = 5, c, ok = 0;
	char path[4096];
	double *v;
	char *mem;

	nvs_ckpt_opts_init(&o);
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			dir = optarg;
			break;
		case 's':
			size = size_arg("size", optarg);
			break;
		case 'c':
			chunk = size_arg("chunk", optarg);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 'b':
			o.buffer_size = size_arg("buffer size", optarg);
			break;
		case 'n':
			o.buffer_count = (unsigned)atoi(optarg);
			break;
		case 'm':
			mis = (size_t)atol(optarg);
			break;
		case 'F':
			o.fsync = false;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || reps < 1)
		usage();
	snprintf(path, sizeof(path), "%s/nvswap-bench-ckpt.bin", dir);
	mem = malloc(size + mis);
	v = calloc((size_t)reps, sizeof(*v));
	if (!mem || !v) {
		fprintf(stderr, "nvswap-bench-ckpt: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < size + mis; i++)
		mem[i] = (char)(i * 2654435761u >> 13);
	for (int i = 0; i < reps; i++) {
		double g = one(path, &o, mem + mis, size, chunk);
		if (g < 0)
			return 1;
		printf("rep %d: %.3f GB/s\n", i + 1, g);
		fflush(stdout);
		v[ok++] = g;
	}
	unlink(path);
	double med = bench_median(v, ok);
	printf("ckpt: %.3f GB/s median of %d (%.3f-%.3f), %zu bytes, "
	       "buffers %u x %zu, chunk %zu, misalign %zu, fsync %s\n",
	       med, ok, v[0], v[ok - 1], size, o.buffer_count, o.buffer_size,
	       chunk, mis, o.fsync ? "yes" : "no");
	free(v);
	free(mem);
	return 0;
}
