// SPDX-License-Identifier: MIT
/*
 * The parameter swapper: layers (gset.h) read ahead along the traced walk
 * (walk.c), or by number without a walk.
 */
#include "nvswap/offload.h"
#include "internal/errors.h"
#include "swapper/gset.h"
#include "swapper/walk.h"

#include <errno.h>

struct nvs_param_swapper {
	struct gset gs;
	unsigned lookahead;
	uint64_t cpu_left;
	unsigned last;	      /* layer acquired last */
	bool walked;	      /* last is set */
	struct nvs_walk walk; /* nvs_param_set_walk(); empty: by number */
};

void nvs_param_swapper_opts_init(struct nvs_param_swapper_opts *o)
{
	if (o)
		*o = (struct nvs_param_swapper_opts){.size = sizeof(*o),
						     .lookahead = 1};
}

int nvs_param_swapper_create(struct nvs_swapper *core,
			     const struct nvs_param_swapper_opts *o,
			     struct nvs_param_swapper **out)
{
	struct nvs_param_swapper *p;

	NVS__ROLE_CREATE(p, o, out, "layer", "nvs_param_swapper_create");
	nvs__walk_init(&p->walk);
	p->cpu_left = o->max_in_cpu;
	p->lookahead = o->lookahead;
	return 0;
}

int nvs_param_swapper_destroy(struct nvs_param_swapper *p)
{
	if (!p)
		return 0;
	nvs__walk_fini(&p->walk);
	return nvs__role_free(&p->gs);
}

int nvs_param_add_layer(struct nvs_param_swapper *p, unsigned layer, unsigned n,
			const size_t *nbytes, const void *const *init)
{
	if (!p)
		return nvs__err(-EINVAL, "nvs_param_add_layer: NULL swapper");
	return nvs__gset_add(&p->gs, "nvs_param_add_layer", layer, n, nbytes,
			     init, &p->cpu_left);
}

int nvs_param_prefetch_layer(struct nvs_param_swapper *p, unsigned layer)
{
	struct group *g;
	int ret;

	if (!p)
		return nvs__err(-EINVAL,
				"nvs_param_prefetch_layer: NULL swapper");
	ret = nvs__gset_find(&p->gs, layer, "nvs_param_prefetch_layer", &g);
	return ret < 0 ? ret : nvs__gset_readahead(&p->gs, layer);
}

int nvs_param_set_walk(struct nvs_param_swapper *p, unsigned n,
		       const unsigned *layers)
{
	if (!p || (n && !layers) || n > NVS_OFFLOAD_MAX_WALK)
		return nvs__err(-EINVAL,
				"nvs_param_set_walk: NULL argument or a walk "
				"of %u layers (at most %u)",
				n, NVS_OFFLOAD_MAX_WALK);
	for (unsigned i = 0; i < n; i++)
		if (!nvs__gset_get(&p->gs, layers[i]))
			return nvs__err(-ENOENT,
					"nvs_param_set_walk: entry %u of the "
					"walk is layer %u, which was not added",
					i, layers[i]);
	if (nvs__walk_set(&p->walk, n, layers) < 0)
		return nvs__err(-ENOMEM,
				"nvs_param_set_walk: out of memory for a walk "
				"of %u layers",
				n);
	return 0;
}

/* Read ahead after acquiring @layer: along the walk when one is set (which
 * moves its position), else by number in the direction @dir. 0 or the
 * first submit error. */
static int param_readahead(struct nvs_param_swapper *p, unsigned layer, int dir)
{
	struct nvs_walk_ahead it;
	unsigned next;
	int ret = 0;

	if (p->walk.n) {
		if (!nvs__walk_step(&p->walk, layer))
			return 0; /* not in the walk: nothing known ahead */
		nvs__walk_ahead_begin(&p->walk, &it);
		for (unsigned k = 0; ret == 0 && k < p->lookahead &&
				     nvs__walk_ahead_next(&p->walk, &it, &next);
		     k++)
			ret = nvs__gset_readahead(&p->gs, next);
		return ret;
	}
	for (unsigned k = 1; ret == 0 && k <= p->lookahead; k++) {
		long n = (long)layer + dir * (long)k;
		if (n < 0 || n >= NVS_OFFLOAD_MAX_GROUPS)
			break;
		ret = nvs__gset_readahead(&p->gs, (unsigned)n);
	}
	return ret;
}

int nvs_param_acquire_layer(struct nvs_param_swapper *p, unsigned layer,
			    void **ptrs)
{
	int ret, dir;
	struct group *g;

	if (!p || !ptrs)
		return nvs__err(-EINVAL,
				"nvs_param_acquire_layer: NULL argument");
	ret = nvs__gset_find(&p->gs, layer, "nvs_param_acquire_layer", &g);
	if (ret < 0)
		return ret;
	/* The walk's direction: backward after a higher layer. */
	dir = p->walked && layer < p->last ? -1 : 1;
	/* This layer first: when it still has to be read, it gets the disk
	 * to itself (read-ahead issued alongside would share the bandwidth
	 * and delay it); then the read-ahead, which overlaps the compute. */
	ret = nvs__gset_acquire(&p->gs, "nvs_param_acquire_layer", layer, ptrs);
	if (ret < 0)
		return ret;
	p->last = layer;
	p->walked = true;
	ret = param_readahead(p, layer, dir);
	if (ret < 0)
		nvs__gset_release(&p->gs, "nvs_param_acquire_layer", layer,
				  false);
	return ret;
}

int nvs_param_release_layer(struct nvs_param_swapper *p, unsigned layer,
			    bool dirty)
{
	if (!p)
		return nvs__err(-EINVAL,
				"nvs_param_release_layer: NULL swapper");
	return nvs__gset_release(&p->gs, "nvs_param_release_layer", layer,
				 dirty);
}

int nvs_param_evict_layer(struct nvs_param_swapper *p, unsigned layer)
{
	if (!p)
		return nvs__err(-EINVAL, "nvs_param_evict_layer: NULL swapper");
	return nvs__gset_evict(&p->gs, "nvs_param_evict_layer", layer, false);
}

bool nvs_param_layer_in_cpu(const struct nvs_param_swapper *p, unsigned layer)
{
	const struct group *g = p ? nvs__gset_get(&p->gs, layer) : NULL;

	return g && g->in_cpu;
}
