// SPDX-License-Identifier: MIT
/*
 * nvswap demo: write a pinned buffer (1 GiB by default) to a swap file
 * through an aio handle, read it back into a second one, verify every
 * byte, and print GB/s for each direction. Uses only the public API.
 *
 *   nvswap-demo [--dir D] [--file NAME] [--keep] [--size BYTES[K|M|G]]
 *               [--block-size B] [--queue-depth N] [--parallelism N]
 *               [--overlap] [--backend io_uring|libaio|psync]
 */
#include <nvswap/nvswap.h>

#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A size argument: bytes, with K/M/G suffixes (nvs_parse_size). */
static int parse_size(const char *s, size_t *out)
{
	uint64_t v;
	int ret = nvs_parse_size(s, &v);

	if (ret == 0 && (v == 0 || v > SIZE_MAX))
		ret = -EINVAL;
	if (ret == 0)
		*out = (size_t)v;
	return ret;
}

/* Pinned memory: page-locked and on huge pages where the kernel can, so
 * each request reaches the disk in few, large segments. When the memlock
 * limit is too small, say so and go on unpinned (slower, still correct). */
static void *alloc_buf(size_t n)
{
	int err;
	void *p = nvs_pinned_alloc(n, &err);

	if (!p && (err == -ENOMEM || err == -EPERM)) {
		fprintf(stderr,
			"note: %s\nnote: continuing with unpinned "
			"memory\n",
			nvs_last_error());
		nvs_pinned_allow_unpinned(true);
		p = nvs_pinned_alloc(n, &err);
	}
	return p;
}

/* Anonymous memory on transparent huge pages, from the kernel (KiB). */
/* Leave the directory as it was found: the file goes unless --keep (or
 * always after a failure), and @dir when this run made it and it is
 * empty. Returns @rc. */
static int finish(int rc, const char *path, const char *dir, bool made,
		  bool keep)
{
	if (!keep || rc != 0)
		unlink(path);
	if (made)
		rmdir(dir); /* only when empty */
	return rc;
}

static unsigned long long huge_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "re");
	char line[256];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dir", required_argument, NULL, 'd'},
		{"size", required_argument, NULL, 's'},
		{"block-size", required_argument, NULL, 'b'},
		{"queue-depth", required_argument, NULL, 'q'},
		{"parallelism", required_argument, NULL, 'p'},
		{"overlap", no_argument, NULL, 'o'},
		{"file", required_argument, NULL, 'f'},
		{"keep", no_argument, NULL, 'k'},
		{"backend", required_argument, NULL, 'B'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *dir = "nvme_swap", *file = "demo.swp";
	bool keep = false, made;
	size_t size = 1ull << 30, bs = 0;
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	char path[4096];
	unsigned char *wbuf, *rbuf;
	double t0, tw, tr;
	int c, ret;

	nvs_aio_opts_init(&o);
	/* each line as it is made, piped or not */
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt_long(argc, argv, "d:s:b:q:p:of:kB:h", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'd':
			dir = optarg;
			break;
		case 's':
			if (parse_size(optarg, &size) < 0) {
				fprintf(stderr, "bad --size %s\n", optarg);
				return 2;
			}
			break;
		case 'b':
			if (parse_size(optarg, &bs) < 0) {
				fprintf(stderr, "bad --block-size %s\n",
					optarg);
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
		case 'f':
			file = optarg;
			break;
		case 'k':
			keep = true;
			break;
		case 'B':
			if (!strcmp(optarg, "io_uring")) {
				o.backend = NVS_BACKEND_IO_URING;
			} else if (!strcmp(optarg, "libaio")) {
				o.backend = NVS_BACKEND_LIBAIO;
			} else if (!strcmp(optarg, "psync")) {
				o.backend = NVS_BACKEND_PSYNC;
			} else {
				fprintf(stderr, "bad --backend %s\n", optarg);
				return 2;
			}
			break;
		default:
			fprintf(stderr,
				"usage: %s [--dir D] [--file NAME] [--keep] "
				"[--size N[K|M|G]] [--block-size N] "
				"[--queue-depth N] [--parallelism N] "
				"[--overlap] [--backend io_uring|libaio|psync]\n",
				argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	made = mkdir(dir, 0700) == 0;
	if (!made && errno != EEXIST) {
		fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	wbuf = alloc_buf(size);
	rbuf = wbuf ? alloc_buf(size) : NULL;
	if (!wbuf || !rbuf) {
		fprintf(stderr, "cannot allocate 2 x %zu bytes: %s\n", size,
			nvs_last_error());
		return finish(1, path, dir, made, keep);
	}
	for (size_t i = 0; i < size; i += 8) {
		uint64_t v = (i * 0x9E3779B97F4A7C15ull) ^ 0xA5A5A5A5u;
		memcpy(wbuf + i, &v, size - i < 8 ? size - i : 8);
	}
	memset(rbuf, 0, size);

	ret = nvs_aio_create(&o, &h);
	if (ret < 0) {
		fprintf(stderr, "nvs_aio_create: %s\n", nvs_last_error());
		return finish(1, path, dir, made, keep);
	}
	struct nvs_pinned_stats ps;
	nvs_pinned_stats(&ps);
	printf("nvswap %s demo: %zu MiB to %s, backend %s, block %u KiB, "
	       "queue depth %u, parallelism %u, %s\n",
	       nvs_version(), size >> 20, path, nvs_aio_backend_name(h),
	       nvs_aio_get_block_size(h) >> 10, nvs_aio_get_queue_depth(h),
	       nvs_aio_get_intra_op_parallelism(h),
	       nvs_aio_get_overlap_events(h) ? "overlapped events"
					     : "batch-and-drain");
	printf("buffers: 2 x %zu MiB %s (%llu MiB locked, %llu MiB on huge "
	       "pages), copy loop %s\n",
	       size >> 20,
	       nvs_pinned_contains(wbuf, size) ? "pinned" : "UNPINNED",
	       (unsigned long long)ps.bytes_locked >> 20, huge_kib() >> 10,
	       nvs_copy_impl());
	unlink(path);
	t0 = now_s();
	ret = nvs_aio_sync_pwrite(h, wbuf, size, path, 0);
	tw = now_s() - t0;
	if (ret < 0) {
		fprintf(stderr, "write failed: %s\n", nvs_last_error());
		nvs_aio_destroy(h);
		return finish(1, path, dir, made, keep);
	}
	t0 = now_s();
	ret = nvs_aio_sync_pread(h, rbuf, size, path, 0);
	tr = now_s() - t0;
	if (ret < 0) {
		fprintf(stderr, "read failed: %s\n", nvs_last_error());
		nvs_aio_destroy(h);
		return finish(1, path, dir, made, keep);
	}
	struct nvs_aio_stats st;
	nvs_aio_get_stats(h, &st);
	ret = nvs_aio_destroy(h);
	if (ret < 0) {
		fprintf(stderr, "destroy: %s\n", nvs_last_error());
		return finish(1, path, dir, made, keep);
	}
	if (memcmp(wbuf, rbuf, size) != 0) {
		fprintf(stderr, "VERIFY FAILED: data read back differs\n");
		return finish(1, path, dir, made, keep);
	}
	printf("write: %.2f GB/s (%.3f s)\n", (double)size / tw / 1e9, tw);
	printf("read:  %.2f GB/s (%.3f s)\n", (double)size / tr / 1e9, tr);
	printf("verify: OK, %zu bytes identical; %llu requests, %llu "
	       "bounced, %llu direct-I/O fallbacks\n",
	       size, (unsigned long long)st.requests,
	       (unsigned long long)st.bounced_requests,
	       (unsigned long long)st.direct_fallbacks);
	nvs_pinned_free(wbuf);
	nvs_pinned_free(rbuf);
	return finish(0, path, dir, made, keep);
}
