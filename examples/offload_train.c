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

#define BATCH 32
#define PART_ROWS 61 /* gradient partitions: rows, an odd byte count */

static unsigned L = 16, H = 768, STEPS = 8, MB = 2, STOP_AFTER;
static bool RESUME, PERSISTENT;
static size_t WN, PN; /* floats: weights, weights + bias */

#define TRY(call)                                                              \
	do {                                                                   \
		int ret_ = (call);                                             \
		if (ret_ < 0) {                                                \
			fprintf(stderr, "\noffload_train: %s failed: %s\n",    \
				#call, nvs_last_error());                      \
			return ret_;                                           \
		}                                                              \
	} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Deterministic data: a float in [-0.5, 0.5) from a counter. */
static float noise(uint64_t k)
{
	k = (k ^ (k >> 33)) * 0xff51afd7ed558ccdull;
	k = (k ^ (k >> 33)) * 0xc4ceb9fe1a85ec53ull;
	return (float)((k ^ (k >> 33)) >> 40) / 16777216.0f - 0.5f;
}

/* ---- the model's arithmetic, shared by both runs (same order: same bits) */

/* out = relu?(W x + b) for the batch; W is H x H, row-major. */
static void forward(const float *W, const float *b, const float *x, float *out,
		    int relu)
{
	for (unsigned n = 0; n < BATCH; n++)
		for (unsigned o = 0; o < H; o++) {
			float z = b[o];
			const float *w = W + (size_t)o * H, *xn = x + n * H;
			for (unsigned i = 0; i < H; i++)
				z += w[i] * xn[i];
			out[n * H + o] = relu && z < 0 ? 0 : z;
		}
}

/* From dz (the gradient at this layer's output, ReLU applied by the
 * caller): the parameter gradient g (dW then db) and dx = W^T dz. */
static void backward(const float *W, const float *x, const float *dz, float *g,
		     float *dx)
{
	memset(g, 0, PN * sizeof(float));
	for (unsigned o = 0; o < H; o++)
		for (unsigned n = 0; n < BATCH; n++) {
			float d = dz[n * H + o];
			float *gw = g + (size_t)o * H;
			const float *xn = x + n * H;
			for (unsigned i = 0; i < H; i++)
				gw[i] += d * xn[i];
			g[WN + o] += d;
		}
	memset(dx, 0, BATCH * H * sizeof(float));
	for (unsigned n = 0; n < BATCH; n++)
		for (unsigned o = 0; o < H; o++) {
			float d = dz[n * H + o];
			const float *w = W + (size_t)o * H;
			for (unsigned i = 0; i < H; i++)
				dx[n * H + i] += w[i] * d;
		}
}

static void adam(float *p, float *m, float *v, const float *g, unsigned t)
{
	const float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f;
	const float c1 = 1 - powf(b1, (float)t), c2 = 1 - powf(b2, (float)t);

	for (size_t i = 0; i < PN; i++) {
		m[i] = b1 * m[i] + (1 - b1) * g[i];
		v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
		p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
	}
}

static void init_layer(float *p, unsigned l)
{
	float scale = 2.0f / sqrtf((float)H);

	for (size_t i = 0; i < PN; i++)
		p[i] = i < WN ? noise(((uint64_t)l << 40) + i) * scale : 0;
}

static void batch(unsigned step, unsigned mb, float *x, float *y)
{
	uint64_t k = ((uint64_t)(step * 64 + mb) << 32);

	for (size_t i = 0; i < BATCH * H; i++)
		x[i] = noise(k + i);
	/* The target: a fixed scaled permutation of the input, learnable. */
	for (size_t n = 0; n < BATCH; n++)
		for (size_t o = 0; o < H; o++)
			y[n * H + o] = 0.5f * x[n * H + (o * 7 + 3) % H];
}

/* dy = d(mean squared error)/d(output); returns the loss. */
static float loss_grad(const float *out, const float *y, float *dy)
{
	double loss = 0;
	float scale = 2.0f / (float)(BATCH * H);

	for (size_t i = 0; i < BATCH * H; i++) {
		float d = out[i] - y[i];
		loss += (double)d * d;
		dy[i] = scale * d;
	}
	return (float)(loss / (BATCH * H));
}

static void relu_grad(const float *act, float *d)
{
	for (size_t i = 0; i < BATCH * H; i++)
		if (act[i] <= 0)
			d[i] = 0;
}

/* ------------------------------------------------------- the two runs */

struct work {
	float *act; /* (L + 1) x BATCH x H */
	float *x, *y, *d, *dx, *g;
};

struct mem {
	float **p, **m, **v, **g;
};

static float mem_step(struct mem *r, struct work *w, unsigned step)
{
	float loss = 0;

	for (unsigned l = 0; l < L; l++)
		memset(r->g[l], 0, PN * sizeof(float));
	for (unsigned mb = 0; mb < MB; mb++) {
		batch(step, mb, w->act, w->y);
		for (unsigned l = 0; l < L; l++)
			forward(r->p[l], r->p[l] + WN, w->act + l * BATCH * H,
				w->act + (l + 1) * BATCH * H, l + 1 < L);
		loss += loss_grad(w->act + L * BATCH * H, w->y, w->d);
		for (unsigned l = L; l-- > 0;) {
			if (l + 1 < L)
				relu_grad(w->act + (l + 1) * BATCH * H, w->d);
			backward(r->p[l], w->act + l * BATCH * H, w->d, w->g,
				 w->dx);
			for (size_t i = 0; i < PN; i++)
				r->g[l][i] += w->g[i];
			memcpy(w->d, w->dx, BATCH * H * sizeof(float));
		}
	}
	for (unsigned l = 0; l < L; l++)
		adam(r->p[l], r->m[l], r->v[l], r->g[l], step);
	return loss / (float)MB;
}

struct off {
	struct nvs_swapper *pcore, *ocore;
	struct nvs_param_swapper *params;
	struct nvs_optim_swapper *optim;
	struct nvs_grad_swapper *grads;
};

static int off_step(struct off *o, struct work *w, unsigned step, float *loss)
{
	void *pp[2], *st[2];
	const void *gv;

	*loss = 0;
	for (unsigned mb = 0; mb < MB; mb++) {
		batch(step, mb, w->act, w->y);
		for (unsigned l = 0; l < L; l++) { /* forward: read-ahead up */
			TRY(nvs_param_acquire_layer(o->params, l, pp));
			forward(pp[0], pp[1], w->act + l * BATCH * H,
				w->act + (l + 1) * BATCH * H, l + 1 < L);
			TRY(nvs_param_release_layer(o->params, l, false));
			TRY(nvs_param_evict_layer(o->params, l)); /* no I/O */
		}
		*loss += loss_grad(w->act + L * BATCH * H, w->y, w->d);
		for (unsigned l = L; l-- > 0;) { /* backward: read-ahead down */
			if (l + 1 < L)
				relu_grad(w->act + (l + 1) * BATCH * H, w->d);
			TRY(nvs_param_acquire_layer(o->params, l, pp));
			backward(pp[0], w->act + l * BATCH * H, w->d, w->g,
				 w->dx);
			TRY(nvs_param_release_layer(o->params, l, false));
			TRY(nvs_param_evict_layer(o->params, l));
			/* Write the gradient behind in partitions of rows,
			 * accumulating over micro-batches. */
			for (size_t r = 0; r * H < PN; r += PART_ROWS) {
				size_t off = r * H,
				       n = PN - off < PART_ROWS * (size_t)H
						   ? PN - off
						   : PART_ROWS * (size_t)H;
				TRY(nvs_grad_write(
					o->grads, l, off * sizeof(float),
					w->g + off, n * sizeof(float),
					NVS_GRAD_ACCUMULATE_F32));
			}
			TRY(nvs_grad_flush(o->grads, l));
			memcpy(w->d, w->dx, BATCH * H * sizeof(float));
		}
	}
	*loss /= (float)MB;
	for (unsigned l = 0; l < L; l++) { /* the step, group by group */
		/* The gradient first, copied out (PN floats, small beside the
		 * state): gradients share the optimizer's pool, and this way
		 * the step holds one of its buffers at a time, so any
		 * buffer_count from 1 works. */
		TRY(nvs_grad_acquire(o->grads, l, &gv));
		memcpy(w->g, gv, PN * sizeof(float));
		TRY(nvs_grad_release(o->grads, l));
		TRY(nvs_grad_zero(o->grads, l));
		TRY(nvs_optim_swap_in(o->optim, l, st));
		TRY(nvs_param_acquire_layer(o->params, l, pp));
		adam(pp[0], st[0], st[1], w->g, step);
		TRY(nvs_param_release_layer(o->params, l, true));
		TRY(nvs_param_evict_layer(o->params, l)); /* write-back */
		TRY(nvs_optim_swap_out(o->optim, l));
	}
	return 0;
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
	struct nvs_param_swapper_opts po;
	struct nvs_optim_swapper_opts oo;
	struct nvs_grad_swapper_opts go;
	struct nvs_offload_config oc;
	struct nvs_nvswap_config nv;
	struct nvs_config *cfg;

	TRY(nvs_config_load(config, &cfg));
	for (unsigned i = 0; nvs_config_warning(cfg, i); i++)
		fprintf(stderr, "note: %s\n", nvs_config_warning(cfg, i));
	if (open_core(cfg, NVS_OFFLOAD_PARAM, persist, &o->pcore) < 0 ||
	    open_core(cfg, NVS_OFFLOAD_OPTIMIZER, persist, &o->ocore) < 0) {
		nvs_config_free(cfg);
		return -1;
	}
	nvs_config_offload(cfg, NVS_OFFLOAD_PARAM, &oc);
	nvs_config_nvswap(cfg, &nv);
	nvs_param_swapper_opts_init(&po);
	po.max_in_cpu = oc.max_in_cpu * sizeof(float);
	po.lookahead = nv.lookahead; /* "nvswap": {"lookahead": n}, 1 */
	TRY(nvs_param_swapper_create(o->pcore, &po, &o->params));

	nvs_config_offload(cfg, NVS_OFFLOAD_OPTIMIZER, &oc);
	nvs_optim_swapper_opts_init(&oo);
	oo.pipeline_read = oc.pipeline_read;
	oo.pipeline_write = oc.pipeline_write;
	TRY(nvs_optim_swapper_create(o->ocore, &oo, &o->optim));
	nvs_grad_swapper_opts_init(&go);
	go.id_base = 1ull << 40; /* shares the optimizer's swapper */
	TRY(nvs_grad_swapper_create(o->ocore, &go, &o->grads));

	size_t psz[2] = {WN * sizeof(float), H * sizeof(float)};
	size_t osz[2] = {PN * sizeof(float), PN * sizeof(float)};
	for (unsigned l = 0; l < L; l++) {
		init_layer(init, l);
		const void *pi[2] = {init, init + WN};
		TRY(nvs_param_add_layer(o->params, l, 2, psz, pi));
		TRY(nvs_optim_add_group(o->optim, l, 2, osz, NULL));
		TRY(nvs_grad_add_group(o->grads, l, PN * sizeof(float)));
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

static unsigned arg(const char *s, unsigned lo, unsigned hi)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	return *end || v < lo || v > hi ? 0 : (unsigned)v;
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
	struct mem r;
	struct work w;
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
		if (c == '?' || !(*dst = arg(optarg, 1, 1u << 16))) {
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
	WN = (size_t)H * H;
	PN = WN + H;
	r.p = calloc(L, sizeof(float *));
	r.m = calloc(L, sizeof(float *));
	r.v = calloc(L, sizeof(float *));
	r.g = calloc(L, sizeof(float *));
	for (unsigned l = 0; l < L; l++) {
		r.p[l] = malloc(PN * sizeof(float));
		r.m[l] = calloc(PN, sizeof(float));
		r.v[l] = calloc(PN, sizeof(float));
		r.g[l] = malloc(PN * sizeof(float));
		if (!r.p[l] || !r.m[l] || !r.v[l] || !r.g[l])
			return 1;
		init_layer(r.p[l], l);
	}
	w.act = malloc((L + 1) * BATCH * H * sizeof(float));
	w.x = w.act;
	w.y = malloc(BATCH * H * sizeof(float));
	w.d = malloc(BATCH * H * sizeof(float));
	w.dx = malloc(BATCH * H * sizeof(float));
	w.g = malloc(PN * sizeof(float));
	if (!w.act || !w.y || !w.d || !w.dx || !w.g)
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
		if (off_step(&o, &w, step, &loss) < 0) {
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
