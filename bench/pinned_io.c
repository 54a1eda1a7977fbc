// SPDX-License-Identifier: MIT
/*
 * The aio handle's GB/s through pinned memory and through ordinary
 * (unpinned) user memory, in one run: 1 GiB O_DIRECT reads of one file
 * into each kind of buffer, then 1 GiB writes of a new file from each,
 * the kinds interleaved repeat by repeat. Every read is checked.
 * Prints medians with min-max, the ratio to pinned, and checks that the
 * I/O made no pinned allocation of its own. Public API only.
 *
 *   nvswap-bench-pinned [--dir D] [--size N[K|M|G]] [--reps N]
 *                       [--block-size N] [--queue-depth N] [--overlap]
 *                       [--parallelism N] [--bounce-bytes N]
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

#define MAX_REPS 64

enum kind { PINNED, UNPINNED, STAGED, MISALIGNED, NKINDS };

static const char *const kind_name[NKINDS] = {
	[PINNED] = "pinned (nvs_pinned_alloc)",
	[UNPINNED] = "unpinned, page-aligned (posix_memalign), direct",
	[STAGED] = "unpinned, page-aligned, staged (NVS_STAGE_UNPINNED)",
	[MISALIGNED] = "unpinned, misaligned by 1 byte (malloc + 1), staged",
};

/* The data pattern of a kind's buffer (STAGED reuses UNPINNED's). */
static uint64_t pat(int k)
{
	return (uint64_t)(k == STAGED ? UNPINNED : k);
}

static void fill(unsigned char *b, size_t n, int k)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = (i * 0x9E3779B97F4A7C15ull) ^ pat(k);
		memcpy(b + i, &v, n - i < 8 ? n - i : 8);
	}
}

static int sync_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	int ret;

	if (fd < 0)
		return -1;
	ret = fsync(fd);
	close(fd);
	return ret;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [--dir D] [--size N[K|M|G]] [--reps N] "
		"[--block-size N] [--queue-depth N] [--parallelism N] "
		"[--overlap] [--bounce-bytes N]\n",
		argv0);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"size", required_argument, NULL, 's'},
		{"reps", required_argument, NULL, 'r'},
		{"block-size", required_argument, NULL, 'b'},
		{"queue-depth", required_argument, NULL, 'q'},
		{"parallelism", required_argument, NULL, 'p'},
		{"overlap", no_argument, NULL, 'o'},
		{"bounce-bytes", required_argument, NULL, 'B'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "nvme_swap";
	size_t size = 1ull << 30, bs = 0;
	int reps = 5, c, err;
	double wr[NKINDS][MAX_REPS], rd[NKINDS][MAX_REPS];
	unsigned char *buf[NKINDS], *mis_base, *check;
	struct nvs_aio_opts o;
	struct nvs_aio_stats ast;
	struct nvs_pinned_stats ps0, ps1;
	struct nvs_aio *h, *hs, *hk[NKINDS];
	char path[4096];

	nvs_aio_opts_init(&o);
	while ((c = getopt_long(argc, argv, "d:s:r:b:q:p:oB:h", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'd':
			dir = optarg;
			break;
		case 's':
			if (bench_parse_size(optarg, &size) < 0 || size == 0) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'r':
			reps = atoi(optarg);
			if (reps < 1 || reps > MAX_REPS) {
				usage(argv[0]);
				return 2;
			}
			break;
		case 'b':
			if (bench_parse_size(optarg, &bs) < 0) {
				usage(argv[0]);
				return 2;
			}
			o.block_size = (uint32_t)bs;
			break;
		case 'q':
			o.queue_depth = (uint32_t)atoi(optarg);
			break;
		case 'p':
			o.intra_op_parallelism = (uint32_t)atoi(optarg);
			break;
		case 'o':
			o.overlap_events = true;
			break;
		case 'B':
			if (bench_parse_size(optarg, &bs) < 0) {
				usage(argv[0]);
				return 2;
			}
			o.bounce_bytes = (uint32_t)bs;
			break;
		default:
			usage(argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/bench-pinned.swp", dir);

	buf[PINNED] = nvs_pinned_alloc(size, &err);
	if (!buf[PINNED]) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	if (posix_memalign((void **)&buf[UNPINNED], 4096, size) != 0 ||
	    !(mis_base = malloc(size + 64)) || !(check = malloc(size))) {
		fprintf(stderr, "out of memory for 3 x %zu bytes\n", size);
		return 1;
	}
	buf[STAGED] = buf[UNPINNED];
	buf[MISALIGNED] = mis_base + 1;
	fill(buf[PINNED], size, PINNED);
	if (nvs_aio_create(&o, &h) < 0) {
		fprintf(stderr, "nvs_aio_create: %s\n", nvs_last_error());
		return 1;
	}
	o.staging = NVS_STAGE_UNPINNED;
	if (nvs_aio_create(&o, &hs) < 0) {
		fprintf(stderr, "nvs_aio_create: %s\n", nvs_last_error());
		return 1;
	}
	for (int k = 0; k < NKINDS; k++)
		hk[k] = k == STAGED ? hs : h;
	printf("nvswap %s: %zu MiB O_DIRECT write+read of %s, backend %s, "
	       "block %u KiB, queue depth %u, parallelism %u, %s; %d "
	       "interleaved repeats\n",
	       nvs_version(), size >> 20, path, nvs_aio_backend_name(h),
	       nvs_aio_get_block_size(h) >> 10, nvs_aio_get_queue_depth(h),
	       nvs_aio_get_intra_op_parallelism(h),
	       nvs_aio_get_overlap_events(h) ? "overlap_events"
					     : "batch-and-drain",
	       reps);
	/* Reads first, of one file written and synced once: a read right
	 * after a 1 GiB write competes with the host flushing that write
	 * (seen here as 0.3 GB/s reads), which is not what is measured. */
	unlink(path);
	if (nvs_aio_sync_pwrite(h, buf[PINNED], size, path, 0) < 0 ||
	    sync_file(path) < 0) {
		fprintf(stderr, "writing %s: %s\n", path, nvs_last_error());
		return 1;
	}
	fill(check, size, PINNED);
	nvs_pinned_stats(&ps0);
	for (int r = 0; r < reps; r++) {
		for (int k = 0; k < NKINDS; k++) {
			double t0;
			memset(buf[k], 0, size);
			t0 = bench_now();
			if (nvs_aio_sync_pread(hk[k], buf[k], size, path, 0) <
			    0) {
				fprintf(stderr, "read: %s\n", nvs_last_error());
				return 1;
			}
			rd[k][r] = (double)size / (bench_now() - t0) / 1e9;
			if (memcmp(check, buf[k], size)) {
				fprintf(stderr, "VERIFY FAILED: read into %s\n",
					kind_name[k]);
				return 1;
			}
		}
	}
	/* Then writes, each to a new file, as a swap-out makes them. */
	for (int r = 0; r < reps; r++) {
		for (int k = 0; k < NKINDS; k++) {
			double t0;
			unlink(path);
			t0 = bench_now();
			if (nvs_aio_sync_pwrite(hk[k], buf[k], size, path, 0) <
			    0) {
				fprintf(stderr, "write: %s\n",
					nvs_last_error());
				return 1;
			}
			wr[k][r] = (double)size / (bench_now() - t0) / 1e9;
			/* Untimed: the next write starts with the host's
			 * cache drained, as the reads did. */
			if (sync_file(path) < 0 ||
			    (r == reps - 1 &&
			     (bench_read_file(path, check, size) < 0 ||
			      memcmp(check, buf[k], size)))) {
				fprintf(stderr,
					"VERIFY FAILED: write from %s: %s\n",
					kind_name[k], nvs_last_error());
				return 1;
			}
		}
	}
	nvs_pinned_stats(&ps1);
	nvs_aio_get_stats(h, &ast);
	{
		struct nvs_aio_stats s2;
		nvs_aio_get_stats(hs, &s2);
		ast.bounced_requests += s2.bounced_requests;
		ast.requests += s2.requests;
		ast.bounce_bytes_total += s2.bounce_bytes_total;
		ast.bounce_locked = ast.bounce_locked && s2.bounce_locked;
	}
	unlink(path);

	printf("\n| buffer | write GB/s | read GB/s | write vs pinned | read "
	       "vs pinned |\n|---|---|---|---|---|\n");
	double wp = 0, rp = 0;
	for (int k = 0; k < NKINDS; k++) {
		double wmin, wmax, rmin, rmax, wm, rm;
		wm = bench_median(wr[k], reps);
		rm = bench_median(rd[k], reps);
		wmin = wr[k][0], wmax = wr[k][reps - 1];
		rmin = rd[k][0], rmax = rd[k][reps - 1];
		if (k == PINNED)
			wp = wm, rp = rm;
		printf("| %s | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2f | "
		       "%.2f |\n",
		       kind_name[k], wm, wmin, wmax, rm, rmin, rmax, wm / wp,
		       rm / rp);
	}
	printf("\npinned allocations during the I/O: %llu (the handle's "
	       "bounce memory is allocated once, at create); %llu of %llu "
	       "requests bounced; bounce memory %llu KiB, %s\n",
	       (unsigned long long)(ps1.allocs - ps0.allocs),
	       (unsigned long long)ast.bounced_requests,
	       (unsigned long long)ast.requests,
	       (unsigned long long)ast.bounce_bytes_total >> 10,
	       ast.bounce_locked ? "locked" : "NOT locked");
	nvs_aio_destroy(h);
	nvs_aio_destroy(hs);
	nvs_pinned_free(buf[PINNED]);
	free(buf[UNPINNED]);
	free(mis_base);
	free(check);
	return ps1.allocs == ps0.allocs ? 0 : 1;
}
