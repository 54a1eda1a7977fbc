// SPDX-License-Identifier: MIT
/*
 * The parameter swapper: layers (gset.h) read ahead along the traced walk
 * (walk.c), on past its ends into the next pass or step as the walk
 * learned them, or by number without a walk; layers read ahead that the
 * walk then passed without acquiring given back; a clean layer the walk
 * turns on kept resident until the next acquire; its counters.
 */
#include "nvswap/offload.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "swapper/gset.h"
#include "swapper/walk.h"

#include <errno.h>

#include "nvswap/swapper.h"

/* A layer the read-ahead brought in, followed until acquired or passed. */
struct brought {
	unsigned layer;
	bool wanted; /* still listed ahead (give_back_passed) */
};

struct nvs_param_swapper {
	struct gset gs;
	unsigned lookahead;
	uint64_t cpu_left;
	unsigned last;	      /* layer acquired last */
	int dir;	      /* without a walk: the direction to read ahead */
	bool walked;	      /* last is set */
	bool ahead;	      /* last is in the walk (or there is none): what
				 comes next is known */
	struct nvs_walk walk; /* nvs_param_set_walk(); empty: by number */
	/* keeping: layer kept is resident and clean, its eviction put off
	 * until the next acquire (the walk turns on it) */
	bool keeping;
	unsigned kept;
	/* layers the read-ahead brought in that no acquire took since */
	struct brought *brought;
	size_t nbrought, brought_cap;
	struct nvs_param_stats st;
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
	nvs__free(p->brought);
	return nvs__role_free(&p->gs);
}

static int add_layer(struct nvs_param_swapper *p, const char *call,
		     unsigned layer, unsigned n, const size_t *nbytes,
		     const void *const *init, bool in_cpu)
{
	uint64_t none = 0;

	if (!p)
		return nvs__err(-EINVAL, "%s: NULL swapper", call);
	return nvs__gset_add(&p->gs, call, layer, n, nbytes, init,
			     in_cpu ? &p->cpu_left : &none);
}

int nvs_param_add_layer(struct nvs_param_swapper *p, unsigned layer, unsigned n,
			const size_t *nbytes, const void *const *init)
{
	return add_layer(p, "nvs_param_add_layer", layer, n, nbytes, init,
			 true);
}

int nvs_param_add_layer_where(struct nvs_param_swapper *p, unsigned layer,
			      unsigned n, const size_t *nbytes,
			      const void *const *init, bool in_cpu)
{
	return add_layer(p, "nvs_param_add_layer_where", layer, n, nbytes, init,
			 in_cpu);
}

int nvs_param_add_layer_file(struct nvs_param_swapper *p, unsigned layer,
			     unsigned n, const size_t *nbytes,
			     const struct nvs_layer_source *src)
{
	if (!p)
		return nvs__err(-EINVAL,
				"nvs_param_add_layer_file: NULL swapper");
	return nvs__gset_add_file(&p->gs, "nvs_param_add_layer_file", layer, n,
				  nbytes, src);
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

/* Count what the acquire just placed on the walk did at an end. */
static void count_end(struct nvs_param_swapper *p)
{
	switch (p->walk.ended) {
	case NVS_WALK_REPEAT:
	case NVS_WALK_BACK:
		p->st.turns++;
		break;
	case NVS_WALK_RESTART:
		p->st.restarts++;
		break;
	default:
		break;
	}
}

/* Stop following @layer's read-ahead: an acquire took it, or the caller
 * evicted it. */
static void forget(struct nvs_param_swapper *p, unsigned layer)
{
	for (size_t i = 0; i < p->nbrought; i++)
		if (p->brought[i].layer == layer) {
			p->brought[i] = p->brought[--p->nbrought];
			return;
		}
}

/* Remember that the read-ahead brought @layer in. Out of memory: it is
 * not followed, and keeps its buffer until acquired or evicted. */
static void follow(struct nvs_param_swapper *p, unsigned layer)
{
	forget(p, layer);
	if (nvs__reserve(&p->brought, &p->brought_cap, p->nbrought,
			 p->nbrought + 1, sizeof(*p->brought)))
		p->brought[p->nbrought++] = (struct brought){.layer = layer};
}

/* Mark the layers brought in that the walk still lists ahead, at any
 * distance, from its position on past its end as expected. Stops as soon
 * as every one is found: at once in a steady walk, where they lie within
 * lookahead. */
static void mark_ahead(struct nvs_param_swapper *p)
{
	struct nvs_walk_ahead it;
	size_t left = p->nbrought, i;
	unsigned layer;

	nvs__walk_ahead_begin(&p->walk, &it);
	while (left && nvs__walk_ahead_next(&p->walk, &it, &layer))
		for (i = 0; i < p->nbrought; i++)
			if (p->brought[i].layer == layer &&
			    !p->brought[i].wanted) {
				p->brought[i].wanted = true;
				left--;
			}
}

/* Give back the buffers of layers read ahead that the read-ahead no
 * longer lists ahead: the position went past them without acquiring them
 * (a step that strayed, layers read by number that a caller reads
 * another way), or a new walk does not hold them. Nothing else would:
 * the read-ahead takes free buffers only, and an acquire finds one as
 * long as these leave it one, so they would hold theirs for good. One
 * still listed, however far, is kept: its bytes are read already. A read
 * still in flight is left to land and looked at again at the next
 * read-ahead. A new walk not placed yet lists nothing: those wait for
 * its first acquire. Without a walk nothing is given back: read ahead by
 * number, acquires a little out of order turn the direction back and
 * forth, and a layer behind is not known to be passed. */
static void give_back_passed(struct nvs_param_swapper *p)
{
	size_t i;

	if (!p->nbrought || !p->walk.placed)
		return;
	mark_ahead(p);
	for (i = p->nbrought; i-- > 0;) {
		struct brought *b = &p->brought[i];
		int r;
		if (b->wanted) {
			b->wanted = false;
			continue;
		}
		r = nvs__gset_drop_unused(&p->gs, b->layer);
		if (r == -EINPROGRESS)
			continue;
		p->st.readaheads_unused += r > 0;
		*b = p->brought[--p->nbrought];
	}
}

/* @layer's read-ahead returned @ret: counted and followed when it
 * brought the layer in (@crossed: listed past the walk's end). */
static void brought_in(struct nvs_param_swapper *p, unsigned layer, int ret,
		       bool crossed)
{
	if (ret <= 0)
		return;
	p->st.readaheads++;
	p->st.readaheads_past_end += crossed;
	follow(p, layer);
}

/* Give back what the walk passed, then read the next lookahead layers
 * ahead: along the walk from where it stands, on past its end as it
 * learned the passes go, or without a walk by number from the layer
 * acquired last, in its direction. 0 or the first submit error. */
static int read_ahead(struct nvs_param_swapper *p)
{
	struct nvs_walk_ahead it;
	unsigned next, k = 0;
	int ret = 0;

	give_back_passed(p);
	if (p->walk.n) {
		nvs__walk_ahead_begin(&p->walk, &it);
		while (ret >= 0 && k++ < p->lookahead &&
		       nvs__walk_ahead_next(&p->walk, &it, &next)) {
			ret = nvs__gset_readahead(&p->gs, next);
			brought_in(p, next, ret, it.crossed);
		}
		return ret < 0 ? ret : 0;
	}
	for (k = 1; ret >= 0 && k <= p->lookahead; k++) {
		long n = (long)p->last + p->dir * (long)k;
		if (n < 0 || n >= NVS_OFFLOAD_MAX_GROUPS)
			break;
		ret = nvs__gset_readahead(&p->gs, (unsigned)n);
		brought_in(p, (unsigned)n, ret, false);
	}
	return ret < 0 ? ret : 0;
}

/* Give the kept layer's buffer back now: the walk went elsewhere. */
static void drop_kept(struct nvs_param_swapper *p)
{
	p->keeping = false;
	p->st.kept_dropped++;
	/* Clean and released: no I/O, nothing to fail (already gone when
	 * the swapper evicted it for room: a no-op). */
	(void)nvs__gset_evict(&p->gs, "nvs_param_acquire_layer", p->kept,
			      false);
}

/* Whether @layer (@g) is being read: read ahead and not yet resident. */
static bool in_flight(const struct nvs_param_swapper *p, const struct group *g,
		      unsigned layer)
{
	struct nvs_tensor_info ti;

	return !g->in_cpu && !g->acquired &&
	       nvs_swapper_info(p->gs.core, nvs__gset_id(&p->gs, layer), &ti) ==
		       0 &&
	       ti.state == NVS_TENSOR_READING;
}

/* The acquire of @layer moves the position (along the walk, or by number
 * in @dir) and reads ahead from there: 0 or the first submit error. */
static int move(struct nvs_param_swapper *p, unsigned layer, int dir)
{
	p->last = layer;
	p->dir = dir;
	p->walked = true;
	/* A layer not in the walk: nothing known ahead, the position stays
	 * (and the read-ahead at its release is not tried). */
	p->ahead = !p->walk.n || nvs__walk_step(&p->walk, layer);
	if (p->walk.n && p->ahead)
		count_end(p);
	return p->ahead ? read_ahead(p) : 0;
}

int nvs_param_acquire_layer(struct nvs_param_swapper *p, unsigned layer,
			    void **ptrs)
{
	int ret, dir;
	bool early;
	struct group *g;

	if (!p || !ptrs)
		return nvs__err(-EINVAL,
				"nvs_param_acquire_layer: NULL argument");
	ret = nvs__gset_find(&p->gs, layer, "nvs_param_acquire_layer", &g);
	if (ret < 0)
		return ret;
	if (p->keeping && p->kept != layer)
		drop_kept(p); /* before: the acquire may need its buffer */
	p->keeping = false;
	forget(p, layer); /* wanted after all */
	/* Without a walk, its direction: backward after a higher layer. */
	dir = p->walked && layer < p->last ? -1 : 1;
	/* A layer still to be read gets the disk to itself first (read-ahead
	 * issued alongside would share the bandwidth and delay it), then the
	 * read-ahead, which overlaps the compute. One already being read
	 * (read ahead) is queued before anything submitted now: its
	 * read-ahead goes in first, so the disk keeps the pool's depth while
	 * this one finishes (after the wait, the buffer the last release
	 * freed would sit idle through it: in an I/O-bound decoding step
	 * the disk's average queue went from 3.5 to 4.3 requests). */
	early = in_flight(p, g, layer);
	if (early) {
		ret = move(p, layer, dir);
		if (ret < 0)
			return ret;
	}
	ret = nvs__gset_acquire(&p->gs, "nvs_param_acquire_layer", layer, ptrs);
	if (ret < 0)
		return ret;
	ret = early ? 0 : move(p, layer, dir);
	if (ret < 0)
		nvs__gset_release(&p->gs, "nvs_param_acquire_layer", layer,
				  false);
	else
		p->st.acquires++;
	return ret;
}

int nvs_param_release_layer(struct nvs_param_swapper *p, unsigned layer,
			    bool dirty)
{
	int ret;

	if (!p)
		return nvs__err(-EINVAL,
				"nvs_param_release_layer: NULL swapper");
	ret = nvs__gset_release(&p->gs, "nvs_param_release_layer", layer,
				dirty);
	/* The compute is done: a layer ahead that found no free buffer at
	 * the acquire may find one now (a write-back ended meanwhile), and
	 * its read then goes in ahead of the write-back this layer's
	 * eviction starts. Best effort: a layer that cannot be read now
	 * is read, and its failure said, by the acquire that needs it. */
	if (ret == 0 && p->ahead)
		(void)read_ahead(p);
	return ret;
}

/* Whether the walk turns on @layer, the layer at its position: the next
 * acquire is expected to be @layer again (the backward pass starting
 * where forward ended, the next step where backward ended). */
static bool turns_on(const struct nvs_param_swapper *p, unsigned layer)
{
	unsigned next;

	return p->walk.placed && p->walk.seq[p->walk.pos] == layer &&
	       nvs__walk_next(&p->walk, &next) && next == layer;
}

/* Whether evicting @layer keeps it instead: a clean layer the walk turns
 * on keeps its buffer until the next acquire (dropping it would only
 * read it again); a changed one is written back as asked (an acquire
 * during the write gets the buffer at once). */
static bool keep(struct nvs_param_swapper *p, unsigned layer)
{
	struct group *g = nvs__gset_get(&p->gs, layer);
	struct nvs_tensor_info ti;

	if (!g || g->acquired || g->in_cpu || !turns_on(p, layer) ||
	    nvs_swapper_info(p->gs.core, nvs__gset_id(&p->gs, layer), &ti) <
		    0 ||
	    ti.state != NVS_TENSOR_RESIDENT || ti.dirty || ti.acquired)
		return false;
	if (p->keeping && p->kept != layer)
		drop_kept(p);
	if (!p->keeping)
		p->st.kept++;
	p->keeping = true;
	p->kept = layer;
	return true;
}

int nvs_param_evict_layer(struct nvs_param_swapper *p, unsigned layer)
{
	if (!p)
		return nvs__err(-EINVAL, "nvs_param_evict_layer: NULL swapper");
	forget(p, layer);
	if (keep(p, layer))
		return 0;
	return nvs__gset_evict(&p->gs, "nvs_param_evict_layer", layer, false);
}

bool nvs_param_layer_in_cpu(const struct nvs_param_swapper *p, unsigned layer)
{
	const struct group *g = p ? nvs__gset_get(&p->gs, layer) : NULL;

	return g && g->in_cpu;
}

int nvs_param_swapper_stats(const struct nvs_param_swapper *p,
			    struct nvs_param_stats *st)
{
	if (!p || !st)
		return nvs__err(-EINVAL,
				"nvs_param_swapper_stats: NULL argument");
	*st = p->st;
	return 0;
}
