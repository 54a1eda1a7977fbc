/* SPDX-License-Identifier: MIT */
/*
 * Groups of tensors, what the three role swappers (nvswap/offload.h) are
 * made of: a table of layers or sub-groups by number, each group's tensors
 * packed into one swapper tensor under id_base + (group << 20) (or kept
 * in pinned CPU memory, max_in_cpu), and acquire, release, evict and
 * read-ahead of a whole group. Threading: the role's (one thread at a
 * time); the nvs_swapper under it may be shared.
 */
#ifndef NVS_SWAPPER_GSET_H
#define NVS_SWAPPER_GSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/offload.h"

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

static inline uint64_t nvs__gset_id(const struct gset *gs, unsigned group)
{
	return gs->id_base + ((uint64_t)group << 20);
}

static inline struct group *nvs__gset_get(const struct gset *gs, unsigned group)
{
	return group < gs->cap ? gs->tab[group] : NULL;
}

/* 0 and *@out = @group, or -ENOENT "<call>: no <what> <group>". */
int nvs__gset_find(const struct gset *gs, unsigned group, const char *call,
		   struct group **out);

/* Add @group: @n tensors of @nbytes, initial contents @init (see
 * nvs_param_add_layer()); @cpu_budget (NULL: none) is what may still stay
 * in CPU memory, reduced when this group does. */
int nvs__gset_add(struct gset *gs, const char *call, unsigned group, unsigned n,
		  const size_t *nbytes, const void *const *init,
		  uint64_t *cpu_budget);

/* Add @group streamed from files: @n tensors of @nbytes, tensor i's
 * clean contents @src[i] (see nvs_param_add_layer_file()); its packed
 * tensor registered with nvs_swapper_register_file(), nothing read. */
int nvs__gset_add_file(struct gset *gs, const char *call, unsigned group,
		       unsigned n, const size_t *nbytes,
		       const struct nvs_layer_source *src);

/* Unregister and free every group; the first unregister error. */
int nvs__gset_fini(struct gset *gs);

/* Register @group's packed tensor (@g->total bytes, @init or zeros) in
 * the swapper; a persistent one also records the group's layout as the
 * tensor's tag, checked when a later run adds the group again. */
int nvs__gset_register(struct gset *gs, unsigned group, const struct group *g,
		       const void *init);

/* Read @group ahead into a free buffer only (never waits for one): 1 when
 * that started its read or kept its write-back's buffer, 0 when nothing
 * was needed or no buffer was free, or a submit error. */
int nvs__gset_readahead(struct gset *gs, unsigned group);

/* Give back the buffer of @group, read ahead and not acquired since, as
 * nvs__swapper_drop_unused() says: 1, 0, or -EINPROGRESS (its read is in
 * flight: ask again later). */
int nvs__gset_drop_unused(struct gset *gs, unsigned group);

/* The group's tensors resident and held: @ptrs one pointer each. */
int nvs__gset_acquire(struct gset *gs, const char *call, unsigned group,
		      void **ptrs);
int nvs__gset_release(struct gset *gs, const char *call, unsigned group,
		      bool dirty);

/* Evict @group (a no-op in CPU memory); with @wait, wait for its write. */
int nvs__gset_evict(struct gset *gs, const char *call, unsigned group,
		    bool wait);

/* Check a role's create() arguments (core, opts from its opts_init(),
 * out), setting *out to NULL first. */
#define NVS__ROLE_CHECK_OPTS(o, out, call)                                     \
	do {                                                                   \
		if (out)                                                       \
			*(out) = NULL;                                         \
		if (!core || !(o) || !(out) || (o)->size != sizeof(*(o)))      \
			return nvs__err(-EINVAL,                               \
					call ": NULL argument or opts not "    \
					     "from its opts_init()");          \
	} while (0)

/* Start a role's create(): check the arguments, make the role (@var: a
 * zeroed struct whose first member is its gset, over core with
 * (@o)->id_base) and hand it out in *@out; returns from the caller with
 * -EINVAL or -ENOMEM on failure. */
#define NVS__ROLE_CREATE(var, o, out, what, call)                              \
	do {                                                                   \
		NVS__ROLE_CHECK_OPTS(o, out, call);                            \
		(var) = nvs__role_new(sizeof(*(var)), core, (o)->id_base,      \
				      what, call);                             \
		if (!(var))                                                    \
			return -ENOMEM;                                        \
		*(out) = (var);                                                \
	} while (0)

/* A role swapper: a zeroed struct of @size bytes whose first member is
 * its gset, set up over @core; NULL (the error set) when out of memory. */
void *nvs__role_new(size_t size, struct nvs_swapper *core, uint64_t id_base,
		    const char *what, const char *call);

/* nvs__gset_fini() and free the role. */
int nvs__role_free(struct gset *gs);

#endif
