/* SPDX-License-Identifier: MIT */
/*
 * The model both trainers use (offload_train, mpi_offload_train): an MLP
 * of L ReLU layers H wide, mean squared error, Adam, its arithmetic in a
 * fixed order so that the same inputs give the same bits; and its two
 * runs, in memory and with parameters, gradients and optimizer state on
 * NVMe through the role swappers (nvswap/offload.h). A step is split in
 * two, the gradients of some micro-batches and the update, so that a
 * data-parallel trainer can combine gradients between them.
 */
#ifndef TRAIN_MODEL_H
#define TRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nvswap/nvswap.h>

#define BATCH 32
#define PART_ROWS 61 /* gradient partitions: rows, an odd byte count */
/* Micro-batch numbers a step's data can come from (batch()): a step's
 * micro-batches over all ranks must stay below this. */
#define MAX_MICRO_BATCHES 64

/* The model's shape: set L and H, then model_init(). WN, PN: floats per
 * layer, weights and weights + bias. */
extern unsigned L, H;
extern size_t WN, PN;
/* The program name TRY's messages start with. */
extern const char *model_prog;

#define TRY(call)                                                              \
	do {                                                                   \
		int ret_ = (call);                                             \
		if (ret_ < 0) {                                                \
			fprintf(stderr, "\n%s: %s failed: %s\n", model_prog,   \
				#call, nvs_last_error());                      \
			return ret_;                                           \
		}                                                              \
	} while (0)

void model_init(void);
double now(void);
/* A command-line count in [lo, hi], or 0 when @s is not one. */
unsigned arg_uint(const char *s, unsigned lo, unsigned hi);

/* ---- the arithmetic (same order: same bits) */
void forward(const float *W, const float *b, const float *x, float *out,
	     int relu);
void backward(const float *W, const float *x, const float *dz, float *g,
	      float *dx);
void adam(float *p, float *m, float *v, const float *g, unsigned t);
void init_layer(float *p, unsigned l);
/* Micro-batch @mb of step @step: inputs, targets (from @mb
 * MAX_MICRO_BATCHES on, another step's data again). */
void batch(unsigned step, unsigned mb, float *x, float *y);
float loss_grad(const float *out, const float *y, float *dy);
void relu_grad(const float *act, float *d);

/* Scratch of a step; g holds one layer's gradient (PN floats). */
struct work {
	float *act; /* (L + 1) x BATCH x H */
	float *x, *y, *d, *dx, *g;
};

/* Returns 0, or -ENOMEM (what was allocated is kept for work_free). */
int work_alloc(struct work *w);
void work_free(struct work *w);

/* ---- in memory */
struct mem {
	float **p, **m, **v, **g;
};

/* The initial weights, zero moments. Returns 0 or -ENOMEM. */
int mem_alloc(struct mem *r);
void mem_free(struct mem *r);
/* r->g = the gradients of micro-batches mb0 .. mb0 + n - 1 of @step,
 * summed in that order from zero; returns their mean loss. */
float mem_grads(struct mem *r, struct work *w, unsigned step, unsigned mb0,
		unsigned n);
/* Adam on every layer with r->g. */
void mem_update(struct mem *r, unsigned step);

/* ---- offloaded */
struct off {
	struct nvs_swapper *pcore, *ocore;
	struct nvs_param_swapper *params;
	struct nvs_optim_swapper *optim;
	struct nvs_grad_swapper *grads;
};

/* The role swappers over @pcore and @ocore (set in @o by the caller; the
 * parameters' and the optimizer's swapper), as the config says, every
 * layer added from init_layer() (@init: PN floats of scratch). */
int off_setup(struct nvs_config *cfg, struct off *o, float *init);
/* As mem_grads(), the gradients written behind into o->grads. */
int off_grads(struct off *o, struct work *w, unsigned step, unsigned mb0,
	      unsigned n, float *loss);

/* Called by off_update() with each layer's gradient in @g (PN floats),
 * which it may change (combine it with other ranks'); 0 or -errno. */
typedef int (*grad_hook)(unsigned layer, float *g, void *ctx);

/* Adam on every layer, layer by layer, with the gradients in o->grads
 * (each passed through @hook first, when not NULL); zeroes them. */
int off_update(struct off *o, struct work *w, unsigned step, grad_hook hook,
	       void *ctx);

#endif /* TRAIN_MODEL_H */
