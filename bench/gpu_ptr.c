// SPDX-License-Identifier: MIT
/*
 * What recognising device memory costs every op of a process with no CUDA
 * driver loaded (src/gpu/driver.c driver_present()): nvs_gpu_pointer() on
 * host memory, against the design it replaced (a dlopen(RTLD_NOLOAD) of
 * libcuda.so.1 per op) and against the op it is part of (a 4 KiB
 * nvs_aio_sync_pread from the page cache), each timed in batches,
 * interleaved, repeated:
 *
 *   nvswap-bench-gpu-ptr [-f FILE] [-n CALLS] [-r REPEATS]
 *
 * FILE (default ./gpu-ptr.bench, made and removed) holds the 4 KiB.
 * Prints one line per measure: ns per call, median (min-max).
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { PTR, DLOPEN, READ4K, NMEAS };

static const char *const names[NMEAS] = {
	[PTR] = "nvs_gpu_pointer(host memory), no driver loaded",
	[DLOPEN] = "dlopen(\"libcuda.so.1\", RTLD_NOLOAD) (the replaced check)",
	[READ4K] = "nvs_aio_sync_pread of 4 KiB from the page cache",
};

int main(int argc, char **argv)
{
	const char *file = "gpu-ptr.bench";
	unsigned calls = 1000000, reps = 7;
	static char host[4096];
	double v[NMEAS][64];
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	void *buf;
	int c, err, sink = 0;

	while ((c = getopt(argc, argv, "f:n:r:")) != -1) {
		if (c == 'f')
			file = optarg;
		else if (c == 'n')
			calls = (unsigned)strtoul(optarg, NULL, 10);
		else if (c == 'r')
			reps = (unsigned)strtoul(optarg, NULL, 10);
		else
			return 2;
	}
	if (!calls || !reps || reps > 64)
		return 2;
	nvs_aio_opts_init(&o);
	o.direct = NVS_DIRECT_NEVER;
	buf = nvs_pinned_alloc(4096, &err);
	if (!buf || nvs_aio_create(&o, &h) < 0 ||
	    nvs_aio_sync_pwrite(h, buf, 4096, file, 0) < 0) {
		fprintf(stderr, "set-up: %s\n", nvs_last_error());
		return 1;
	}
	for (unsigned r = 0; r < reps; r++) {
		double t0 = bench_now();
		for (unsigned i = 0; i < calls; i++)
			sink += nvs_gpu_pointer(host + (i & 63), NULL);
		v[PTR][r] = (bench_now() - t0) / calls * 1e9;
		t0 = bench_now();
		for (unsigned i = 0; i < calls / 10; i++) {
			void *lib =
				dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
			sink += lib != NULL;
			if (lib)
				dlclose(lib);
		}
		v[DLOPEN][r] = (bench_now() - t0) / (calls / 10) * 1e9;
		t0 = bench_now();
		for (unsigned i = 0; i < calls / 100; i++)
			if (nvs_aio_sync_pread(h, buf, 4096, file, 0) != 1)
				return 1;
		v[READ4K][r] = (bench_now() - t0) / (calls / 100) * 1e9;
	}
	printf("nvswap-bench-gpu-ptr: %u repeats, %u pointer checks each "
	       "(a tenth as many dlopens, a hundredth as many reads)\n",
	       reps, calls);
	for (int m = 0; m < NMEAS; m++) {
		double med = bench_median(v[m], (int)reps);
		printf("%-62s %9.1f ns (%.1f-%.1f)\n", names[m], med, v[m][0],
		       v[m][reps - 1]);
	}
	nvs_aio_destroy(h);
	nvs_pinned_free(buf);
	unlink(file);
	return sink == -1;
}
