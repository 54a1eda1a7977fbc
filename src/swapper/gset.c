// SPDX-License-Identifier: MIT
/*
 * Groups of tensors for the role swappers (see gset.h): the table, adding
 * a group (packing its tensors, or keeping it in CPU memory), and a whole
 * group's acquire, release, evict and read-ahead in the borrowed
 * nvs_swapper.
 */
#include "swapper/gset.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "swapper/swapper.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/buffers.h"

/* A group's tensors are packed into one swapper tensor, each at a 64-byte
 * aligned offset: a group needs one pool buffer, and its I/O is one op
 * per extent instead of one per small tensor. */
#define PACK_ALIGN 64

int nvs__gset_find(const struct gset *gs, unsigned group, const char *call,
		   struct group **out)
{
	*out = nvs__gset_get(gs, group);
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

/* A zeroed copy of @arr (@n elements of @size) with room for @cap; @arr
 * freed. NULL (and @arr kept) when out of memory. */
static void *resize(void *arr, size_t n, size_t cap, size_t size)
{
	void *a = nvs__calloc(cap, size);

	if (a && arr)
		memcpy(a, arr, n * size);
	if (a)
		nvs__free(arr);
	return a;
}

/* Room for @group in the table and one more in the order list. */
static int gset_grow(struct gset *gs, unsigned group)
{
	size_t cap = gs->cap ? gs->cap : 16;
	struct group **t;
	unsigned *o;

	while (cap <= group)
		cap *= 2;
	if (cap > gs->cap) {
		if (!(t = resize(gs->tab, gs->cap, cap, sizeof(*t))))
			return -ENOMEM;
		gs->tab = t;
		gs->cap = cap;
	}
	if (!(o = resize(gs->order, gs->count, gs->count + 1, sizeof(*o))))
		return -ENOMEM;
	gs->order = o;
	return 0;
}

/* A group's layout as its swapper tensor's tag: "NVG1", the count, each
 * tensor's size (little-endian u32, u64s). */
static size_t layout_tag(const struct group *g, unsigned char *tag)
{
	size_t n = 8;

	memcpy(tag, "NVG1", 4);
	for (unsigned b = 0; b < 4; b++)
		tag[4 + b] = (unsigned char)(g->n >> (8 * b));
	for (unsigned i = 0; i < g->n; i++, n += 8)
		for (unsigned b = 0; b < 8; b++)
			tag[n + b] = (unsigned char)((uint64_t)g->nbytes[i] >>
						     (8 * b));
	return n;
}

int nvs__gset_register(struct gset *gs, unsigned group, const struct group *g,
		       const void *init)
{
	unsigned char tag[8 + 8 * NVS_OFFLOAD_MAX_TENSORS];
	uint64_t id = nvs__gset_id(gs, group);
	int ret = nvs_swapper_register(gs->core, id, g->total, init);

	if (ret == 0 && nvs__swapper_persistent(gs->core)) {
		ret = nvs_swapper_set_tag(gs->core, id, tag,
					  layout_tag(g, tag));
		if (ret < 0)
			nvs_swapper_unregister(gs->core, id);
	}
	return ret;
}

/* A persistent swapper that holds @group already (reopened): take it as
 * it is when its layout matches. 1 when adopted, 0 when absent, -EINVAL
 * (another layout) or -errno. */
static int adopt(struct gset *gs, const char *call, unsigned group,
		 const struct group *g)
{
	unsigned char want[8 + 8 * NVS_OFFLOAD_MAX_TENSORS];
	unsigned char have[sizeof(want)];
	uint64_t id = nvs__gset_id(gs, group);
	size_t n = layout_tag(g, want);
	int len;

	if (!nvs__swapper_persistent(gs->core))
		return 0;
	len = nvs_swapper_get_tag(gs->core, id, have, sizeof(have));
	if (len == -ENOENT)
		return 0;
	if (len < 0)
		return len;
	if ((size_t)len != n || memcmp(have, want, n))
		return nvs__err(-EINVAL,
				"%s: %s %u was saved with another layout "
				"(tensor count or sizes) than the one added "
				"now: resume with the model it was saved from",
				call, gs->what, group);
	return 1;
}

/* A new group of @n tensors of @nbytes, packed (its layout only), into
 * *@out; -EINVAL/-EEXIST/-ENOMEM named after @call. Not added yet. */
static int layout(struct gset *gs, const char *call, unsigned group, unsigned n,
		  const size_t *nbytes, struct group **out)
{
	struct group *g;

	if (!nbytes || n == 0 || n > NVS_OFFLOAD_MAX_TENSORS ||
	    group >= NVS_OFFLOAD_MAX_GROUPS)
		return nvs__err(-EINVAL,
				"%s: %s %u with %u tensors (1 to %u, %s "
				"below %u)",
				call, gs->what, group, n,
				NVS_OFFLOAD_MAX_TENSORS, gs->what,
				NVS_OFFLOAD_MAX_GROUPS);
	if (nvs__gset_get(gs, group))
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
	}
	*out = g;
	return 0;
}

static void add_last(struct gset *gs, unsigned group, struct group *g)
{
	g->order = gs->count;
	gs->order[gs->count++] = group;
	gs->tab[group] = g;
}

/* Add @group; @cpu_budget (NULL: none) is what may still stay in CPU
 * memory, reduced when this group does. */
int nvs__gset_add(struct gset *gs, const char *call, unsigned group, unsigned n,
		  const size_t *nbytes, const void *const *init,
		  uint64_t *cpu_budget)
{
	struct group *g;
	unsigned char *pack = NULL;
	bool any_init = false;
	int ret = layout(gs, call, group, n, nbytes, &g);

	if (ret < 0)
		return ret;
	/* A persistent set keeps what is on NVMe: nothing stays in CPU
	 * memory, where a checkpoint would not see it. */
	if (nvs__swapper_persistent(gs->core))
		cpu_budget = NULL;
	for (unsigned i = 0; i < n; i++)
		any_init |= init && init[i];
	ret = adopt(gs, call, group, g);
	if (ret < 0) {
		nvs__free(g);
		return ret;
	}
	if (ret == 1) {
		/* Resumed: the saved contents win over @init. */
		add_last(gs, group, g);
		return 0;
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
		ret = nvs__gset_register(gs, group, g, pack);
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
	add_last(gs, group, g);
	return 0;
}

/* Lay @g out again with each file tensor whose file offset is a multiple
 * of PACK_ALIGN where its offset in the buffer matches the file's modulo
 * FILE_ALIGN: the aio handle then reads its body straight into the pool
 * buffer (O_DIRECT), staging only its unaligned head and tail, where the
 * packed layout would stage all of it. Others stay PACK_ALIGN-aligned
 * (staged): torch's CPU kernels round differently on data that is not
 * (a forward from a tensor 8 bytes off a cache line is not bit for bit
 * the one from memory), and bit for bit is the rule. The layer grows by
 * less than FILE_ALIGN a tensor. */
#define FILE_ALIGN 4096u
static void file_layout(struct group *g, const struct nvs_layer_source *src)
{
	size_t at = 0;

	for (unsigned i = 0; i < g->n; i++) {
		at = (at + PACK_ALIGN - 1) & ~(size_t)(PACK_ALIGN - 1);
		if (src[i].file != NVS_LAYER_ZEROS &&
		    src[i].offset % PACK_ALIGN == 0)
			at += (src[i].offset - at) % FILE_ALIGN;
		g->off[i] = at;
		at += g->nbytes[i];
	}
	g->total = at;
}

static int register_file(struct gset *gs, unsigned group, const struct group *g,
			 const struct nvs_layer_source *src)
{
	struct nvs_file_piece pieces[NVS_OFFLOAD_MAX_TENSORS];
	size_t k = 0;

	for (unsigned i = 0; i < g->n; i++)
		if (src[i].file != NVS_LAYER_ZEROS)
			pieces[k++] = (struct nvs_file_piece){
				.file = src[i].file,
				.offset = src[i].offset,
				.length = g->nbytes[i],
				.at = g->off[i],
			};
	return k ? nvs_swapper_register_file(gs->core, nvs__gset_id(gs, group),
					     g->total, pieces, k)
		 : nvs_swapper_register(gs->core, nvs__gset_id(gs, group),
					g->total, NULL);
}

int nvs__gset_add_file(struct gset *gs, const char *call, unsigned group,
		       unsigned n, const size_t *nbytes,
		       const struct nvs_layer_source *src)
{
	struct group *g, packed;
	int ret;

	if (!src)
		return nvs__err(-EINVAL, "%s: NULL sources", call);
	if (nvs__swapper_persistent(gs->core))
		return nvs__err(-EOPNOTSUPP,
				"%s: %s %u: a persistent set's manifests name "
				"no file outside it",
				call, gs->what, group);
	if ((ret = layout(gs, call, group, n, nbytes, &g)) < 0)
		return ret;
	for (unsigned i = 0; i < n; i++)
		if (src[i].reserved) {
			nvs__free(g);
			return nvs__err(-EINVAL,
					"%s: %s %u: tensor %u's source has a "
					"non-zero reserved field",
					call, gs->what, group, i);
		}
	packed = *g;
	file_layout(g, src);
	ret = register_file(gs, group, g, src);
	if (ret == -EFBIG) {
		/* Aligned, it no longer fits a buffer: packed, staged. */
		*g = packed;
		ret = register_file(gs, group, g, src);
	}
	if (ret < 0) {
		char msg[NVS_ERRMSG_MAX];
		size_t total = g->total;
		snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		nvs__free(g);
		return nvs__err(ret, "%s: %s %u (%zu bytes packed): %s", call,
				gs->what, group, total, msg);
	}
	add_last(gs, group, g);
	return 0;
}

int nvs__gset_fini(struct gset *gs)
{
	int first = 0;

	for (size_t k = 0; k < gs->cap; k++) {
		struct group *g = gs->tab[k];
		if (!g)
			continue;
		if (g->in_cpu) {
			nvs_pinned_free(g->cpu);
		} else {
			uint64_t id = nvs__gset_id(gs, (unsigned)k);
			if (g->acquired || g->open)
				nvs_swapper_release(gs->core, id, false);
			/* A persistent set keeps its tensors for the next
			 * run (destroying the swapper checkpoints them). */
			int r = nvs__swapper_persistent(gs->core)
					? 0
					: nvs_swapper_unregister(gs->core, id);
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
int nvs__gset_readahead(struct gset *gs, unsigned group)
{
	struct group *g = nvs__gset_get(gs, group);
	int r;

	if (!g || g->in_cpu)
		return 0;
	r = nvs__swapper_readahead(gs->core, nvs__gset_id(gs, group));
	/* A full pool: less overlap, fine. A group larger than the buffers
	 * (a persistent set's, opened with smaller ones): its acquire says
	 * so; its reader copies it out (nvs_swapper_read) instead. */
	return r == -EAGAIN || r == -EFBIG ? 0 : r;
}

int nvs__gset_drop_unused(struct gset *gs, unsigned group)
{
	struct group *g = nvs__gset_get(gs, group);

	if (!g || g->in_cpu || g->acquired)
		return 0;
	return nvs__swapper_drop_unused(gs->core, nvs__gset_id(gs, group));
}

int nvs__gset_acquire(struct gset *gs, const char *call, unsigned group,
		      void **ptrs)
{
	unsigned char *base;
	struct group *g;
	int ret = nvs__gset_find(gs, group, call, &g);

	if (ret < 0)
		return ret;
	if (g->acquired)
		return nvs__err(-EBUSY, "%s: %s %u is already acquired", call,
				gs->what, group);
	if (g->in_cpu) {
		base = g->cpu;
	} else {
		ret = nvs_swapper_acquire(gs->core, nvs__gset_id(gs, group),
					  (void **)&base);
		if (ret < 0)
			return ret;
	}
	for (unsigned i = 0; i < g->n; i++)
		ptrs[i] = base + g->off[i];
	g->acquired = true;
	return 0;
}

/* @group, found and acquired (@acquired) or not: 0, -ENOENT or -EBUSY. */
static int held(struct gset *gs, const char *call, unsigned group,
		bool acquired, struct group **out)
{
	int ret = nvs__gset_find(gs, group, call, out);

	if (ret == 0 && (*out)->acquired != acquired)
		ret = nvs__err(-EBUSY, "%s: %s %u is %s", call, gs->what, group,
			       acquired ? "not acquired" : "acquired");
	return ret;
}

int nvs__gset_release(struct gset *gs, const char *call, unsigned group,
		      bool dirty)
{
	struct group *g;
	int ret = held(gs, call, group, true, &g);

	if (ret < 0)
		return ret;
	g->acquired = false;
	return g->in_cpu ? 0
			 : nvs_swapper_release(gs->core,
					       nvs__gset_id(gs, group), dirty);
}

int nvs__gset_evict(struct gset *gs, const char *call, unsigned group,
		    bool wait)
{
	struct group *g;
	int ret = held(gs, call, group, false, &g);

	if (ret < 0 || g->in_cpu)
		return ret;
	ret = nvs_swapper_evict(gs->core, nvs__gset_id(gs, group));
	if (ret == 0 && wait)
		ret = nvs_swapper_wait(gs->core, nvs__gset_id(gs, group));
	return ret;
}

/* A role swapper is a struct whose first member is its gset. */
void *nvs__role_new(size_t size, struct nvs_swapper *core, uint64_t id_base,
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

int nvs__role_free(struct gset *gs)
{
	int ret = nvs__gset_fini(gs);

	nvs__free(gs);
	return ret;
}
