// SPDX-License-Identifier: MIT
/*
 * Randomized consistency test (suite "stress", not in the default run;
 * `make stress`). Each round makes a handle with random settings (backend,
 * parallelism, queue depth, block size, submit modes, cache), then submits
 * a batch of async reads and writes on non-overlapping random ranges of a
 * few files (any offset, any size, misaligned buffers, paths and
 * descriptors), waits, and checks every byte against an in-memory shadow
 * of each file, and each file's size. Prints "N passed, N failed".
 *
 *   stress_random [seconds (default 20)] [seed]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvswap/aio.h"

#define NFILES 3
#define FMAX (8u << 20)
#define MAXOPS 12

static unsigned long long rng;

static unsigned long long rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static size_t pick_size(void)
{
	switch (rnd() % 6) {
	case 0:
		return rnd() % 16;
	case 1:
		return rnd() % 5000;
	case 2:
		return 4096 * (1 + rnd() % 8);
	case 3:
		return rnd() % (300 << 10);
	default:
		return rnd() % (2u << 20);
	}
}

struct range {
	int file;
	int64_t off;
	size_t len;
	bool write;
	unsigned char *mem; /* misaligned view into base */
	unsigned char *base;
};

static bool overlaps(const struct range *r, int n, int file, int64_t off,
		     size_t len)
{
	for (int i = 0; i < n; i++)
		if (r[i].file == file && off < r[i].off + (int64_t)r[i].len &&
		    r[i].off < off + (int64_t)len)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 20;
	unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 0)
					   : (unsigned long long)time(NULL);
	const char *base = getenv("NVSWAP_TEST_DIR");
	char dir[4096], path[NFILES][4200];
	unsigned char *shadow[NFILES];
	size_t size[NFILES] = {0};
	int fds[NFILES], passed = 0, failed = 0, rounds = 0;
	time_t end = time(NULL) + (time_t)secs;

	rng = seed ? seed : 1;
	snprintf(dir, sizeof(dir), "%s/nvs-stress-XXXXXX", base ? base : ".");
	if (!mkdtemp(dir))
		return perror("mkdtemp"), 1;
	for (int f = 0; f < NFILES; f++) {
		snprintf(path[f], sizeof(path[f]), "%s/f%d", dir, f);
		shadow[f] = calloc(1, FMAX + (4u << 20));
		fds[f] = open(path[f], O_RDWR | O_CREAT | (f ? O_DIRECT : 0),
			      0600);
		if (fds[f] < 0)
			return perror("open"), 1;
	}
	printf("stress_random: seed %llu, %.0f s (replay: stress_random "
	       "%.0f %llu)\n",
	       seed, secs, secs, seed);
	while (time(NULL) < end) {
		struct nvs_aio_opts o;
		struct nvs_aio *h;
		struct range r[MAXOPS];
		int n = 0, want = 1 + (int)(rnd() % MAXOPS), ret;
		static const uint32_t bss[] = {512, 4096, 8192, 65536, 1 << 20};

		nvs_aio_opts_init(&o);
		/* AUTO is io_uring where the kernel allows it. */
		static const enum nvs_backend backends[] = {NVS_BACKEND_AUTO,
							    NVS_BACKEND_LIBAIO,
							    NVS_BACKEND_PSYNC};
		o.backend = backends[rnd() % 3];
		if (rnd() % 4 == 0)
			o.uring_flags = NVS_URING_NO_FIXED;
		o.intra_op_parallelism = 1 + (uint32_t)(rnd() % 4);
		o.queue_depth = 1 + (uint32_t)(rnd() % 16);
		o.block_size = bss[rnd() % 5];
		o.single_submit = rnd() % 2;
		o.overlap_events = rnd() % 2;
		o.open_files = rnd() % 3 ? 0 : NVS_AIO_FILES_OFF;
		o.max_ops = 1 + (uint32_t)(rnd() % 16);
		if (rnd() % 8 == 0)
			o.direct = NVS_DIRECT_NEVER;
		if (nvs_aio_create(&o, &h) < 0) {
			fprintf(stderr, "create: %s\n", nvs_last_error());
			return 1;
		}
		for (int tries = 0; n < want && tries < 100; tries++) {
			int f = (int)(rnd() % NFILES);
			size_t len = pick_size();
			bool write = size[f] == 0 || rnd() % 2;
			int64_t off;
			if (write)
				off = (int64_t)(rnd() % FMAX);
			else if (len > size[f])
				continue;
			else
				off = (int64_t)(rnd() % (size[f] - len + 1));
			if (overlaps(r, n, f, off, len))
				continue;
			r[n] = (struct range){f, off, len, write, NULL, NULL};
			r[n].base = malloc(len + 4096);
			r[n].mem = r[n].base + rnd() % 4096;
			if (write) {
				for (size_t i = 0; i < len; i++)
					r[n].mem[i] = (unsigned char)rnd();
			} else {
				memset(r[n].mem, 0xcd, len);
			}
			struct nvs_aio_io io = {
				write ? NVS_AIO_WRITE : NVS_AIO_READ,
				r[n].mem,
				len,
				rnd() % 3 ? path[f] : NULL,
				fds[f],
				off};
			ret = nvs_aio_submit(h, &io, NULL);
			if (ret < 0) {
				fprintf(stderr, "submit: %s\n",
					nvs_last_error());
				failed++;
				free(r[n].base);
				continue;
			}
			n++;
		}
		ret = nvs_aio_wait(h);
		if (ret != n) {
			fprintf(stderr,
				"round %d: wait gave %d for %d ops: %s\n",
				rounds, ret, n, nvs_last_error());
			failed++;
		}
		if (nvs_aio_destroy(h) != 0)
			failed++;
		for (int i = 0; i < n; i++) {
			struct range *x = &r[i];
			unsigned char *s = shadow[x->file] + x->off;
			if (x->write) {
				memcpy(s, x->mem, x->len);
				if ((size_t)x->off + x->len > size[x->file])
					size[x->file] = (size_t)x->off + x->len;
			} else if (memcmp(s, x->mem, x->len)) {
				fprintf(stderr,
					"round %d: read of file %d at %lld "
					"length %zu differs\n",
					rounds, x->file, (long long)x->off,
					x->len);
				failed++;
			} else {
				passed++;
			}
			free(x->base);
		}
		for (int f = 0; f < NFILES; f++) {
			off_t sz = lseek(fds[f], 0, SEEK_END);
			if (sz != (off_t)size[f]) {
				fprintf(stderr,
					"round %d: file %d is %lld bytes, "
					"expected %zu\n",
					rounds, f, (long long)sz, size[f]);
				failed++;
			}
		}
		rounds++;
	}
	/* Finally the whole of every file, read plainly. */
	for (int f = 0; f < NFILES; f++) {
		int fd = open(path[f], O_RDONLY);
		unsigned char *all = malloc(size[f] + 1);
		ssize_t got = pread(fd, all, size[f], 0);
		if (got != (ssize_t)size[f] ||
		    memcmp(all, shadow[f], size[f])) {
			fprintf(stderr, "file %d differs from its shadow\n", f);
			failed++;
		} else {
			passed++;
		}
		free(all);
		close(fd);
		close(fds[f]);
		unlink(path[f]);
		free(shadow[f]);
	}
	rmdir(dir);
	printf("stress_random: %d rounds\n", rounds);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
