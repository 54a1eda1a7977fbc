// SPDX-License-Identifier: MIT
/*
 * Staged device I/O from several threads at once, without Criterion so it
 * runs under ThreadSanitizer: four threads share one handle of two
 * workers, each writing its own device buffer to its own file and reading
 * it back into another, through the stand-in driver of
 * tests/fakes/fake_cuda.c (NVSWAP_LIBCUDA, set by meson). The workers'
 * streams, lanes and the driver's loading meet here. Prints "N passed,
 * N failed".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "nvswap/gpu.h"
#include "check.h"

enum { NTHREADS = 4, SIZE = (2 << 20) + 4099, ROUNDS = 4 };

static char dir[4096];
static struct nvs_aio *h;

struct job {
	int id;
	int bad;
};

static void *run(void *p)
{
	struct job *j = p;
	char path[4200], *src = malloc(SIZE), *back = malloc(SIZE);
	void *d1 = NULL, *d2 = NULL;

	snprintf(path, sizeof(path), "%s/t%d.bin", dir, j->id);
	if (!src || !back || nvs_gpu_malloc(0, SIZE, &d1) ||
	    nvs_gpu_malloc(0, SIZE, &d2)) {
		j->bad++;
		goto out;
	}
	for (int r = 0; r < ROUNDS; r++) {
		for (size_t i = 0; i < SIZE; i++)
			src[i] = (char)(i * 31 + (size_t)j->id * 7 + (size_t)r);
		if (nvs_gpu_memcpy(d1, src, SIZE) ||
		    nvs_aio_pwrite(h, d1, SIZE, path, 5, false) < 0 ||
		    nvs_gpu_memset(d2, 0, SIZE) ||
		    nvs_aio_pread(h, d2, SIZE, path, 5, false) < 0 ||
		    nvs_gpu_memcpy(back, d2, SIZE) || memcmp(back, src, SIZE))
			j->bad++;
	}
	unlink(path);
out:
	nvs_gpu_free(d1);
	nvs_gpu_free(d2);
	free(src);
	free(back);
	return NULL;
}

int main(void)
{
	const char *base = getenv("NVSWAP_TEST_DIR");
	struct nvs_aio_opts o;
	pthread_t t[NTHREADS];
	struct job jobs[NTHREADS];
	struct nvs_aio_stats st;

	snprintf(dir, sizeof(dir), "%s/nvs-gpu-XXXXXX", base ? base : ".");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	CHECK(nvs_gpu_open() > 0, "the stand-in driver loads");
	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = 2;
	o.block_size = 256u << 10;
	o.queue_depth = 8;
	CHECK(nvs_aio_create(&o, &h) == 0, "handle");
	for (int i = 0; i < NTHREADS; i++) {
		jobs[i] = (struct job){i, 0};
		pthread_create(&t[i], NULL, run, &jobs[i]);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		CHECK(jobs[i].bad == 0, "thread %d: %d bad rounds", i,
		      jobs[i].bad);
	}
	CHECK(nvs_aio_get_stats(h, &st) == 0, "stats");
	CHECK(st.device_bytes == 2ull * NTHREADS * ROUNDS * SIZE,
	      "device bytes %llu", (unsigned long long)st.device_bytes);
	CHECK(nvs_aio_destroy(h) == 0, "destroy");
	rmdir(dir);
	return check_report();
}
