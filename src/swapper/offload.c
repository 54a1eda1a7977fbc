// SPDX-License-Identifier: MIT
/*
 * The optimizer and gradient swappers: each a table of groups of tensors
 * in a borrowed nvs_swapper (gset.h) plus a small policy: pipelined state
 * swaps, and a gradient region kept resident while partitions are written
 * into it. The parameter swapper is params.c.
 */
#include "nvswap/offload.h"
#include "internal/errors.h"
#include "swapper/gset.h"
#include "swapper/swapper.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------- optimizer state */

struct nvs_optim_swapper {
	struct gset gs;
	bool pipeline_read, pipeline_write;
};

void nvs_optim_swapper_opts_init(struct nvs_optim_swapper_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
}

int nvs_optim_swapper_create(struct nvs_swapper *core,
			     const struct nvs_optim_swapper_opts *o,
			     struct nvs_optim_swapper **out)
{
	struct nvs_optim_swapper *x;

	NVS__ROLE_CREATE(x, o, out, "group", "nvs_optim_swapper_create");
	x->pipeline_read = o->pipeline_read;
	x->pipeline_write = o->pipeline_write;
	return 0;
}

int nvs_optim_swapper_destroy(struct nvs_optim_swapper *x)
{
	return x ? nvs__role_free(&x->gs) : 0;
}

int nvs_optim_add_group(struct nvs_optim_swapper *x, unsigned group, unsigned n,
			const size_t *nbytes, const void *const *init)
{
	if (!x)
		return nvs__err(-EINVAL, "nvs_optim_add_group: NULL swapper");
	return nvs__gset_add(&x->gs, "nvs_optim_add_group", group, n, nbytes,
			     init, NULL);
}

int nvs_optim_swap_in(struct nvs_optim_swapper *x, unsigned group, void **state)
{
	struct group *g;
	int ret;

	if (!x || !state)
		return nvs__err(-EINVAL, "nvs_optim_swap_in: NULL argument");
	ret = nvs__gset_acquire(&x->gs, "nvs_optim_swap_in", group, state);
	if (ret < 0 || !x->pipeline_read)
		return ret;
	g = nvs__gset_get(&x->gs, group);
	if (g->order + 1 < x->gs.count)
		ret = nvs__gset_readahead(&x->gs, x->gs.order[g->order + 1]);
	if (ret < 0) {
		nvs__gset_release(&x->gs, "nvs_optim_swap_in", group, false);
		return ret;
	}
	return 0;
}

int nvs_optim_swap_out(struct nvs_optim_swapper *x, unsigned group)
{
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_optim_swap_out: NULL swapper");
	ret = nvs__gset_release(&x->gs, "nvs_optim_swap_out", group, true);
	if (ret < 0)
		return ret;
	return nvs__gset_evict(&x->gs, "nvs_optim_swap_out", group,
			       !x->pipeline_write);
}

/* ------------------------------------------------------------- gradients */

struct nvs_grad_swapper {
	struct gset gs;
};

void nvs_grad_swapper_opts_init(struct nvs_grad_swapper_opts *o)
{
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
}

int nvs_grad_swapper_create(struct nvs_swapper *core,
			    const struct nvs_grad_swapper_opts *o,
			    struct nvs_grad_swapper **out)
{
	struct nvs_grad_swapper *x;

	NVS__ROLE_CREATE(x, o, out, "gradient group",
			 "nvs_grad_swapper_create");
	return 0;
}

int nvs_grad_swapper_destroy(struct nvs_grad_swapper *x)
{
	return x ? nvs__role_free(&x->gs) : 0;
}

int nvs_grad_add_group(struct nvs_grad_swapper *x, unsigned group,
		       size_t nbytes)
{
	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_add_group: NULL swapper");
	return nvs__gset_add(&x->gs, "nvs_grad_add_group", group, 1, &nbytes,
			     NULL, NULL);
}

int nvs_grad_write(struct nvs_grad_swapper *x, unsigned group, size_t offset,
		   const void *data, size_t nbytes, enum nvs_grad_mode mode)
{
	struct group *g;
	unsigned char *p;
	int ret;

	if (!x || (!data && nbytes))
		return nvs__err(-EINVAL, "nvs_grad_write: NULL argument");
	ret = nvs__gset_find(&x->gs, group, "nvs_grad_write", &g);
	if (ret < 0)
		return ret;
	if (offset > g->nbytes[0] || nbytes > g->nbytes[0] - offset)
		return nvs__err(-EINVAL,
				"nvs_grad_write: %zu bytes at offset %zu are "
				"outside gradient group %u (%zu bytes)",
				nbytes, offset, group, g->nbytes[0]);
	if (mode != NVS_GRAD_ASSIGN && mode != NVS_GRAD_ACCUMULATE_F32)
		return nvs__err(-EINVAL, "nvs_grad_write: unknown mode %d",
				(int)mode);
	if (mode == NVS_GRAD_ACCUMULATE_F32 && (offset % 4 || nbytes % 4))
		return nvs__err(-EINVAL,
				"nvs_grad_write: float32 accumulation at "
				"offset %zu of %zu bytes: both must be "
				"multiples of 4",
				offset, nbytes);
	if (g->acquired)
		return nvs__err(-EBUSY,
				"nvs_grad_write: gradient group %u is acquired "
				"for reading",
				group);
	/* Open: acquired by the first write, kept until the flush. */
	if (!g->open) {
		ret = nvs_swapper_acquire(x->gs.core,
					  nvs__gset_id(&x->gs, group),
					  (void **)&g->open);
		if (ret < 0)
			return ret;
	}
	p = g->open;
	if (mode == NVS_GRAD_ASSIGN) {
		memcpy(p + offset, data, nbytes);
	} else {
		float *dst = (float *)(void *)(p + offset);
		const unsigned char *src = data;
		for (size_t i = 0; i < nbytes / 4; i++) {
			float v;
			memcpy(&v, src + 4 * i, 4);
			dst[i] += v;
		}
	}
	return 0;
}

int nvs_grad_flush(struct nvs_grad_swapper *x, unsigned group)
{
	struct group *g;
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_flush: NULL swapper");
	ret = nvs__gset_find(&x->gs, group, "nvs_grad_flush", &g);
	if (ret < 0 || !g->open)
		return ret;
	g->open = NULL;
	ret = nvs_swapper_release(x->gs.core, nvs__gset_id(&x->gs, group),
				  true);
	return ret < 0 ? ret
		       : nvs_swapper_evict(x->gs.core,
					   nvs__gset_id(&x->gs, group));
}

int nvs_grad_acquire(struct nvs_grad_swapper *x, unsigned group,
		     const void **ptr)
{
	void *p = NULL;
	int ret;

	if (!x || !ptr)
		return nvs__err(-EINVAL, "nvs_grad_acquire: NULL argument");
	*ptr = NULL;
	ret = nvs_grad_flush(x, group);
	if (ret == 0)
		ret = nvs__gset_acquire(&x->gs, "nvs_grad_acquire", group, &p);
	*ptr = p;
	return ret;
}

int nvs_grad_release(struct nvs_grad_swapper *x, unsigned group)
{
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_release: NULL swapper");
	ret = nvs__gset_release(&x->gs, "nvs_grad_release", group, false);
	return ret < 0 ? ret
		       : nvs__gset_evict(&x->gs, "nvs_grad_release", group,
					 false);
}

int nvs_grad_zero(struct nvs_grad_swapper *x, unsigned group)
{
	struct group *g;
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_zero: NULL swapper");
	ret = nvs__gset_find(&x->gs, group, "nvs_grad_zero", &g);
	if (ret < 0)
		return ret;
	if (g->acquired || g->open)
		return nvs__err(-EBUSY,
				"nvs_grad_zero: gradient group %u is open or "
				"acquired",
				group);
	/* Scratch space: the region's blocks are kept (punching them and
	 * placing them again costs each step more than the step's I/O). */
	if (!nvs__swapper_persistent(x->gs.core))
		return nvs__swapper_clear(x->gs.core,
					  nvs__gset_id(&x->gs, group),
					  "nvs_grad_zero");
	/* A persistent set: a fresh registration reads as zeros without
	 * I/O, and the next checkpoint saves it so. */
	ret = nvs_swapper_unregister(x->gs.core, nvs__gset_id(&x->gs, group));
	if (ret == 0)
		ret = nvs__gset_register(&x->gs, group, g, NULL);
	return ret;
}
