// SPDX-License-Identifier: MIT
/*
 * The C side of the Python binding's per-call overhead: loops of
 * nvs_aio_sync_pread() of SIZE bytes at offset 0 of FILE (page cache:
 * NVS_DIRECT_NEVER, so the I/O itself is short) on a handle with the
 * options nvswap.aio_handle() gets by default (DeepNVMe's: 1 MiB blocks,
 * queue depth 128, no overlapped events, one worker, auto backend), into
 * a pinned buffer. After WARM untimed calls it times batches of CALLS
 * calls and prints, per batch, the wall and the calling thread's CPU
 * microseconds per call as one JSON line:
 *
 *   nvswap-bench-call -f FILE [-s SIZE] [-w WARM] [-n CALLS] [-b BATCHES]
 *   nvswap-bench-call -f FILE [-s SIZE] [-w WARM] -i
 *
 * -i: one batch per line read from stdin (its number of calls), its line
 * printed and flushed at once; ends at end of input. This is how
 * bench/python_aio.py interleaves C and Python batches finely on a
 * machine whose load changes from one second to the next.
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int read_once(struct nvs_aio *h, void *buf, size_t size,
		     const char *path)
{
	if (nvs_aio_sync_pread(h, buf, size, path, 0) == 1)
		return 0;
	fprintf(stderr, "read: %s\n", nvs_last_error());
	return -1;
}

/* Time @calls reads; print {"wall_us": .., "cpu_us": ..} per call. */
static int batch(struct nvs_aio *h, void *buf, size_t size, const char *path,
		 long calls)
{
	double t0 = bench_now(), c0 = cpu_now(), t, c;

	for (long i = 0; i < calls; i++)
		if (read_once(h, buf, size, path))
			return -1;
	t = bench_now() - t0;
	c = cpu_now() - c0;
	printf("{\"calls\": %ld, \"wall_us\": %.4f, \"cpu_us\": %.4f}\n", calls,
	       t * 1e6 / (double)calls, c * 1e6 / (double)calls);
	fflush(stdout);
	return 0;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s -f FILE [-s SIZE] [-w WARM] [-n CALLS] "
		"[-b BATCHES] [-i]\n",
		argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	size_t size = 4096;
	long calls = 2000, batches = 10, warm = 1000;
	bool interactive = false;
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	char line[64];
	void *buf;
	int c;

	while ((c = getopt(argc, argv, "f:s:n:b:w:i")) != -1) {
		switch (c) {
		case 'f':
			path = optarg;
			break;
		case 's':
			if (bench_parse_size(optarg, &size))
				usage(argv[0]);
			break;
		case 'n':
			calls = atol(optarg);
			break;
		case 'b':
			batches = atol(optarg);
			break;
		case 'w':
			warm = atol(optarg);
			break;
		case 'i':
			interactive = true;
			break;
		default:
			usage(argv[0]);
		}
	}
	if (!path || calls < 1 || batches < 1 || warm < 0)
		usage(argv[0]);
	nvs_aio_opts_init(&o);
	o.direct = NVS_DIRECT_NEVER;
	if (nvs_aio_create(&o, &h) < 0) {
		fprintf(stderr, "create: %s\n", nvs_last_error());
		return 1;
	}
	buf = nvs_aio_new_cpu_locked_buffer(h, size);
	if (!buf) {
		fprintf(stderr, "buffer: %s\n", nvs_last_error());
		return 1;
	}
	for (long i = 0; i < warm; i++)
		if (read_once(h, buf, size, path))
			return 1;
	if (interactive) {
		while (fgets(line, sizeof(line), stdin)) {
			calls = atol(line);
			if (calls < 1 || batch(h, buf, size, path, calls))
				return 1;
		}
	} else {
		for (long b = 0; b < batches; b++)
			if (batch(h, buf, size, path, calls))
				return 1;
	}
	nvs_aio_free_cpu_locked_buffer(h, buf);
	return nvs_aio_destroy(h) < 0;
}
