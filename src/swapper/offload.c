// SPDX-License-Identifier: MIT
/*
 * The role swappers: parameters per layer, optimizer state per sub-group,
 * gradients per group. All three are a table of groups of tensors in a
 * borrowed nvs_swapper (struct gset below) plus a small policy: read-ahead
 * along the walk, pipelined state swaps, a region kept resident while
 * gradient partitions are written into it.
 */
#include "nvswap/offload.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "swapper/walk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/buffers.h"

/* ------------------------------------------------------ groups of tensors */

/* A group's tensors are packed into one swapper tensor, each at a 64-byte
 * aligned offset: a group needs one pool buffer, and its I/O is one op
 * per extent instead of one per small tensor. */
#define PACK_ALIGN 64

struct group {
	unsigned n;
	unsigned order;	     /* add order */
	bool acquired;	     /* by the role's acquire or swap_in */
	unsigned char *open; /* gradients: the region, acquired for writes
				until the flush; NULL when closed */
	bool in_cpu;	     /* parameters kept in CPU memory, never swapped */
	size_t total;	     /* packed bytes */
	size_t nbytes[NVS_OFFLOAD_MAX_TENSORS];
	size_t off[NVS_OFFLOAD_MAX_TENSORS];
	void *cpu; /* in_cpu: the pinned packed copy */
};

struct gset {
	struct nvs_swapper *core;
	uint64_t id_base;
	const char *what; /* "layer", "group" */
	struct group **tab;
	size_t cap;
	unsigned *order; /* group numbers in add order */
	unsigned count;
};

static uint64_t tid(const struct gset *gs, unsigned group)
{
	return gs->id_base + ((uint64_t)group << 20);
}

static struct group *gget(const struct gset *gs, unsigned group)
{
	return group < gs->cap ? gs->tab[group] : NULL;
}

static int gfind(const struct gset *gs, unsigned group, const char *call,
		 struct group **out)
{
	*out = gget(gs, group);
	if (!*out)
		return nvs__err(-ENOENT, "%s: no %s %u", call, gs->what, group);
	return 0;
}

static void gset_init(struct gset *gs, struct nvs_swapper *core,
		      uint64_t id_base, const char *what)
{
	memset(gs, 0, sizeof(*gs));
	gs->core = core;
	gs->id_base = id_base;
	gs->what = what;
}

/* Room for @group in the table and one more in the order list. */
static int gset_grow(struct gset *gs, unsigned group)
{
	if (group >= gs->cap) {
		size_t cap = gs->cap ? gs->cap : 16;
		while (cap <= group)
			cap *= 2;
		struct group **t = nvs__calloc(cap, sizeof(*t));
		if (!t)
			return -ENOMEM;
		if (gs->tab)
			memcpy(t, gs->tab, gs->cap * sizeof(*t));
		nvs__free(gs->tab);
		gs->tab = t;
		gs->cap = cap;
	}
	unsigned *o = nvs__malloc((gs->count + 1) * sizeof(*o));
	if (!o)
		return -ENOMEM;
	if (gs->order)
		memcpy(o, gs->order, gs->count * sizeof(*o));
	nvs__free(gs->order);
	gs->order = o;
	return 0;
}

/* Add @group; @cpu_budget (NULL: none) is what may still stay in CPU
 * memory, reduced when this group does. */
static int gset_add(struct gset *gs, const char *call, unsigned group,
		    unsigned n, const size_t *nbytes, const void *const *init,
		    uint64_t *cpu_budget)
{
	struct group *g;
	unsigned char *pack = NULL;
	bool any_init = false;
	int ret = 0;

	if (!nbytes || n == 0 || n > NVS_OFFLOAD_MAX_TENSORS ||
	    group >= NVS_OFFLOAD_MAX_GROUPS)
		return nvs__err(-EINVAL,
				"%s: %s %u with %u tensors (1 to %u, %s "
				"below %u)",
				call, gs->what, group, n,
				NVS_OFFLOAD_MAX_TENSORS, gs->what,
				NVS_OFFLOAD_MAX_GROUPS);
	if (gget(gs, group))
		return nvs__err(-EEXIST, "%s: %s %u exists", call, gs->what,
				group);
	if (gset_grow(gs, group) < 0 || !(g = nvs__calloc(1, sizeof(*g))))
		return nvs__err(-ENOMEM, "%s: out of memory", call);
	g->n = n;
	for (unsigned i = 0; i < n; i++) {
		if (!nbytes[i] || nbytes[i] > SIZE_MAX / 2 - g->total) {
			nvs__free(g);
			return nvs__err(-EINVAL,
					"%s: %s %u: tensor %u has %zu bytes",
					call, gs->what, group, i, nbytes[i]);
		}
		g->nbytes[i] = nbytes[i];
		g->off[i] = g->total;
		/* Pad between tensors, not after the last: a one-tensor
		 * group is exactly its size. */
		g->total += i + 1 < n ? (nbytes[i] + PACK_ALIGN - 1) &
						~(size_t)(PACK_ALIGN - 1)
				      : nbytes[i];
		any_init |= init && init[i];
	}
	if (cpu_budget && g->total <= *cpu_budget) {
		g->in_cpu = true;
		g->cpu = pack = nvs_pinned_alloc(g->total, &ret);
	} else if (any_init) {
		pack = nvs__calloc(1, g->total);
		ret = pack ? 0 : -ENOMEM;
	}
	if (ret < 0 || (!pack && (g->in_cpu || any_init))) {
		nvs__free(g);
		return nvs__err(ret ? ret : -ENOMEM, "%s: %s %u: out of memory",
				call, gs->what, group);
	}
	for (unsigned i = 0; pack && i < n; i++)
		if (init && init[i])
			memcpy(pack + g->off[i], init[i], nbytes[i]);
	if (g->in_cpu) {
		*cpu_budget -= g->total;
	} else {
		ret = nvs_swapper_register(gs->core, tid(gs, group), g->total,
					   pack);
		nvs__free(pack);
		if (ret < 0) {
			char msg[NVS_ERRMSG_MAX];
			size_t total = g->total;
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
			nvs__free(g);
			return nvs__err(ret, "%s: %s %u (%zu bytes packed): %s",
					call, gs->what, group, total, msg);
		}
	}
	g->order = gs->count;
	gs->order[gs->count++] = group;
	gs->tab[group] = g;
	return 0;
}

static int gset_fini(struct gset *gs)
{
	int first = 0;

	for (size_t k = 0; k < gs->cap; k++) {
		struct group *g = gs->tab[k];
		if (!g)
			continue;
		if (g->in_cpu) {
			nvs_pinned_free(g->cpu);
		} else {
			uint64_t id = tid(gs, (unsigned)k);
			if (g->acquired || g->open)
				nvs_swapper_release(gs->core, id, false);
			int r = nvs_swapper_unregister(gs->core, id);
			if (r < 0 && !first)
				first = r;
		}
		nvs__free(g);
	}
	nvs__free(gs->tab);
	nvs__free(gs->order);
	return first;
}

/* Read @group ahead into a free buffer only (never waits for one). */
static int gset_readahead(struct gset *gs, unsigned group)
{
	struct group *g = gget(gs, group);
	int r;

	if (!g || g->in_cpu)
		return 0;
	r = nvs_swapper_try_prefetch(gs->core, tid(gs, group));
	return r == -EAGAIN ? 0 : r; /* a full pool: less overlap, fine */
}

static int gset_acquire(struct gset *gs, const char *call, unsigned group,
			void **ptrs)
{
	unsigned char *base;
	struct group *g;
	int ret = gfind(gs, group, call, &g);

	if (ret < 0)
		return ret;
	if (g->acquired)
		return nvs__err(-EBUSY, "%s: %s %u is already acquired", call,
				gs->what, group);
	if (g->in_cpu) {
		base = g->cpu;
	} else {
		ret = nvs_swapper_acquire(gs->core, tid(gs, group),
					  (void **)&base);
		if (ret < 0)
			return ret;
	}
	for (unsigned i = 0; i < g->n; i++)
		ptrs[i] = base + g->off[i];
	g->acquired = true;
	return 0;
}

static int gset_release(struct gset *gs, const char *call, unsigned group,
			bool dirty)
{
	struct group *g;
	int ret = gfind(gs, group, call, &g);

	if (ret < 0)
		return ret;
	if (!g->acquired)
		return nvs__err(-EBUSY, "%s: %s %u is not acquired", call,
				gs->what, group);
	g->acquired = false;
	return g->in_cpu ? 0
			 : nvs_swapper_release(gs->core, tid(gs, group), dirty);
}

static int gset_evict(struct gset *gs, const char *call, unsigned group,
		      bool wait)
{
	struct group *g;
	int ret = gfind(gs, group, call, &g);

	if (ret < 0)
		return ret;
	if (g->acquired)
		return nvs__err(-EBUSY, "%s: %s %u is acquired", call, gs->what,
				group);
	if (g->in_cpu)
		return 0;
	ret = nvs_swapper_evict(gs->core, tid(gs, group));
	if (ret == 0 && wait)
		ret = nvs_swapper_wait(gs->core, tid(gs, group));
	return ret;
}

#define CHECK_OPTS(o, out, call)                                               \
	do {                                                                   \
		if (out)                                                       \
			*(out) = NULL;                                         \
		if (!core || !(o) || !(out) || (o)->size != sizeof(*(o)))      \
			return nvs__err(-EINVAL,                               \
					call ": NULL argument or opts not "    \
					     "from its opts_init()");          \
	} while (0)

/* A role swapper is a struct whose first member is its gset. */
static void *role_new(size_t size, struct nvs_swapper *core, uint64_t id_base,
		      const char *what, const char *call)
{
	struct gset *gs = nvs__calloc(1, size);

	if (!gs) {
		nvs__err(-ENOMEM, "%s: out of memory", call);
		return NULL;
	}
	gset_init(gs, core, id_base, what);
	return gs;
}

static int role_free(struct gset *gs)
{
	int ret = gset_fini(gs);

	nvs__free(gs);
	return ret;
}

/* ------------------------------------------------------------ parameters */

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
	if (!o)
		return;
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->lookahead = 1;
}

int nvs_param_swapper_create(struct nvs_swapper *core,
			     const struct nvs_param_swapper_opts *o,
			     struct nvs_param_swapper **out)
{
	struct nvs_param_swapper *p;

	CHECK_OPTS(o, out, "nvs_param_swapper_create");
	p = role_new(sizeof(*p), core, o->id_base, "layer",
		     "nvs_param_swapper_create");
	if (!p)
		return -ENOMEM;
	p->lookahead = o->lookahead;
	p->cpu_left = o->max_in_cpu;
	nvs__walk_init(&p->walk);
	*out = p;
	return 0;
}

int nvs_param_swapper_destroy(struct nvs_param_swapper *p)
{
	if (!p)
		return 0;
	nvs__walk_fini(&p->walk);
	return role_free(&p->gs);
}

int nvs_param_add_layer(struct nvs_param_swapper *p, unsigned layer, unsigned n,
			const size_t *nbytes, const void *const *init)
{
	if (!p)
		return nvs__err(-EINVAL, "nvs_param_add_layer: NULL swapper");
	return gset_add(&p->gs, "nvs_param_add_layer", layer, n, nbytes, init,
			&p->cpu_left);
}

int nvs_param_prefetch_layer(struct nvs_param_swapper *p, unsigned layer)
{
	struct group *g;
	int ret;

	if (!p)
		return nvs__err(-EINVAL,
				"nvs_param_prefetch_layer: NULL swapper");
	ret = gfind(&p->gs, layer, "nvs_param_prefetch_layer", &g);
	return ret < 0 ? ret : gset_readahead(&p->gs, layer);
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
		if (!gget(&p->gs, layers[i]))
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
			ret = gset_readahead(&p->gs, next);
		return ret;
	}
	for (unsigned k = 1; ret == 0 && k <= p->lookahead; k++) {
		long n = (long)layer + dir * (long)k;
		if (n < 0 || n >= NVS_OFFLOAD_MAX_GROUPS)
			break;
		ret = gset_readahead(&p->gs, (unsigned)n);
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
	ret = gfind(&p->gs, layer, "nvs_param_acquire_layer", &g);
	if (ret < 0)
		return ret;
	/* The walk's direction: backward after a higher layer. */
	dir = p->walked && layer < p->last ? -1 : 1;
	/* This layer first: when it still has to be read, it gets the disk
	 * to itself (read-ahead issued alongside would share the bandwidth
	 * and delay it); then the read-ahead, which overlaps the compute. */
	ret = gset_acquire(&p->gs, "nvs_param_acquire_layer", layer, ptrs);
	if (ret < 0)
		return ret;
	p->last = layer;
	p->walked = true;
	ret = param_readahead(p, layer, dir);
	if (ret < 0)
		gset_release(&p->gs, "nvs_param_acquire_layer", layer, false);
	return ret;
}

int nvs_param_release_layer(struct nvs_param_swapper *p, unsigned layer,
			    bool dirty)
{
	if (!p)
		return nvs__err(-EINVAL,
				"nvs_param_release_layer: NULL swapper");
	return gset_release(&p->gs, "nvs_param_release_layer", layer, dirty);
}

int nvs_param_evict_layer(struct nvs_param_swapper *p, unsigned layer)
{
	if (!p)
		return nvs__err(-EINVAL, "nvs_param_evict_layer: NULL swapper");
	return gset_evict(&p->gs, "nvs_param_evict_layer", layer, false);
}

bool nvs_param_layer_in_cpu(const struct nvs_param_swapper *p, unsigned layer)
{
	const struct group *g = p ? gget(&p->gs, layer) : NULL;

	return g && g->in_cpu;
}

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

	CHECK_OPTS(o, out, "nvs_optim_swapper_create");
	x = role_new(sizeof(*x), core, o->id_base, "group",
		     "nvs_optim_swapper_create");
	if (!x)
		return -ENOMEM;
	x->pipeline_read = o->pipeline_read;
	x->pipeline_write = o->pipeline_write;
	*out = x;
	return 0;
}

int nvs_optim_swapper_destroy(struct nvs_optim_swapper *x)
{
	return x ? role_free(&x->gs) : 0;
}

int nvs_optim_add_group(struct nvs_optim_swapper *x, unsigned group, unsigned n,
			const size_t *nbytes, const void *const *init)
{
	if (!x)
		return nvs__err(-EINVAL, "nvs_optim_add_group: NULL swapper");
	return gset_add(&x->gs, "nvs_optim_add_group", group, n, nbytes, init,
			NULL);
}

int nvs_optim_swap_in(struct nvs_optim_swapper *x, unsigned group, void **state)
{
	struct group *g;
	int ret;

	if (!x || !state)
		return nvs__err(-EINVAL, "nvs_optim_swap_in: NULL argument");
	ret = gset_acquire(&x->gs, "nvs_optim_swap_in", group, state);
	if (ret < 0 || !x->pipeline_read)
		return ret;
	g = gget(&x->gs, group);
	if (g->order + 1 < x->gs.count)
		ret = gset_readahead(&x->gs, x->gs.order[g->order + 1]);
	if (ret < 0) {
		gset_release(&x->gs, "nvs_optim_swap_in", group, false);
		return ret;
	}
	return 0;
}

int nvs_optim_swap_out(struct nvs_optim_swapper *x, unsigned group)
{
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_optim_swap_out: NULL swapper");
	ret = gset_release(&x->gs, "nvs_optim_swap_out", group, true);
	if (ret < 0)
		return ret;
	return gset_evict(&x->gs, "nvs_optim_swap_out", group,
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

	CHECK_OPTS(o, out, "nvs_grad_swapper_create");
	x = role_new(sizeof(*x), core, o->id_base, "gradient group",
		     "nvs_grad_swapper_create");
	if (!x)
		return -ENOMEM;
	*out = x;
	return 0;
}

int nvs_grad_swapper_destroy(struct nvs_grad_swapper *x)
{
	return x ? role_free(&x->gs) : 0;
}

int nvs_grad_add_group(struct nvs_grad_swapper *x, unsigned group,
		       size_t nbytes)
{
	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_add_group: NULL swapper");
	return gset_add(&x->gs, "nvs_grad_add_group", group, 1, &nbytes, NULL,
			NULL);
}

int nvs_grad_write(struct nvs_grad_swapper *x, unsigned group, size_t offset,
		   const void *data, size_t nbytes, enum nvs_grad_mode mode)
{
	struct group *g;
	unsigned char *p;
	int ret;

	if (!x || (!data && nbytes))
		return nvs__err(-EINVAL, "nvs_grad_write: NULL argument");
	ret = gfind(&x->gs, group, "nvs_grad_write", &g);
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
		ret = nvs_swapper_acquire(x->gs.core, tid(&x->gs, group),
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
	ret = gfind(&x->gs, group, "nvs_grad_flush", &g);
	if (ret < 0 || !g->open)
		return ret;
	g->open = NULL;
	ret = nvs_swapper_release(x->gs.core, tid(&x->gs, group), true);
	return ret < 0 ? ret
		       : nvs_swapper_evict(x->gs.core, tid(&x->gs, group));
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
		ret = gset_acquire(&x->gs, "nvs_grad_acquire", group, &p);
	*ptr = p;
	return ret;
}

int nvs_grad_release(struct nvs_grad_swapper *x, unsigned group)
{
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_release: NULL swapper");
	ret = gset_release(&x->gs, "nvs_grad_release", group, false);
	return ret < 0 ? ret
		       : gset_evict(&x->gs, "nvs_grad_release", group, false);
}

int nvs_grad_zero(struct nvs_grad_swapper *x, unsigned group)
{
	struct group *g;
	int ret;

	if (!x)
		return nvs__err(-EINVAL, "nvs_grad_zero: NULL swapper");
	ret = gfind(&x->gs, group, "nvs_grad_zero", &g);
	if (ret < 0)
		return ret;
	if (g->acquired || g->open)
		return nvs__err(-EBUSY,
				"nvs_grad_zero: gradient group %u is open or "
				"acquired",
				group);
	/* A fresh registration reads as zeros without I/O. */
	ret = nvs_swapper_unregister(x->gs.core, tid(&x->gs, group));
	if (ret == 0)
		ret = nvs_swapper_register(x->gs.core, tid(&x->gs, group),
					   g->total, NULL);
	return ret;
}
