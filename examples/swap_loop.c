// SPDX-License-Identifier: MIT
/*
 * The swap manager's loop, as a training framework drives it: layers
 * registered once, then per step and per layer prefetch the next layer,
 * acquire this one, compute, release it dirty and evict it, so the reads
 * and write-backs run while the previous layer computes. Settings come
 * from a DeepSpeed-style config (examples/swap_config.json).
 *
 *   swap_loop [config.json] [layers] [steps]
 */
#include <stdio.h>
#include <stdlib.h>

#include <nvswap/nvswap.h>

#define CHECK(call)                                                            \
	do {                                                                   \
		int ret_ = (call);                                             \
		if (ret_ < 0) {                                                \
			fprintf(stderr, "swap_loop: %s\n", nvs_last_error());  \
			return 1;                                              \
		}                                                              \
	} while (0)

/* The "compute" of one layer: every weight gets the step number added. */
static void layer_step(float *w, size_t n, unsigned step)
{
	for (size_t i = 0; i < n; i++)
		w[i] += (float)step;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "examples/swap_config.json";
	unsigned layers = argc > 2 ? (unsigned)atoi(argv[2]) : 16;
	unsigned steps = argc > 3 ? (unsigned)atoi(argv[3]) : 3;
	struct nvs_swapper_opts opts;
	struct nvs_swap_stats st;
	struct nvs_config *cfg;
	struct nvs_swapper *s;
	size_t n;

	if (!layers || !steps) {
		fprintf(stderr, "usage: swap_loop [config.json] [layers] "
				"[steps]\n");
		return 2;
	}
	CHECK(nvs_config_load(path, &cfg));
	nvs_swapper_opts_init(&opts);
	opts.elem_size = sizeof(float); /* buffer_size counts fp32 elements */
	CHECK(nvs_config_swapper_opts(cfg, NVS_OFFLOAD_PARAM, 0, &opts));
	/* (A missing nvme_path, as the sample config's ./nvme_swap, is
	 * made here and goes with the scratch swapper at destroy.) */
	CHECK(nvs_swapper_create(&opts, &s));
	n = opts.buffer_size / sizeof(float); /* one layer fills a buffer */
	printf("%u layers of %zu MiB in %s, %u pool buffers, checksum %s\n",
	       layers, opts.buffer_size >> 20, nvs_swapper_dir(s, 0),
	       opts.buffer_count, opts.checksum ? "on" : "off");

	/* Layer l starts as all l's; registering writes it to NVMe. */
	float *init = malloc(opts.buffer_size);
	if (!init)
		return 1;
	for (unsigned l = 0; l < layers; l++) {
		for (size_t i = 0; i < n; i++)
			init[i] = (float)l;
		CHECK(nvs_swapper_register(s, l, opts.buffer_size, init));
	}
	free(init);

	for (unsigned step = 1; step <= steps; step++) {
		CHECK(nvs_swapper_prefetch(s, 0));
		for (unsigned l = 0; l < layers; l++) {
			float *w;
			if (l + 1 < layers) /* read ahead while l computes */
				CHECK(nvs_swapper_prefetch(s, l + 1));
			CHECK(nvs_swapper_acquire(s, l, (void **)&w));
			layer_step(w, n, step);
			CHECK(nvs_swapper_release(s, l, true));
			CHECK(nvs_swapper_evict(s, l)); /* write-behind */
		}
		CHECK(nvs_swapper_stats(s, &st));
		printf("step %u: read %llu MiB, written %llu MiB, blocked in "
		       "acquire %.1f ms\n",
		       step, (unsigned long long)(st.bytes_read >> 20),
		       (unsigned long long)(st.bytes_written >> 20),
		       (double)st.acquire_wait_ns / 1e6);
	}
	CHECK(nvs_swapper_wait_all(s));

	/* Every weight of layer l is now l + 1 + 2 + ... + steps. */
	float want_add = (float)steps * (float)(steps + 1) / 2;
	for (unsigned l = 0; l < layers; l++) {
		float *w;
		CHECK(nvs_swapper_acquire(s, l, (void **)&w));
		for (size_t i = 0; i < n; i++)
			if (w[i] != (float)l + want_add) {
				fprintf(stderr, "layer %u weight %zu: %g\n", l,
					i, (double)w[i]);
				return 1;
			}
		CHECK(nvs_swapper_release(s, l, false));
		CHECK(nvs_swapper_evict(s, l));
	}
	CHECK(nvs_swapper_stats(s, &st));
	printf("all %u layers correct; pool high water %u of %u buffers, "
	       "backend %s\n",
	       layers, st.pool_high_water, st.buffer_count,
	       nvs_backend_name(st.backend));
	CHECK(nvs_swapper_destroy(s));
	nvs_config_free(cfg);
	return 0;
}
