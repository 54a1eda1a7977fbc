/* SPDX-License-Identifier: MIT */
/*
 * A traced walk: the order in which a model acquires its layers in the
 * forward pass (repeats allowed), and where the training loop stands in
 * it, going forward or back. The parameter swapper reads ahead along it
 * (nvs_param_set_walk()). Threading: the owner's (one thread at a time).
 */
#ifndef NVS_SWAPPER_WALK_H
#define NVS_SWAPPER_WALK_H

#include <stdbool.h>
#include <stddef.h>

struct nvs_walk {
	unsigned *seq;	 /* the layers, n of them; NULL when unset */
	unsigned *first; /* seq[first[i]] == seq[i], first[i] the lowest */
	unsigned *mark;	 /* per first index: gen when already listed */
	unsigned gen;
	size_t n;
	size_t pos; /* index of the last acquired occurrence (placed) */
	bool placed;
	int dir; /* +1 forward, -1 backward */
};

/* Where a walk_ahead listing stands. */
struct nvs_walk_ahead {
	long next; /* index to look at next */
	bool done;
};

/* Empty walk: steps find nothing. */
void nvs__walk_init(struct nvs_walk *w);
void nvs__walk_fini(struct nvs_walk *w);

/*
 * Replace the walk by a copy of @layers[0..n) (n 0: empty), unplaced,
 * going forward. 0 or -ENOMEM (the old walk kept).
 */
int nvs__walk_set(struct nvs_walk *w, size_t n, const unsigned *layers);

/*
 * @layer was acquired: move to its occurrence (see nvs_param_set_walk()
 * for the rules). false when @layer is not in the walk (nothing moves).
 */
bool nvs__walk_step(struct nvs_walk *w, unsigned layer);

/*
 * List the distinct layers ahead of the position in the direction of the
 * walk, other than the layer at the position, nearest first, up to the
 * end of the walk: begin, then next until it returns false.
 */
void nvs__walk_ahead_begin(struct nvs_walk *w, struct nvs_walk_ahead *it);
bool nvs__walk_ahead_next(struct nvs_walk *w, struct nvs_walk_ahead *it,
			  unsigned *layer);

#endif
