// SPDX-License-Identifier: MIT
/*
 * A traced walk of layers and the position in it: which occurrence of a
 * layer an acquire was, which way the walk goes, and the distinct layers
 * that come next (what the parameter swapper reads ahead).
 */
#include "swapper/walk.h"
#include "internal/alloc.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void nvs__walk_init(struct nvs_walk *w)
{
	memset(w, 0, sizeof(*w));
	w->dir = 1;
}

void nvs__walk_fini(struct nvs_walk *w)
{
	nvs__free(w->seq);
	nvs__walk_init(w);
}

struct occurrence {
	unsigned layer, idx;
};

static int by_layer_then_index(const void *a, const void *b)
{
	const struct occurrence *x = a, *y = b;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int nvs__walk_set(struct nvs_walk *w, size_t n, const unsigned *layers)
{
	struct occurrence *occ;
	unsigned *mem;

	if (n == 0) {
		nvs__walk_fini(w);
		return 0;
	}
	if (n > UINT32_MAX || n > SIZE_MAX / (3 * sizeof(*mem)))
		return -ENOMEM;
	mem = nvs__malloc(3 * n * sizeof(*mem));
	occ = mem ? nvs__malloc(n * sizeof(*occ)) : NULL;
	if (!occ) {
		nvs__free(mem);
		return -ENOMEM;
	}
	/* first[]: the index of each layer's first occurrence, so that the
	 * read-ahead lists each layer once in O(1) per entry (mark[]). */
	for (size_t i = 0; i < n; i++)
		occ[i] = (struct occurrence){layers[i], (unsigned)i};
	qsort(occ, n, sizeof(*occ), by_layer_then_index);
	for (size_t i = 0, run = 0; i < n; i++) {
		if (occ[i].layer != occ[run].layer)
			run = i;
		mem[n + occ[i].idx] = occ[run].idx;
	}
	nvs__free(occ);
	memcpy(mem, layers, n * sizeof(*mem));
	memset(mem + 2 * n, 0, n * sizeof(*mem));
	nvs__walk_fini(w);
	w->seq = mem;
	w->first = mem + n;
	w->mark = mem + 2 * n;
	w->n = n;
	return 0;
}

static bool at(const struct nvs_walk *w, long i, unsigned layer)
{
	return i >= 0 && (size_t)i < w->n && w->seq[i] == layer;
}

bool nvs__walk_step(struct nvs_walk *w, unsigned layer)
{
	long pos = (long)w->pos, dir = w->dir;

	if (w->placed) {
		if (w->seq[pos] == layer) {
			/* A repeat. At an end of the walk it turns: the
			 * backward pass starts where forward ended, the
			 * next step where backward ended. */
			if (dir > 0 && (size_t)pos + 1 == w->n)
				w->dir = -1;
			else if (dir < 0 && pos == 0)
				w->dir = 1;
			return true;
		}
		if (at(w, pos + dir, layer)) {
			w->pos = (size_t)(pos + dir);
			return true;
		}
		if (at(w, pos - dir, layer)) {
			w->dir = (int)-dir;
			w->pos = (size_t)(pos - dir);
			return true;
		}
		/* A jump: the next occurrence onward. */
		for (long i = pos + 2 * dir; i >= 0 && (size_t)i < w->n;
		     i += dir) {
			if (w->seq[i] == layer) {
				w->pos = (size_t)i;
				return true;
			}
		}
	}
	for (size_t i = 0; i < w->n; i++) {
		if (w->seq[i] == layer) {
			w->pos = i;
			w->dir = 1;
			w->placed = true;
			return true;
		}
	}
	return false;
}

void nvs__walk_ahead_begin(struct nvs_walk *w, struct nvs_walk_ahead *it)
{
	it->done = !w->placed;
	it->next = (long)w->pos + w->dir;
	if (it->done)
		return;
	if (++w->gen == 0) { /* wrapped: old marks could match again */
		memset(w->mark, 0, w->n * sizeof(*w->mark));
		w->gen = 1;
	}
	w->mark[w->first[w->pos]] = w->gen; /* not the current layer */
}

bool nvs__walk_ahead_next(struct nvs_walk *w, struct nvs_walk_ahead *it,
			  unsigned *layer)
{
	while (!it->done) {
		long i = it->next;
		unsigned f;

		if (i < 0 || (size_t)i >= w->n) {
			it->done = true;
			break;
		}
		it->next += w->dir;
		f = w->first[i];
		if (w->mark[f] == w->gen)
			continue;
		w->mark[f] = w->gen;
		*layer = w->seq[i];
		return true;
	}
	return false;
}
