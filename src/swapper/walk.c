// SPDX-License-Identifier: MIT
/*
 * A traced walk of layers and the position in it: which occurrence of a
 * layer an acquire was, which way the walk goes, what the acquires at its
 * ends did (learned, to predict the next pass), and the distinct layers
 * that come next, past an end too (what the parameter swapper reads
 * ahead).
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
	w->ended = -1;
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

/* Move to @layer's occurrence: the rules of nvs_param_set_walk(). */
static bool move(struct nvs_walk *w, unsigned layer)
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

/* The end the position is at, going toward it, or -1. A walk of one
 * entry has no ends worth learning: nothing else to read ahead. */
static int end_here(const struct nvs_walk *w)
{
	if (!w->placed || w->n < 2)
		return -1;
	if (w->dir > 0 && w->pos + 1 == w->n)
		return NVS_WALK_LAST;
	if (w->dir < 0 && w->pos == 0)
		return NVS_WALK_FIRST;
	return -1;
}

/* What the move away from end @e did. */
static enum nvs_walk_outcome outcome(const struct nvs_walk *w, int e)
{
	bool last = e == NVS_WALK_LAST;
	size_t turn = last ? w->n - 1 : 0, behind = last ? w->n - 2 : 1;

	if (w->dir == (last ? -1 : 1) && w->pos == turn)
		return NVS_WALK_REPEAT;
	if (w->dir == (last ? -1 : 1) && w->pos == behind)
		return NVS_WALK_BACK;
	if (e == NVS_WALK_LAST && w->dir > 0 && w->pos == 0)
		return NVS_WALK_RESTART;
	return NVS_WALK_OTHER;
}

bool nvs__walk_step(struct nvs_walk *w, unsigned layer)
{
	int e = end_here(w);
	struct nvs_walk_end *h;

	w->ended = -1;
	if (!move(w, layer))
		return false;
	if (e >= 0) {
		h = &w->end[e];
		w->ended = (int)outcome(w, e);
		h->seen[h->count % NVS_WALK_HISTORY] = (unsigned char)w->ended;
		h->count++;
	}
	return true;
}

/* The @k-th oldest of the @len outcomes remembered at end @h. */
static enum nvs_walk_outcome seen(const struct nvs_walk_end *h, unsigned len,
				  unsigned k)
{
	return (enum nvs_walk_outcome)
		h->seen[(h->count - len + k) % NVS_WALK_HISTORY];
}

enum nvs_walk_outcome nvs__walk_expect(const struct nvs_walk *w, int e)
{
	const struct nvs_walk_end *h = &w->end[e];
	unsigned len =
		h->count < NVS_WALK_HISTORY ? h->count : NVS_WALK_HISTORY;

	if (!len)
		return NVS_WALK_REPEAT;
	/* The shortest period the remembered outcomes repeat with; one
	 * as long as what is remembered is vacuous, so a short history
	 * is taken as one cycle, but a full one must show a repeat. */
	for (unsigned p = 1; p <= len; p++) {
		bool ok = true;
		if (len == NVS_WALK_HISTORY && p > NVS_WALK_HISTORY / 2)
			break;
		for (unsigned k = p; ok && k < len; k++)
			ok = seen(h, len, k) == seen(h, len, k - p);
		if (ok)
			return seen(h, len, len - p);
	}
	return NVS_WALK_OTHER;
}

bool nvs__walk_next(const struct nvs_walk *w, unsigned *layer)
{
	int e = end_here(w);
	long i = (long)w->pos + w->dir;

	if (!w->placed)
		return false;
	if (e >= 0) {
		switch (nvs__walk_expect(w, e)) {
		case NVS_WALK_REPEAT:
			i = (long)w->pos;
			break;
		case NVS_WALK_BACK:
			i = (long)w->pos - w->dir;
			break;
		case NVS_WALK_RESTART:
			i = 0;
			break;
		default:
			return false;
		}
	}
	if (i < 0 || (size_t)i >= w->n)
		return false;
	*layer = w->seq[i];
	return true;
}

void nvs__walk_ahead_begin(struct nvs_walk *w, struct nvs_walk_ahead *it)
{
	it->done = !w->placed;
	it->next = (long)w->pos + w->dir;
	it->dir = w->dir;
	it->crossed = false;
	if (it->done)
		return;
	if (++w->gen == 0) { /* wrapped: old marks could match again */
		memset(w->mark, 0, w->n * sizeof(*w->mark));
		w->gen = 1;
	}
	w->mark[w->first[w->pos]] = w->gen; /* not the current layer */
}

/* The listing ran off an end: go on as the walk expects there, once.
 * After a turn the entry at the end is listed already or is the current
 * layer (marked), so the listing just goes back from it. */
static bool cross(const struct nvs_walk *w, struct nvs_walk_ahead *it)
{
	int e = it->dir > 0 ? NVS_WALK_LAST : NVS_WALK_FIRST;

	if (it->crossed || w->n < 2)
		return false;
	switch (nvs__walk_expect(w, e)) {
	case NVS_WALK_REPEAT:
	case NVS_WALK_BACK:
		it->next = e == NVS_WALK_LAST ? (long)w->n - 1 : 0;
		it->dir = -it->dir;
		break;
	case NVS_WALK_RESTART:
		it->next = 0;
		it->dir = 1;
		break;
	default:
		return false;
	}
	it->crossed = true;
	return true;
}

bool nvs__walk_ahead_next(struct nvs_walk *w, struct nvs_walk_ahead *it,
			  unsigned *layer)
{
	while (!it->done) {
		long i = it->next;
		unsigned f;

		if (i < 0 || (size_t)i >= w->n) {
			it->done = !cross(w, it);
			continue;
		}
		it->next += it->dir;
		f = w->first[i];
		if (w->mark[f] == w->gen)
			continue;
		w->mark[f] = w->gen;
		*layer = w->seq[i];
		return true;
	}
	return false;
}
