// SPDX-License-Identifier: MIT
/*
 * The model of examples/train_model.h: its arithmetic, and one training
 * step in memory and offloaded, split into gradients and update.
 */
#include "train_model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

unsigned L = 16, H = 768;
size_t WN, PN;
const char *model_prog = "train";

void model_init(void)
{
	WN = (size_t)H * H;
	PN = WN + H;
}

unsigned arg_uint(const char *s, unsigned lo, unsigned hi)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);

	return *end || v < lo || v > hi ? 0 : (unsigned)v;
}

double now(void)
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

/* out = relu?(W x + b) for the batch; W is H x H, row-major. */
void forward(const float *W, const float *b, const float *x, float *out,
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
void backward(const float *W, const float *x, const float *dz, float *g,
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

void adam(float *p, float *m, float *v, const float *g, unsigned t)
{
	const float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f, eps = 1e-8f;
	const float c1 = 1 - powf(b1, (float)t), c2 = 1 - powf(b2, (float)t);

	for (size_t i = 0; i < PN; i++) {
		m[i] = b1 * m[i] + (1 - b1) * g[i];
		v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
		p[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
	}
}

void init_layer(float *p, unsigned l)
{
	float scale = 2.0f / sqrtf((float)H);

	for (size_t i = 0; i < PN; i++)
		p[i] = i < WN ? noise(((uint64_t)l << 40) + i) * scale : 0;
}

void batch(unsigned step, unsigned mb, float *x, float *y)
{
	uint64_t k = ((uint64_t)(step * MAX_MICRO_BATCHES + mb) << 32);

	for (size_t i = 0; i < BATCH * H; i++)
		x[i] = noise(k + i);
	/* The target: a fixed scaled permutation of the input, learnable. */
	for (size_t n = 0; n < BATCH; n++)
		for (size_t o = 0; o < H; o++)
			y[n * H + o] = 0.5f * x[n * H + (o * 7 + 3) % H];
}

/* dy = d(mean squared error)/d(output); returns the loss. */
float loss_grad(const float *out, const float *y, float *dy)
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

void relu_grad(const float *act, float *d)
{
	for (size_t i = 0; i < BATCH * H; i++)
		if (act[i] <= 0)
			d[i] = 0;
}

int work_alloc(struct work *w)
{
	w->act = malloc((L + 1) * BATCH * H * sizeof(float));
	w->x = w->act;
	w->y = malloc(BATCH * H * sizeof(float));
	w->d = malloc(BATCH * H * sizeof(float));
	w->dx = malloc(BATCH * H * sizeof(float));
	w->g = malloc(PN * sizeof(float));
	return w->act && w->y && w->d && w->dx && w->g ? 0 : -ENOMEM;
}

void work_free(struct work *w)
{
	free(w->act);
	free(w->y);
	free(w->d);
	free(w->dx);
	free(w->g);
}

/* ------------------------------------------------------------ in memory */

int mem_alloc(struct mem *r)
{
	r->p = calloc(L, sizeof(float *));
	r->m = calloc(L, sizeof(float *));
	r->v = calloc(L, sizeof(float *));
	r->g = calloc(L, sizeof(float *));
	if (!r->p || !r->m || !r->v || !r->g)
		return -ENOMEM;
	for (unsigned l = 0; l < L; l++) {
		r->p[l] = malloc(PN * sizeof(float));
		r->m[l] = calloc(PN, sizeof(float));
		r->v[l] = calloc(PN, sizeof(float));
		r->g[l] = malloc(PN * sizeof(float));
		if (!r->p[l] || !r->m[l] || !r->v[l] || !r->g[l])
			return -ENOMEM;
		init_layer(r->p[l], l);
	}
	return 0;
}

void mem_free(struct mem *r)
{
	for (unsigned l = 0; r->p && r->m && r->v && r->g && l < L; l++) {
		free(r->p[l]);
		free(r->m[l]);
		free(r->v[l]);
		free(r->g[l]);
	}
	free(r->p);
	free(r->m);
	free(r->v);
	free(r->g);
}

float mem_grads(struct mem *r, struct work *w, unsigned step, unsigned mb0,
		unsigned n)
{
	float loss = 0;

	for (unsigned l = 0; l < L; l++)
		memset(r->g[l], 0, PN * sizeof(float));
	for (unsigned mb = mb0; mb < mb0 + n; mb++) {
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
	return loss / (float)n;
}

void mem_update(struct mem *r, unsigned step)
{
	for (unsigned l = 0; l < L; l++)
		adam(r->p[l], r->m[l], r->v[l], r->g[l], step);
}

/* ------------------------------------------------------------ offloaded */

int off_setup(struct nvs_config *cfg, struct off *o, float *init)
{
	struct nvs_param_swapper_opts po;
	struct nvs_optim_swapper_opts oo;
	struct nvs_grad_swapper_opts go;
	struct nvs_offload_config oc;
	struct nvs_nvswap_config nv;

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
	return 0;
}

int off_grads(struct off *o, struct work *w, unsigned step, unsigned mb0,
	      unsigned n, float *loss)
{
	void *pp[2];

	*loss = 0;
	for (unsigned mb = mb0; mb < mb0 + n; mb++) {
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
				       k = PN - off < PART_ROWS * (size_t)H
						   ? PN - off
						   : PART_ROWS * (size_t)H;
				TRY(nvs_grad_write(
					o->grads, l, off * sizeof(float),
					w->g + off, k * sizeof(float),
					NVS_GRAD_ACCUMULATE_F32));
			}
			TRY(nvs_grad_flush(o->grads, l));
			memcpy(w->d, w->dx, BATCH * H * sizeof(float));
		}
	}
	*loss /= (float)n;
	return 0;
}

int off_update(struct off *o, struct work *w, unsigned step, grad_hook hook,
	       void *ctx)
{
	void *pp[2], *st[2];
	const void *gv;

	for (unsigned l = 0; l < L; l++) { /* the step, group by group */
		/* The gradient first, copied out (PN floats, small beside the
		 * state): gradients share the optimizer's pool, and this way
		 * the step holds one of its buffers at a time, so any
		 * buffer_count from 1 works. */
		TRY(nvs_grad_acquire(o->grads, l, &gv));
		memcpy(w->g, gv, PN * sizeof(float));
		TRY(nvs_grad_release(o->grads, l));
		TRY(nvs_grad_zero(o->grads, l));
		if (hook)
			TRY(hook(l, w->g, ctx));
		TRY(nvs_optim_swap_in(o->optim, l, st));
		TRY(nvs_param_acquire_layer(o->params, l, pp));
		adam(pp[0], st[0], st[1], w->g, step);
		TRY(nvs_param_release_layer(o->params, l, true));
		TRY(nvs_param_evict_layer(o->params, l)); /* write-back */
		TRY(nvs_optim_swap_out(o->optim, l));
	}
	return 0;
}
