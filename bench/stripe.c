// SPDX-License-Identifier: MIT
/*
 * One swap cycle of a swapper striped over several paths (devices), for
 * bench/stripe.py: register K tensors, write them all (acquire, touch a
 * byte per page, release dirty, evict: write-backs overlap the next
 * acquire), then read them all back (prefetch a window ahead, acquire,
 * check the bytes, release clean, evict). Prints the write and read GB/s
 * of that one cycle and each path's share of the bytes; the driver
 * repeats and interleaves it with fio. Public API only.
 *
 *   nvswap-bench-stripe --path P [--path P]... [--tensors K]
 *                       [--tensor-size N] [--buffers N] [--stripe-size N]
 *                       [--queue-depth N] [--block-size N] [--seed N]
 *
 * --queue-depth is the swapper's handle's: requests in flight over all
 * paths together (the driver gives it per-path depth x paths).
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
	const char *path[NVS_SWAPPER_MAX_PATHS];
	unsigned npaths, tensors, buffers, qd, bs, seed;
	size_t size, stripe;
} cfg = {.tensors = 32,
	 .buffers = 8,
	 .qd = 32,
	 .bs = 1u << 20,
	 .size = 64u << 20,
	 .stripe = 1u << 20};

static unsigned char mark(unsigned id, size_t page)
{
	return (unsigned char)(id * 131u + page * 7u + cfg.seed);
}

static int write_all(struct nvs_swapper *s)
{
	int ret = 0;

	for (unsigned i = 0; i < cfg.tensors && ret == 0; i++) {
		unsigned char *p;
		if ((ret = nvs_swapper_acquire(s, i, (void **)&p)) < 0)
			break;
		for (size_t o = 0; o < cfg.size; o += 4096)
			p[o] = mark(i, o / 4096);
		if ((ret = nvs_swapper_release(s, i, true)) < 0)
			break;
		ret = nvs_swapper_evict(s, i);
	}
	return ret < 0 ? ret : nvs_swapper_wait_all(s);
}

static int read_all(struct nvs_swapper *s)
{
	unsigned ahead = cfg.buffers - 1, next = 0;
	int ret = 0;

	for (unsigned i = 0; i < cfg.tensors && ret == 0; i++) {
		unsigned char *p;
		while (ret == 0 && next < cfg.tensors && next <= i + ahead - 1)
			ret = nvs_swapper_prefetch(s, next++);
		if (ret < 0 ||
		    (ret = nvs_swapper_acquire(s, i, (void **)&p)) < 0)
			break;
		/* Each page's first byte, and on every other page the byte
		 * before it (never written: zero). */
		for (size_t o = 0; o < cfg.size; o += 4096)
			if (p[o] != mark(i, o / 4096) ||
			    (o % 8192 && p[o - 1] != 0)) {
				fprintf(stderr,
					"tensor %u: byte %zu read back wrong\n",
					i, o);
				return -EBADMSG;
			}
		if ((ret = nvs_swapper_release(s, i, false)) < 0)
			break;
		ret = nvs_swapper_evict(s, i);
	}
	return ret < 0 ? ret : nvs_swapper_wait_all(s);
}

static void usage(void)
{
	fprintf(stderr, "usage: nvswap-bench-stripe --path P [--path P]... "
			"[--tensors K] [--tensor-size N] [--buffers N] "
			"[--stripe-size N] [--queue-depth N] [--block-size N] "
			"[--seed N]\n");
}

static int parse(int argc, char **argv)
{
	static const struct option lo[] = {
		{"path", required_argument, NULL, 'p'},
		{"tensors", required_argument, NULL, 't'},
		{"tensor-size", required_argument, NULL, 's'},
		{"buffers", required_argument, NULL, 'b'},
		{"stripe-size", required_argument, NULL, 'S'},
		{"queue-depth", required_argument, NULL, 'q'},
		{"block-size", required_argument, NULL, 'k'},
		{"seed", required_argument, NULL, 'x'},
		{NULL, 0, NULL, 0},
	};
	size_t v;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (cfg.npaths == NVS_SWAPPER_MAX_PATHS)
				return -1;
			cfg.path[cfg.npaths++] = optarg;
			break;
		case 't':
			cfg.tensors = (unsigned)atoi(optarg);
			break;
		case 'b':
			cfg.buffers = (unsigned)atoi(optarg);
			break;
		case 'q':
			cfg.qd = (unsigned)atoi(optarg);
			break;
		case 'x':
			cfg.seed = (unsigned)atoi(optarg);
			break;
		case 's':
		case 'S':
		case 'k':
			if (bench_parse_size(optarg, &v) < 0)
				return -1;
			if (c == 's')
				cfg.size = v;
			else if (c == 'S')
				cfg.stripe = v;
			else
				cfg.bs = (unsigned)v;
			break;
		default:
			return -1;
		}
	}
	if (!cfg.npaths || !cfg.tensors || cfg.buffers < 2 || !cfg.qd ||
	    cfg.size % 4096 || cfg.stripe % 4096)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	struct nvs_swap_stats st;
	double t0, t1, t2, bytes;
	int ret;

	if (parse(argc, argv) < 0) {
		usage();
		return 2;
	}
	nvs_swapper_opts_init(&o);
	o.npaths = cfg.npaths;
	for (unsigned p = 0; p < cfg.npaths; p++)
		o.nvme_paths[p] = cfg.path[p];
	o.name = "bench-stripe";
	o.buffer_size = cfg.size;
	o.buffer_count = cfg.buffers;
	o.stripe_size = cfg.stripe;
	o.aio.queue_depth = cfg.qd;
	o.aio.block_size = cfg.bs;
	o.aio.overlap_events = true;
	if (nvs_swapper_create(&o, &s) < 0) {
		fprintf(stderr, "create: %s\n", nvs_last_error());
		return 1;
	}
	for (unsigned i = 0; i < cfg.tensors; i++)
		if (nvs_swapper_register(s, i, cfg.size, NULL) < 0) {
			fprintf(stderr, "register: %s\n", nvs_last_error());
			return 1;
		}
	t0 = bench_now();
	ret = write_all(s);
	t1 = bench_now();
	if (ret == 0)
		ret = read_all(s);
	t2 = bench_now();
	if (ret < 0) {
		if (ret != -EBADMSG)
			fprintf(stderr, "cycle: %s\n", nvs_last_error());
		return 1;
	}
	nvs_swapper_stats(s, &st);
	bytes = (double)cfg.size * cfg.tensors;
	printf("stripe: %u paths, %u tensors x %zu MiB, stripe %zu KiB, "
	       "%u buffers, qd %u, block %u KiB, backend %s\n",
	       cfg.npaths, cfg.tensors, cfg.size >> 20, cfg.stripe >> 10,
	       cfg.buffers, cfg.qd, cfg.bs >> 10, nvs_backend_name(st.backend));
	printf("write: %.3f GB/s\n", bytes / (t1 - t0) / 1e9);
	printf("read:  %.3f GB/s\n", bytes / (t2 - t1) / 1e9);
	for (unsigned p = 0; p < st.npaths; p++)
		printf("path %u: written %" PRIu64 " read %" PRIu64 "\n", p,
		       st.path_bytes_written[p], st.path_bytes_read[p]);
	if (nvs_swapper_destroy(s) < 0) {
		fprintf(stderr, "destroy: %s\n", nvs_last_error());
		return 1;
	}
	return 0;
}
