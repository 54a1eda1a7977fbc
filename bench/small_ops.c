// SPDX-License-Identifier: MIT
/*
 * Small synchronous ops through the handle: the per-op cost that the
 * open-file cache removes. Reads (or writes) N blocks of SIZE bytes at
 * random aligned offsets of a 64 MiB file, queue depth 1, alternating
 * cache on and cache off run by run, and prints ops/s for each with the
 * median, min and max over the repeats.
 *
 *   nvswap-bench-small [-d DIR] [-s BYTES] [-n OPS] [-r REPS] [-w]
 *                      [-b]     (-w: writes; -b: buffered, page-cache hot)
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE (64u << 20)

static bool buffered;

static double run(const char *path, bool cache, bool write, size_t size,
		  int ops, void *buf)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned seed = 12345;
	double t0, t;

	nvs_aio_opts_init(&o);
	o.open_files = cache ? 0 : NVS_AIO_FILES_OFF;
	if (buffered)
		o.direct = NVS_DIRECT_NEVER;
	if (nvs_aio_create(&o, &h) < 0) {
		fprintf(stderr, "create: %s\n", nvs_last_error());
		exit(1);
	}
	t0 = bench_now();
	for (int i = 0; i < ops; i++) {
		int64_t off = (int64_t)(rand_r(&seed) % (FILE_SIZE / size)) *
			      (int64_t)size;
		int r = write ? nvs_aio_sync_pwrite(h, buf, size, path, off)
			      : nvs_aio_sync_pread(h, buf, size, path, off);
		if (r != 1) {
			fprintf(stderr, "op failed: %s\n", nvs_last_error());
			exit(1);
		}
	}
	t = bench_now() - t0;
	nvs_aio_destroy(h);
	return ops / t;
}

int main(int argc, char **argv)
{
	const char *dir = "nvme_swap";
	size_t size = 4096;
	int ops = 20000, reps = 5, c;
	bool write = false;
	char path[4096];
	void *buf;

	while ((c = getopt(argc, argv, "d:s:n:r:wb")) != -1) {
		switch (c) {
		case 'd':
			dir = optarg;
			break;
		case 's':
			size = strtoul(optarg, NULL, 0);
			break;
		case 'n':
			ops = atoi(optarg);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 'w':
			write = true;
			break;
		case 'b':
			buffered = true;
			break;
		default:
			fprintf(stderr,
				"usage: %s [-d dir] [-s size] [-n ops] "
				"[-r reps] [-w] [-b]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 64 || size == 0 || size > FILE_SIZE) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/small_ops.swp", dir);
	if (posix_memalign(&buf, 4096, FILE_SIZE)) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	memset(buf, 0x5a, FILE_SIZE);
	if (nvs_aio_write(buf, FILE_SIZE, path, NULL, false, NULL) < 0) {
		fprintf(stderr, "setup: %s\n", nvs_last_error());
		return 1;
	}
	double on[64], off[64];
	for (int r = 0; r < reps; r++) {
		on[r] = run(path, true, write, size, ops, buf);
		off[r] = run(path, false, write, size, ops, buf);
	}
	qsort(on, (size_t)reps, sizeof(double), bench_cmp_double);
	qsort(off, (size_t)reps, sizeof(double), bench_cmp_double);
	printf("%zu-byte random %s %ss, queue depth 1, %d ops x %d repeats "
	       "(interleaved)\n",
	       size, buffered ? "buffered" : "O_DIRECT",
	       write ? "write" : "read", ops, reps);
	printf("| open-file cache | ops/s median | min | max |\n");
	printf("|---|---|---|---|\n");
	printf("| on  | %.0f | %.0f | %.0f |\n", on[reps / 2], on[0],
	       on[reps - 1]);
	printf("| off | %.0f | %.0f | %.0f |\n", off[reps / 2], off[0],
	       off[reps - 1]);
	printf("ratio on/off (medians): %.2f\n", on[reps / 2] / off[reps / 2]);
	unlink(path);
	free(buf);
	return 0;
}
