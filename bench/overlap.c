// SPDX-License-Identifier: MIT
/*
 * How much of the swap I/O hides behind compute. A training step's walk
 * over LAYERS layers of the parameter swapper (nvswap/offload.h), forward
 * then backward, with the walk given by nvs_param_set_walk(): each visit
 * acquires the layer (which then reads up to buffers - 2 layers ahead
 * along the walk, on past its ends into the turn and the next step),
 * computes for a set time (busy work on the CPU, not sleep), releases the
 * layer dirty and evicts it: one read and one write-back a visit, except
 * where the layer's buffer is still there (the turn, a layer re-acquired
 * while its write-back runs). Swept over I/O-to-compute ratios from 0.25
 * to 4. Each repeat first times the steps with no compute (the I/O alone,
 * T_io), then with compute C per visit chosen for the ratio, T_step.
 * Prints per ratio the medians of T_step / max(2 x LAYERS x C, T_io)
 * (1.00 = perfect overlap) and of the share of T_io not hidden,
 * (T_step - 2 x LAYERS x C) / T_io, floored at 0; then what the swappers
 * did per step.
 *
 * --steps 1 (the default): one step from cold (its first layer read) to
 * drained (its last write-back done). --steps N > 1: the steady state of
 * a training loop: one step untimed to fill the pipeline, then N steps
 * back to back, timed from the end of the untimed one to the end of the
 * last one's last visit (each boundary the same point of the cycle: the
 * last write-back and the next step's read-ahead in flight), then the
 * drain, untimed. T_io and T_step are per step.
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
 *
 * NVSWAP_BENCH_SAMPLES=1 also prints every repeat, in the order run, as
 *   sample ratio R rep K T_io S T_step S step/max X not_hidden P%
 * so the spread of T_io itself (the I/O alone, repeat to repeat) shows
 * beside the ratios it divides. The summary lines do not change.
 */
#include <nvswap/nvswap.h>

#include "bench.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
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
static unsigned passes; /* steps run, for report() */

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

/* One visit of layer @l: acquire it (at full bandwidth when it still has
 * to be read; the parameter swapper then reads ahead along the walk),
 * compute, release it dirty and evict it. */
static int visit(struct nvs_param_swapper *p, unsigned l, double c)
{
	unsigned char *ptr;
	int ret;

	if ((ret = nvs_param_acquire_layer(p, l, (void **)&ptr)) < 0)
		return ret;
	ptr[0]++;
	if (c > 0)
		compute(c);
	if ((ret = nvs_param_release_layer(p, l, true)) < 0)
		return ret;
	return nvs_param_evict_layer(p, l);
}

/* A training step's walk: forward up the layers, backward down again
 * (the turn-around layer is acquired twice, as in training). */
static int pass(struct nvs_param_swapper *p, double c)
{
	int ret = 0;

	for (unsigned l = 0; l < cfg.layers && ret == 0; l++)
		ret = visit(p, l, c);
	for (unsigned l = cfg.layers; l-- > 0 && ret == 0;)
		ret = visit(p, l, c);
	passes++;
	return ret;
}

/* The time per step: see the file's comment. */
static double steps(struct nvs_swapper *s, struct nvs_param_swapper *p,
		    double c)
{
	double t0, t1;

	if (cfg.steps > 1 && pass(p, c) < 0)
		return -1;
	t0 = bench_now();
	for (unsigned k = 0; k < cfg.steps; k++)
		if (pass(p, c) < 0)
			return -1;
	t1 = bench_now();
	if (nvs_swapper_wait_all(s) < 0)
		return -1;
	if (cfg.steps == 1)
		t1 = bench_now();
	return (t1 - t0) / cfg.steps;
}

/* What the swappers did per step, over every step since @st0/@ps0. */
static void report(struct nvs_swapper *s, struct nvs_param_swapper *p,
		   const struct nvs_swap_stats *st0,
		   const struct nvs_param_stats *ps0)
{
	struct nvs_param_stats ps;
	struct nvs_swap_stats st;
	double n = passes;

	if (!passes || nvs_swapper_stats(s, &st) < 0 ||
	    nvs_param_swapper_stats(p, &ps) < 0)
		return;
	printf("per step (%u steps): %.1f reads, %.1f writes; %.1f acquires "
	       "from a buffer being written back, %.1f layers read ahead "
	       "past a turn of the walk\n",
	       passes, (double)(st.reads - st0->reads) / n,
	       (double)(st.writes - st0->writes) / n,
	       (double)(st.write_hits - st0->write_hits) / n,
	       (double)(ps.readaheads_past_end - ps0->readaheads_past_end) / n);
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
	struct nvs_param_swapper_opts po;
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	struct nvs_param_swapper *p;
	struct nvs_config *conf = NULL;
	struct nvs_swap_stats st0;
	struct nvs_param_stats ps0;
	unsigned *walk;
	size_t size;
	bool samples;
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
			for (char *v = optarg, *end; *v && nratios < MAX_RATIOS;
			     v = *end == ',' ? end + 1 : end) {
				ratios[nratios] = strtod(v, &end);
				if (end == v || ratios[nratios] <= 0)
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
	nvs_param_swapper_opts_init(&po);
	po.lookahead = (unsigned)cfg.lookahead;
	walk = calloc(cfg.layers, sizeof(*walk));
	if (!walk || nvs_param_swapper_create(s, &po, &p) < 0) {
		fprintf(stderr, "%s\n", walk ? nvs_last_error() : "no memory");
		return 1;
	}
	size = cfg.size;
	for (unsigned l = 0; l < cfg.layers; l++) {
		walk[l] = l;
		if (nvs_param_add_layer(p, l, 1, &size, NULL) < 0) {
			fprintf(stderr, "%s\n", nvs_last_error());
			return 1;
		}
	}
	/* written once (reads are real from now), then the walk */
	if (pass(p, 0) < 0 || nvs_swapper_wait_all(s) < 0 ||
	    nvs_param_set_walk(p, cfg.layers, walk) < 0 ||
	    nvs_swapper_stats(s, &st0) < 0 ||
	    nvs_param_swapper_stats(p, &ps0) < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	passes = 0;
	printf("forward + backward walk: %u layers x %zu MiB (read + "
	       "write-back a visit), %u buffers, lookahead %u, qd %u, "
	       "parallelism %u, block %u KiB, %u reps, %s\n",
	       cfg.layers, cfg.size >> 20, cfg.buffers, po.lookahead,
	       o.aio.queue_depth, o.aio.intra_op_parallelism,
	       o.aio.block_size >> 10, cfg.reps,
	       cfg.steps > 1 ? "steady state" : "one step, cold to drained");
	printf("  I/O:compute   T_io(s)  T_step(s)  step/max(compute,io)"
	       "         I/O not hidden\n");
	samples = getenv("NVSWAP_BENCH_SAMPLES") != NULL;
	for (unsigned k = 0; k < nratios; k++) {
		double eff[MAX_REPS], hid[MAX_REPS], tio[MAX_REPS],
			tst[MAX_REPS];
		for (unsigned r = 0; r < cfg.reps; r++) {
			double io = steps(s, p, 0);
			if (io < 0) {
				fprintf(stderr, "%s\n", nvs_last_error());
				return 1;
			}
			double per = io / (2 * cfg.layers) / ratios[k];
			double step = steps(s, p, per);
			if (step < 0) {
				fprintf(stderr, "%s\n", nvs_last_error());
				return 1;
			}
			double comp = per * 2 * cfg.layers;
			tio[r] = io;
			tst[r] = step;
			eff[r] = step / (comp > io ? comp : io);
			hid[r] = (step - comp) / io;
			if (hid[r] < 0)
				hid[r] = 0;
			if (samples)
				printf("  sample ratio %.2f rep %u T_io %.4f "
				       "T_step %.4f step/max %.4f not_hidden "
				       "%.2f%%\n",
				       ratios[k], r, io, step, eff[r],
				       100 * hid[r]);
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
	report(s, p, &st0, &ps0);
	if (nvs_param_swapper_destroy(p) < 0 || nvs_swapper_destroy(s) < 0) {
		fprintf(stderr, "%s\n", nvs_last_error());
		return 1;
	}
	nvs_config_free(conf);
	free(walk);
	return 0;
}
