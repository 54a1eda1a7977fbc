// SPDX-License-Identifier: MIT
/*
 * Small synchronous ops through the handle. Reads (or writes) N blocks of
 * SIZE bytes at random aligned offsets of a 64 MiB file, queue depth 1,
 * alternating cache on and cache off run by run, and prints ops/s for
 * each with the median, min and max over the repeats.
 *
 *   nvswap-bench-small [-d DIR] [-s BYTES] [-n OPS] [-r REPS] [-w]
 *                      [-b]     (-w: writes; -b: buffered, page-cache hot)
 *                      [-m inline|inline-fd|workers|nocache]
 *
 * With -m, one configuration only, each repeat's ops/s on its own line
 * ("ops/s N"), and the file is kept for the next run (bench/small_ops.py
 * interleaves these with fio's psync engine): inline = the defaults (a
 * small sync op runs on the caller's thread), inline-fd = the same with
 * the file named by a descriptor opened once (as fio does: no stat of
 * the path per op), workers = inline_max off (every op handed to a
 * worker), nocache = workers and no open-file cache.
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE (64u << 20)

static bool buffered;

/* With @fd >= 0 the ops name the file by descriptor, as fio does. */
static double run(const char *path, int fd, bool cache, bool inl, bool write,
		  size_t size, int ops, void *buf)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned seed = (unsigned)getpid();
	double t0, t;

	nvs_aio_opts_init(&o);
	o.open_files = cache ? 0 : NVS_AIO_FILES_OFF;
	o.inline_max = inl ? 0 : NVS_AIO_INLINE_OFF;
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
		int r = fd >= 0 ? write ? nvs_aio_pwrite_fd(h, buf, size, fd,
							    off, false)
					: nvs_aio_pread_fd(h, buf, size, fd,
							   off, false)
			: write ? nvs_aio_sync_pwrite(h, buf, size, path, off)
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
	const char *mode = NULL;
	char path[4096];
	struct stat st;
	void *buf;

	while ((c = getopt(argc, argv, "d:s:n:r:wbm:")) != -1) {
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
		case 'm':
			mode = optarg;
			break;
		default:
			fprintf(stderr,
				"usage: %s [-d dir] [-s size] [-n ops] "
				"[-r reps] [-w] [-b] "
				"[-m inline|inline-fd|workers|nocache]\n",
				argv[0]);
			return 2;
		}
	}
	if (reps < 1 || reps > 64 || size == 0 || size > FILE_SIZE ||
	    (mode && strcmp(mode, "inline") && strcmp(mode, "inline-fd") &&
	     strcmp(mode, "workers") && strcmp(mode, "nocache"))) {
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
	if ((!mode || stat(path, &st) || st.st_size != FILE_SIZE) &&
	    nvs_aio_write(buf, FILE_SIZE, path, NULL, false, NULL) < 0) {
		fprintf(stderr, "setup: %s\n", nvs_last_error());
		return 1;
	}
	if (mode) {
		bool inl = !strncmp(mode, "inline", 6);
		bool cache = strcmp(mode, "nocache");
		int fd = -1;
		if (!strcmp(mode, "inline-fd")) {
			fd = open(path, (write ? O_WRONLY : O_RDONLY) |
						(buffered ? 0 : O_DIRECT));
			if (fd < 0) {
				perror(path);
				return 1;
			}
		}
		for (int r = 0; r < reps; r++)
			printf("ops/s %.1f\n", run(path, fd, cache, inl, write,
						   size, ops, buf));
		if (fd >= 0)
			close(fd);
		free(buf);
		return 0;
	}
	double on[64], off[64];
	for (int r = 0; r < reps; r++) {
		on[r] = run(path, -1, true, true, write, size, ops, buf);
		off[r] = run(path, -1, false, true, write, size, ops, buf);
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
