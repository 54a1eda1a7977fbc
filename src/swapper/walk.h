/* SPDX-License-Identifier: MIT */
/*
 * A traced walk: the order in which a model acquires its layers in the
 * forward pass (repeats allowed), where the training loop stands in it,
 * going forward or back, and what it learned happens at each end (a turn,
 * or a new pass from the first entry), so that the read-ahead can go on
 * past an end into the next pass or step. The parameter swapper reads
 * ahead along it (nvs_param_set_walk()). Threading: the owner's (one
 * thread at a time).
 */
#ifndef NVS_SWAPPER_WALK_H
#define NVS_SWAPPER_WALK_H

#include <stdbool.h>
#include <stddef.h>

/* What the acquire after an end of the walk did. */
enum nvs_walk_outcome {
	NVS_WALK_REPEAT = 0,  /* the layer at the end again: a turn */
	NVS_WALK_BACK = 1,    /* the neighbour behind: a turn */
	NVS_WALK_RESTART = 2, /* the first entry, going forward (after the
				 last entry only: a new pass) */
	NVS_WALK_OTHER = 3,   /* anything else: nothing to predict */
};

/* The ends: the last entry reached going forward, the first going
 * backward. */
enum { NVS_WALK_LAST = 0, NVS_WALK_FIRST = 1 };

/* Outcomes remembered per end; a cycle of passes up to half of it long is
 * recognised (a step with up to 7 forward/backward pairs before the
 * optimizer pass, as in gradient accumulation). */
#define NVS_WALK_HISTORY 16

struct nvs_walk_end {
	unsigned char seen[NVS_WALK_HISTORY]; /* ring, seen[count % H] next */
	unsigned count;			      /* outcomes recorded */
};

struct nvs_walk {
	unsigned *seq;	 /* the layers, n of them; NULL when unset */
	unsigned *first; /* seq[first[i]] == seq[i], first[i] the lowest */
	unsigned *mark;	 /* per first index: gen when already listed */
	unsigned gen;
	size_t n;
	size_t pos; /* index of the last acquired occurrence (placed) */
	bool placed;
	int dir; /* +1 forward, -1 backward */
	struct nvs_walk_end end[2];
	int ended; /* what the last step did at an end (an enum
		      nvs_walk_outcome), -1 when it left none */
};

/* Where a walk_ahead listing stands. */
struct nvs_walk_ahead {
	long next;    /* index to look at next */
	int dir;      /* the way it goes from there */
	bool crossed; /* it went past an end: the layers it lists now are
			 the next pass's or step's */
	bool done;
};

/* Empty walk: steps find nothing. */
void nvs__walk_init(struct nvs_walk *w);
void nvs__walk_fini(struct nvs_walk *w);

/*
 * Replace the walk by a copy of @layers[0..n) (n 0: empty), unplaced,
 * going forward, nothing learned. 0 or -ENOMEM (the old walk kept).
 */
int nvs__walk_set(struct nvs_walk *w, size_t n, const unsigned *layers);

/*
 * @layer was acquired: move to its occurrence (see nvs_param_set_walk()
 * for the rules), and when the position was at an end, remember what
 * this acquire did there. false when @layer is not in the walk (nothing
 * moves).
 */
bool nvs__walk_step(struct nvs_walk *w, unsigned layer);

/*
 * What the next acquire at end @e (NVS_WALK_LAST or _FIRST) is expected
 * to do: the outcome one cycle ago, the cycle being the shortest period
 * that the remembered outcomes at that end repeat with. REPEAT when
 * nothing was seen yet (the walk turns at its ends); OTHER when the
 * outcomes follow no period up to NVS_WALK_HISTORY / 2.
 */
enum nvs_walk_outcome nvs__walk_expect(const struct nvs_walk *w, int e);

/*
 * The layer the walk expects to be acquired next: the neighbour in the
 * direction of the walk, or at an end what nvs__walk_expect() says (the
 * same layer for a repeat). false when unplaced or nothing is expected.
 */
bool nvs__walk_next(const struct nvs_walk *w, unsigned *layer);

/*
 * List the distinct layers ahead of the position in the direction of the
 * walk, other than the layer at the position, nearest first; at the end
 * of the walk on past it as nvs__walk_expect() says (back along the walk
 * after a turn, from the first entry after a restart), once: begin, then
 * next until it returns false. it->crossed tells whether the layer just
 * listed lies past the end.
 */
void nvs__walk_ahead_begin(struct nvs_walk *w, struct nvs_walk_ahead *it);
bool nvs__walk_ahead_next(struct nvs_walk *w, struct nvs_walk_ahead *it,
			  unsigned *layer);

#endif
