// SPDX-License-Identifier: MIT
/*
 * How much of the swap I/O hides behind compute. A layer walk over
 * LAYERS tensors (read layer l+1 ahead, acquire l, compute, release it
 * dirty, evict: one read and one write-back per layer) with synthetic
 * compute of a set duration per layer (busy work on the CPU, not sleep),
 * swept over I/O-to-compute ratios from 0.25 to 4. Each repeat first times
 * the walk with no compute (the I/O alone, T_io), then with compute C per
 * layer chosen for the ratio, T_step. Prints per ratio the medians of
 * T_step / max(LAYERS x C, T_io) (1.00 = perfect overlap) and of the
 * share of T_io not hidden, (T_step - LAYERS x C) / T_io, floored at 0.
 *
 *   nvswap-bench-overlap [--dir D] [--config F] [--layers N]
 *                        [--tensor-size N[K|M|G]] [--buffers N] [--reps N]
 *                        [--steps N] [--lookahead N] [--ratios R,R...]
 *
 * --ratios sweeps only the I/O:compute ratios listed (default 0.25, 0.5,
 * 1, 2, 4); bench/quick.py takes the balance point, 1, alone.
 *
 * With --config, the aio section (queue depth, parallelism, block size...)
 * and nvswap section of a DeepSpeed-style file set the handle. The walk
 * reads up to --lookahead layers ahead (default buffers - 2), as far as
 * free buffers go: pass a config's offload_param.buffer_count as
 * --buffers and its nvswap.lookahead as --lookahead to run its pool.
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

#define MAX_REPS 32
#define MAX_RATIOS 16

static struct {
	const char *dir, *config;
	unsigned layers, buffers, reps, steps;
	size_t size;
	int lookahead; /* -1: buffers - 2 */
} cfg = {"nvme_swap", NULL, 16, 4, 5, 1, 32u << 20, -1};

static volatile double sink;

/* Busy work until @seconds have passed. NVSWAP_BENCH_SLEEP=1 sleeps
 * instead: a diagnostic only (it leaves the CPU to the I/O path), never
 * the reported figure. */
static void compute(double seconds)
{
	double end = bench_now() + seconds, x = 1.0;

	if (getenv("NVSWAP_BENCH_SLEEP")) {
		struct timespec ts = {
			(time_t)seconds,
			(long)((seconds - (time_t)seconds) * 1e9)};
		nanosleep(&ts, NULL);
		return;
	}

	while (bench_now() < end)
		for (int i = 0; i < 2000; i++)
			x = x * 1.0000001 + 1e-9;
	sink = x;
}

/* One visit of layer @l walking in direction @dir: acquire it (at full
 * bandwidth when it still has to be read), read up to lookahead layers
 * ahead into free buffers, compute, release it dirty and evict it. */
static int visit(struct nvs_swapper *s, unsigned l, int dir, double c)
{
	unsigned char *p;
	int ret;

	if ((ret = nvs_swapper_acquire(s, l, (void **)&p)) < 0)
		return ret;
	for (int k = 1; k <= cfg.lookahead; k++) {
		long next = (long)l + dir * k;
		if (next < 0 || next >= (long)cfg.layers)
			break;
		ret = nvs_swapper_try_prefetch(s, (uint64_t)next);
		if (ret < 0 && ret != -EAGAIN)
			return ret;
	}
	p[0]++;
	if (c > 0)
		compute(c);
	if ((ret = nvs_swapper_release(s, l, true)) < 0)
		return ret;
	return nvs_swapper_evict(s, l);
}

/* A training step's walk: forward up the layers, backward down again
 * (the turn-around layer is still in memory, as in training). */
static int pass(struct nvs_swapper *s, double c)
{
	int ret = 0;

	for (unsigned l = 0; l < cfg.layers && ret == 0; l++)
		ret = visit(s, l, 1, c);
	for (unsigned l = cfg.layers; l-- > 0 && ret == 0;)
		ret = visit(s, l, -1, c);
	return ret;
}

/* cfg.steps steps back to back, as training runs them (a step's last
 * write-back overlaps the next step's start), then everything drained:
 * the time per step. */
static double steps(struct nvs_swapper *s, double c)
{
	double t0 = bench_now();

	for (unsigned k = 0; k < cfg.steps; k++)
		if (pass(s, c) < 0)
			return -1;
	if (nvs_swapper_wait_all(s) < 0)
		return -1;
	return (bench_now() - t0) / cfg.steps;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dir", required_argument, NULL, 'd'},
		{"config", required_argument, NULL, 'c'},
		{"layers", required_argument, NULL, 'l'},
		{"tensor-size", required_argument, NULL, 's'},
		{"buffers", required_argument, NULL, 'b'},
		{"reps", required_argument, NULL, 'r'},
		{"steps", required_argument, NULL, 't'},
		{"ratios", required_argument, NULL, 'x'},
		{"lookahead", required_argument, NULL, 'a'},
		{NULL, 0, NULL, 0},
	};
	double ratios[MAX_RATIOS] = {0.25, 0.5, 1, 2, 4};
	unsigned nratios = 5;
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	struct nvs_config *conf = NULL;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'd':
			cfg.dir = optarg;
			break;
		case 'c':
			cfg.config = optarg;
			break;
		case 'l':
			cfg.layers = (unsigned)atoi(optarg);
			break;
		case 's':
			if (bench_parse_size(optarg, &cfg.size) < 0)
				return 2;
			break;
		case 'b':
			cfg.buffers = (unsigned)atoi(optarg);
			break;
		case 'r':
			cfg.reps = (unsigned)atoi(optarg);
			break;
		case 't':
			cfg.steps = (unsigned)atoi(optarg);
			break;
		case 'x':
			nratios = 0;
			for (char *p = optarg, *end; *p && nratios < MAX_RATIOS;
			     p = *end == ',' ? end + 1 : end) {
				ratios[nratios] = strtod(p, &end);
				if (end == p || ratios[nratios] <= 0)
					return 2;
				nratios++;
			}
			if (!nratios)
				return 2;
			break;
		case 'a':
			cfg.lookahead = atoi(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: nvswap-bench-overlap [--dir D] "
				"[--config F] [--layers N] [--tensor-size N] "
				"[--buffers N] [--reps N] [--steps N] "
				"[--lookahead N] [--ratios R,R...]\n");
			return 2;
		}
	}
	if (cfg.lookahead < 0)
		cfg.lookahead = (int)cfg.buffers - 2;
	if (cfg.layers < 2 || cfg.buffers < 2 || !cfg.reps || !cfg.steps ||
	    cfg.reps > MAX_REPS)
		return 2;
	mkdir(cfg.dir, 0700);
	nvs_swapper_opts_init(&o);
	if (cfg.config) {
		if (nvs_config_load(cfg.config, &conf) < 0 ||
		    nvs_config_aio_opts(conf, &o.aio) < 0) {
			fprintf(stderr, "%s\n", nvs_last_error());
			return 1;
		}
	}
	o.npaths = 1;
	o.nvme_paths[0] = cfg.dir;
	o.name = "overlap";
	o.buffer_size = cfg.size;
	o.buffer_count = cfg.buffers;
	if (nvs_swapper_create(&o, &s) < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	for (unsigned l = 0; l < cfg.layers; l++)
		if (nvs_swapper_register(s, l, cfg.size, NULL) < 0) {
			fprintf(stderr, "%s\n", nvs_last_error());
			return 1;
		}
	if (pass(s, 0) < 0 || nvs_swapper_wait_all(s) < 0) {
		/* written once: reads are real from now */
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	printf("forward + backward walk: %u layers x %zu MiB (read + "
	       "write-back a visit), %u "
	       "buffers, lookahead %d, qd %u, parallelism %u, block %u KiB, "
	       "%u reps\n",
	       cfg.layers, cfg.size >> 20, cfg.buffers, cfg.lookahead,
	       o.aio.queue_depth, o.aio.intra_op_parallelism,
	       o.aio.block_size >> 10, cfg.reps);
	printf("  I/O:compute   T_io(s)  T_step(s)  step/max(compute,io)"
	       "         I/O not hidden\n");
	for (unsigned k = 0; k < nratios; k++) {
		double eff[MAX_REPS], hid[MAX_REPS], tio[MAX_REPS],
			tst[MAX_REPS];
		for (unsigned r = 0; r < cfg.reps; r++) {
			double io = steps(s, 0);
			if (io < 0)
				return 1;
			double per = io / (2 * cfg.layers) / ratios[k];
			double step = steps(s, per);
			if (step < 0)
				return 1;
			double comp = per * 2 * cfg.layers;
			tio[r] = io;
			tst[r] = step;
			eff[r] = step / (comp > io ? comp : io);
			hid[r] = (step - comp) / io;
			if (hid[r] < 0)
				hid[r] = 0;
		}
		double me = bench_median(eff, (int)cfg.reps);
		double mh = bench_median(hid, (int)cfg.reps);
		printf("  %5.2f        %7.3f  %9.3f  %6.3f (%.3f-%.3f)  "
		       "%6.1f%% (%.1f-%.1f)\n",
		       ratios[k], bench_median(tio, (int)cfg.reps),
		       bench_median(tst, (int)cfg.reps), me, eff[0],
		       eff[cfg.reps - 1], 100 * mh, 100 * hid[0],
		       100 * hid[cfg.reps - 1]);
	}
	if (nvs_swapper_destroy(s) < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	nvs_config_free(conf);
	return 0;
}
