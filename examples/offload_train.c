// SPDX-License-Identifier: MIT
/*
 * The main job: train a small MLP (ReLU layers, mean squared error, Adam)
 * with its parameters, gradients and optimizer state all on NVMe through
 * the role swappers, configured by a DeepSpeed JSON file, with pinned
 * pools much smaller than the model. The same training runs in memory
 * beside it, and at the end the offloaded weights must equal the
 * in-memory ones bit for bit.
 *
 * --stop-after N stops after step N with the offloaded state saved as a
 * persistent swap set (a checkpoint tagged "step N" of each role's set);
 * --resume reopens it and trains on from there, the in-memory run
 * replaying the saved steps for its reference, and the final weights
 * must still equal an uninterrupted run's bit for bit. A persistent run
 * (these flags, or "nvswap": {"persist": "persistent"} in the config)
 * saves its last step too; a saved run is only ever resumed, never
 * trained over (remove its nvswap/ directories to start again).
 *
 *   offload_train [--config F] [--layers N] [--hidden N] [--steps N]
 *                 [--micro-batches N] [--stop-after N | --resume]
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nvswap/nvswap.h>

#include "train_model.h"

static unsigned STEPS = 8, MB = 2, STOP_AFTER;
static bool RESUME, PERSISTENT;

/* One step in memory: the reference. */
static float mem_step(struct mem *r, struct work *w, unsigned step)
{
	float loss = mem_grads(r, w, step, 0, MB);

	mem_update(r, step);
	return loss;
}

/* A role's swapper. With @persist (an enum nvs_persist, 0: as the config
 * says) over the config; a saved run is refused unless resuming. */
static int open_core(struct nvs_config *cfg, enum nvs_offload_kind kind,
		     int persist, struct nvs_swapper **out)
{
	struct nvs_swapper_opts so;
	int n;

	nvs_swapper_opts_init(&so);
	so.elem_size = sizeof(float);
	TRY(nvs_config_swapper_opts(cfg, kind, 0, &so));
	if (persist)
		so.persist = (uint8_t)persist;
	TRY(nvs_swapper_create(&so, out));
	PERSISTENT = so.persist != NVS_PERSIST_SCRATCH;
	if (!PERSISTENT || RESUME)
		return 0;
	n = nvs_swapper_generations(*out, NULL, 0);
	if (n > 0) {
		fprintf(stderr,
			"offload_train: %s holds a saved run (%d generation(s))"
			": --resume it, or remove that directory to start "
			"again\n",
			nvs_swapper_dir(*out, 0), n);
		return -EEXIST;
	}
	return n;
}

/* The step the newest generation of @s was saved at ("step N"). */
static int saved_step(struct nvs_swapper *s, unsigned *step)
{
	struct nvs_generation_info g;
	int n = nvs_swapper_generations(s, &g, 1), used = 0;

	if (n < 1) {
		fprintf(stderr, "offload_train: %s holds no generation\n",
			nvs_swapper_dir(s, 0));
		return -EINVAL;
	}
	if (sscanf(g.tag, "step %u%n", step, &used) != 1 || g.tag[used]) {
		fprintf(stderr,
			"offload_train: %s: its newest generation is tagged "
			"\"%s\", not a step this example saved\n",
			nvs_swapper_dir(s, 0), g.tag);
		return -EINVAL;
	}
	return 0;
}

/* The step both sets were saved at (one message when they cannot be
 * resumed together). */
static int resume_step(struct off *o, unsigned *step)
{
	unsigned sp, so;

	if (saved_step(o->pcore, &sp) < 0 || saved_step(o->ocore, &so) < 0)
		return -EINVAL;
	if (sp != so) {
		fprintf(stderr,
			"offload_train: the parameters were saved at step %u, "
			"the optimizer state at step %u: not one run\n",
			sp, so);
		return -EINVAL;
	}
	if (sp > STEPS) {
		fprintf(stderr,
			"offload_train: saved at step %u, beyond --steps %u\n",
			sp, STEPS);
		return -EINVAL;
	}
	*step = sp;
	return 0;
}

/* Save both sets at @step, as one checkpoint each tagged "step N". */
static int save(struct off *o, unsigned step)
{
	char tag[32];
	int gp, go;

	snprintf(tag, sizeof(tag), "step %u", step);
	TRY(nvs_swapper_checkpoint(o->pcore, tag));
	TRY(nvs_swapper_checkpoint(o->ocore, tag));
	TRY(gp = nvs_swapper_checkpoint_wait(o->pcore));
	TRY(go = nvs_swapper_checkpoint_wait(o->ocore));
	printf("saved step %u: generation %d of %s, %d of %s\n", step, gp,
	       nvs_swapper_dir(o->pcore, 0), go, nvs_swapper_dir(o->ocore, 0));
	return 0;
}

static int setup(const char *config, struct off *o, float *init, int persist)
{
	struct nvs_config *cfg;

	TRY(nvs_config_load(config, &cfg));
	for (unsigned i = 0; nvs_config_warning(cfg, i); i++)
		fprintf(stderr, "note: %s\n", nvs_config_warning(cfg, i));
	if (open_core(cfg, NVS_OFFLOAD_PARAM, persist, &o->pcore) < 0 ||
	    open_core(cfg, NVS_OFFLOAD_OPTIMIZER, persist, &o->ocore) < 0) {
		nvs_config_free(cfg);
		return -1;
	}
	if (off_setup(cfg, o, init) < 0) {
		nvs_config_free(cfg);
		return -1;
	}
	nvs_config_free(cfg);
	return 0;
}

static bool made_sample_dir;

/* Destroy whatever setup made, first error kept: every exit path runs
 * this, so a run stopped by a full disk leaves no swap files behind. */
static int teardown(struct off *o)
{
	int r[5], ret = 0;

	r[0] = nvs_param_swapper_destroy(o->params);
	r[1] = nvs_optim_swapper_destroy(o->optim);
	r[2] = nvs_grad_swapper_destroy(o->grads);
	r[3] = nvs_swapper_destroy(o->pcore);
	r[4] = nvs_swapper_destroy(o->ocore);
	for (unsigned i = 0; i < 5; i++)
		if (r[i] < 0 && !ret) {
			ret = r[i];
			fprintf(stderr, "offload_train: %s\n",
				nvs_last_error());
		}
	*o = (struct off){0};
	if (made_sample_dir)
		rmdir("nvme_swap"); /* only when empty: never the user's */
	made_sample_dir = false;
	return ret;
}

static void usage(void)
{
	fprintf(stderr, "usage: offload_train [--config F] [--layers N] "
			"[--hidden N] [--steps N] [--micro-batches N] "
			"[--stop-after N | --resume]\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"config", required_argument, NULL, 'c'},
		{"layers", required_argument, NULL, 'l'},
		{"hidden", required_argument, NULL, 'h'},
		{"steps", required_argument, NULL, 's'},
		{"micro-batches", required_argument, NULL, 'm'},
		{"stop-after", required_argument, NULL, 'a'},
		{"resume", no_argument, NULL, 'r'},
		{NULL, 0, NULL, 0},
	};
	const char *config = "examples/ds_config.json";
	struct nvs_swap_stats a, b;
	struct off o = {0};
	/* Static: reachable until exit on every path, so LeakSanitizer
	 * sees the process's working memory, not leaks. */
	static struct mem r;
	static struct work w;
	unsigned first = 1, last;
	int c, persist = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		unsigned *dst = c == 'l'   ? &L
				: c == 'h' ? &H
				: c == 's' ? &STEPS
				: c == 'a' ? &STOP_AFTER
					   : &MB;
		if (c == 'c' || c == 'r') {
			config = c == 'c' ? optarg : config;
			RESUME |= c == 'r';
			continue;
		}
		if (c == '?' || !(*dst = arg_uint(optarg, 1, 1u << 16))) {
			usage();
			return 2;
		}
	}
	if (STOP_AFTER && (RESUME || STOP_AFTER >= STEPS)) {
		fprintf(stderr, "offload_train: --stop-after takes a step "
				"before the last (--steps) and no --resume\n");
		usage();
		return 2;
	}
	if (STOP_AFTER || RESUME)
		persist = RESUME ? NVS_PERSIST_RESUME : NVS_PERSIST_PERSISTENT;
	last = STOP_AFTER ? STOP_AFTER : STEPS;
	model_prog = "offload_train";
	model_init();
	if (mem_alloc(&r) < 0 || work_alloc(&w) < 0)
		return 1;
	/* The sample config's nvme_path; removed again, when empty, by
	 * teardown if this run made it. */
	made_sample_dir = mkdir("nvme_swap", 0700) == 0;
	if (setup(config, &o, w.g, persist) < 0) {
		teardown(&o);
		return 1;
	}
	if (RESUME) {
		unsigned sp;
		if (resume_step(&o, &sp) < 0) {
			teardown(&o);
			return 1;
		}
		/* The reference replays the saved steps in memory. */
		for (unsigned step = 1; step <= sp; step++)
			mem_step(&r, &w, step);
		first = sp + 1;
	}

	double model = (double)L * PN * sizeof(float);
	nvs_swapper_stats(o.pcore, &a);
	nvs_swapper_stats(o.ocore, &b);
	printf("offload_train: %u layers x %u hidden, batch %u x %u "
	       "micro-batches, Adam, %u steps; config %s\n",
	       L, H, BATCH, MB, STEPS, config);
	printf("on NVMe (%s, %s): parameters %.1f MiB, gradients %.1f MiB, "
	       "optimizer state %.1f MiB; pinned pools %.1f + %.1f MiB\n",
	       nvs_swapper_dir(o.pcore, 0), nvs_backend_name(a.backend),
	       model / 1048576, model / 1048576, 2 * model / 1048576,
	       (double)a.buffer_count * a.buffer_size / 1048576,
	       (double)b.buffer_count * b.buffer_size / 1048576);
	if (RESUME)
		printf("resumed after step %u (saved in %s and %s); the "
		       "in-memory run replayed steps 1-%u\n",
		       first - 1, nvs_swapper_dir(o.pcore, 0),
		       nvs_swapper_dir(o.ocore, 0), first - 1);
	uint64_t rd0 = a.bytes_read + b.bytes_read;
	uint64_t wr0 = a.bytes_written + b.bytes_written;
	uint64_t wait0 = a.acquire_wait_ns + b.acquire_wait_ns;
	for (unsigned step = first; step <= last; step++) {
		float loss, ref_loss;
		if (isatty(2))
			fprintf(stderr, "\rstep %u/%u ...", step, STEPS);
		double t0 = now();
		if (off_grads(&o, &w, step, 0, MB, &loss) < 0 ||
		    off_update(&o, &w, step, NULL, NULL) < 0) {
			teardown(&o);
			return 1;
		}
		double t1 = now();
		ref_loss = mem_step(&r, &w, step);
		double t2 = now();
		nvs_swapper_stats(o.pcore, &a);
		nvs_swapper_stats(o.ocore, &b);
		uint64_t rd = a.bytes_read + b.bytes_read;
		uint64_t wr = a.bytes_written + b.bytes_written;
		uint64_t wt = a.acquire_wait_ns + b.acquire_wait_ns;
		if (isatty(2))
			fprintf(stderr, "\r");
		printf("step %u: loss %.6f (in memory %.6f)  %.2f s offloaded, "
		       "%.2f s in memory  read %.1f MiB  written %.1f MiB  "
		       "I/O exposed %.0f ms\n",
		       step, (double)loss, (double)ref_loss, t1 - t0, t2 - t1,
		       (double)(rd - rd0) / 1048576,
		       (double)(wr - wr0) / 1048576,
		       (double)(wt - wait0) / 1e6);
		rd0 = rd;
		wr0 = wr;
		wait0 = wt;
	}
	if (PERSISTENT && first <= last && save(&o, last) < 0) {
		teardown(&o);
		return 1;
	}

	/* Pinned memory against the pools (the aio handles' bounce memory
	 * is pinned too, and counted). */
	struct nvs_pinned_stats ps;
	struct rusage ru;
	nvs_pinned_stats(&ps);
	getrusage(RUSAGE_SELF, &ru);
	double pools = (double)a.buffer_count * a.buffer_size +
		       (double)b.buffer_count * b.buffer_size;
	printf("memory: pinned high water %.1f MiB, locked %.1f MiB, for "
	       "pools of %.1f MiB (%.2fx); peak RSS %.1f MiB (the in-memory "
	       "run included)\n",
	       (double)ps.high_water / 1048576,
	       (double)ps.bytes_locked / 1048576, pools / 1048576,
	       (double)ps.high_water / pools, (double)ru.ru_maxrss / 1024);

	/* The verdict: every weight, bit for bit. */
	size_t differ = 0;
	for (unsigned l = 0; l < L; l++) {
		void *pp[2];
		if (nvs_param_acquire_layer(o.params, l, pp) < 0) {
			fprintf(stderr, "offload_train: %s\n",
				nvs_last_error());
			teardown(&o);
			return 1;
		}
		if (memcmp(pp[0], r.p[l], WN * sizeof(float)) ||
		    memcmp(pp[1], r.p[l] + WN, H * sizeof(float)))
			differ++;
		nvs_param_release_layer(o.params, l, false);
		nvs_param_evict_layer(o.params, l);
	}
	if (teardown(&o) < 0)
		return 1;
	if (differ) {
		printf("verdict: FAIL, %zu of %u layers differ from the "
		       "in-memory run\n",
		       differ, L);
		return 1;
	}
	printf("verdict: the offloaded weights equal the in-memory run's bit "
	       "for bit (%u layers, %.1f MiB%s)\n",
	       L, model / 1048576, RESUME ? ", resumed" : "");
	if (STOP_AFTER)
		printf("stopped after step %u of %u: run again with --resume "
		       "to finish\n",
		       last, STEPS);
	return 0;
}
