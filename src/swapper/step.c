// SPDX-License-Identifier: MIT
/*
 * Steps (see step.h): nvs_swapper_step_begin/open/end/undo, and the
 * hooks by which release, write, clear and unregister keep an undoable
 * step's old versions.
 */
#include "swapper/step.h"
#include "internal/alloc.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "swapper/io.h"
#include "swapper/persist.h"
#include "swapper/registry.h"
#include "swapper/room.h"
#include "swapper/space.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

void nvs__step_touch(struct nvs_swapper *s, struct tensor *t)
{
	(void)s;
	if (t->touched)
		return;
	t->touched = true;
	t->kept_on_disk = t->on_disk;
	t->kept_backed = t->backed;
	t->kept_crc = t->crc;
}

int nvs__step_diverge(struct nvs_swapper *s, struct tensor *t)
{
	size_t bytes = t->nexts * sizeof(*t->ext), placed = 0;
	char why[NVS_ERRMSG_MAX];
	struct nvs_extent *kept;
	int ret;

	nvs__step_touch(s, t);
	if (t->diverged)
		return 0;
	if (!t->on_disk) { /* no value on disk to keep: in place */
		t->diverged = true;
		return 0;
	}
	kept = nvs__malloc(bytes);
	if (!kept)
		return nvs__err(-ENOMEM,
				"nvswap: tensor %" PRIu64 ": out of memory "
				"keeping its value at the step's open",
				t->id);
	memcpy(kept, t->ext, bytes);
	ret = nvs__space_place(s->space, s->npaths, s->stripe, t->nbytes,
			       t->ext, t->nexts, &placed);
	if (ret < 0) {
		placed = 0; /* nothing stays allocated */
		snprintf(why, sizeof(why), "%s", nvs_strerror(-ret));
	} else if (placed != t->nexts) { /* the same size, the same shape */
		ret = -EIO;
		snprintf(why, sizeof(why), "its placement changed shape");
	} else if ((ret = nvs__grow_files(s)) < 0 ||
		   (s->pers && (ret = nvs__persist_placed(s, t)) < 0)) {
		snprintf(why, sizeof(why), "%s", nvs_last_error());
	}
	if (ret < 0) {
		if (placed)
			nvs__space_release(s->space, t->ext, placed);
		memcpy(t->ext, kept, bytes);
		nvs__free(kept);
		return nvs__err(ret,
				"nvswap: tensor %" PRIu64 ": no room to keep "
				"its value at the step's open beside the new "
				"one: %s",
				t->id, why);
	}
	t->kept = kept;
	t->diverged = t->fresh = true;
	return 1;
}

/* The placement @ext (@n extents, written) is nobody's any more. Its
 * blocks are punched when @punch (a removal); a step's end or undo
 * leaves them to the next step's writes, which reuse the space. */
static void give_back(struct nvs_swapper *s, const struct nvs_extent *ext,
		      size_t n, bool punch)
{
	if (s->pers) {
		nvs__persist_uncurrent(s, ext);
		return;
	}
	if (punch)
		nvs__punch_extents(s, ext, n);
	nvs__space_release(s->space, ext, n);
}

static void clear_step(struct tensor *t)
{
	nvs__free(t->kept);
	t->kept = NULL;
	t->touched = t->diverged = t->fresh = false;
}

void nvs__step_forget(struct nvs_swapper *s, struct tensor *t)
{
	if (t->kept)
		give_back(s, t->kept, t->nexts, true);
	clear_step(t);
}

/* The step ends: the new version stays. A tensor moved whose new
 * placement no write went to (its write could not start: the data is
 * resident and dirty; or it was cleared) keeps the old placement
 * instead, the only one written. */
static void keep_new(struct nvs_swapper *s, struct tensor *t)
{
	if (t->kept && t->fresh) {
		give_back(s, t->ext, t->nexts, false);
		memcpy(t->ext, t->kept, t->nexts * sizeof(*t->ext));
		if (!t->on_disk)
			t->stale = true; /* cleared: punched at removal */
	} else if (t->kept) {
		give_back(s, t->kept, t->nexts, false);
	}
	clear_step(t);
}

/* The first tensor in [@lo, @hi] that is dirty or being written, and how
 * many are. */
static struct tensor *unwritten(struct nvs_swapper *s, uint64_t lo, uint64_t hi,
				unsigned *n)
{
	struct tensor *t, *tmp, *first = NULL;

	*n = 0;
	HASH_ITER(hh, s->table, t, tmp)
	{
		if (t->id < lo || t->id > hi)
			continue;
		if ((t->state == NVS_TENSOR_RESIDENT && t->dirty) ||
		    t->state == NVS_TENSOR_WRITING) {
			if (!first)
				first = t;
			(*n)++;
		}
	}
	return first;
}

static int open_locked(struct nvs_swapper *s, const char *name, unsigned flags,
		       uint64_t lo, uint64_t hi)
{
	if (flags & NVS_STEP_UNDOABLE) {
		struct tensor *t;
		unsigned n;

		if (s->step[0])
			return nvs__err(-EBUSY,
					"nvs_swapper_step_open: %s is open: "
					"end it before an undoable one",
					s->step);
		if ((t = unwritten(s, lo, hi, &n)))
			return nvs__err(-EBUSY,
					"nvs_swapper_step_open: tensor "
					"%" PRIu64 " is %s (%u in all): an "
					"undoable step needs every value at "
					"its open on disk; write them back "
					"and wait first",
					t->id,
					t->state == NVS_TENSOR_WRITING
						? "being written"
						: "dirty",
					n);
		s->undoable = true;
		s->step_gen++;
		s->undo_min = lo;
		s->undo_max = hi;
	}
	snprintf(s->step, sizeof(s->step), "%s",
		 name && *name ? name : "a step");
	return 0;
}

int nvs_swapper_step_open(struct nvs_swapper *s, const char *name,
			  unsigned flags, uint64_t id_min, uint64_t id_max)
{
	int ret;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_step_open: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_step_open", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_step_open") < 0)
		return -EROFS;
	if (flags & ~NVS_STEP_UNDOABLE)
		return nvs__err(-EINVAL,
				"nvs_swapper_step_open: unknown flags %#x",
				flags & ~NVS_STEP_UNDOABLE);
	if (id_min > id_max)
		return nvs__err(-EINVAL,
				"nvs_swapper_step_open: ids %" PRIu64
				"..%" PRIu64 " cover nothing",
				id_min, id_max);
	pthread_mutex_lock(&s->lock);
	ret = open_locked(s, name, flags, id_min, id_max);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs_swapper_step_begin(struct nvs_swapper *s, const char *name)
{
	if (!s)
		return nvs__err(-EINVAL,
				"nvs_swapper_step_begin: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_step_begin", "swapper");
	if (nvs__refuse_readonly(s, "nvs_swapper_step_begin") < 0)
		return -EROFS;
	pthread_mutex_lock(&s->lock);
	open_locked(s, name, 0, 0, 0);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int nvs_swapper_step_end(struct nvs_swapper *s)
{
	struct tensor *t, *tmp;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_step_end: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_step_end", "swapper");
	pthread_mutex_lock(&s->lock);
	if (s->undoable) {
		HASH_ITER(hh, s->table, t, tmp)
		{
			keep_new(s, t);
		}
	}
	s->undoable = false;
	s->step[0] = '\0';
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Wait until no tensor the step touched is busy or in flight: 0, or
 * -EBUSY when one is acquired. */
static int quiesce(struct nvs_swapper *s)
{
	for (;;) {
		struct tensor *t, *tmp, *flying = NULL;
		bool busy = false;

		HASH_ITER(hh, s->table, t, tmp)
		{
			if (!t->touched)
				continue;
			if (t->pins)
				return nvs__err(-EBUSY,
						"nvs_swapper_step_undo: tensor "
						"%" PRIu64 " is acquired %u "
						"time(s): nothing was undone",
						t->id, t->pins);
			if (t->busy) {
				busy = true;
				break;
			}
			if (t->on == &s->flight) {
				flying = t;
				break;
			}
		}
		if (busy)
			nvs__wait_change(s);
		else if (flying)
			nvs__collect(s, flying);
		else
			return 0;
	}
}

/* Put @t back as it was at the open (see step.h). */
static void put_back(struct nvs_swapper *s, struct tensor *t)
{
	nvs__tlist_remove(t);
	if (t->buf)
		nvs__buffer_put(s, t);
	t->state = NVS_TENSOR_ON_NVME;
	t->dirty = t->revive = t->redirty = false;
	t->err = 0;
	nvs__free(t->errmsg);
	t->errmsg = NULL;
	if (t->kept) {
		give_back(s, t->ext, t->nexts, false);
		memcpy(t->ext, t->kept, t->nexts * sizeof(*t->ext));
	} else if (t->on_disk && !t->kept_on_disk) {
		t->stale = true; /* the step's write, in place: punch later */
	}
	t->on_disk = t->kept_on_disk;
	t->backed = t->kept_backed;
	t->crc = t->kept_crc;
	clear_step(t);
}

int nvs_swapper_step_undo(struct nvs_swapper *s)
{
	struct tensor *t, *tmp;
	unsigned long gen;
	int ret, n = 0;

	if (!s)
		return nvs__err(-EINVAL, "nvs_swapper_step_undo: NULL swapper");
	NVS__PARENT_ONLY(s, "nvs_swapper_step_undo", "swapper");
	pthread_mutex_lock(&s->lock);
	if (!s->undoable) {
		pthread_mutex_unlock(&s->lock);
		return nvs__err(-EINVAL,
				"nvs_swapper_step_undo: no undoable step is "
				"open (nvs_swapper_step_open with "
				"NVS_STEP_UNDOABLE)");
	}
	gen = s->step_gen;
	ret = quiesce(s);
	if (ret == 0 && (!s->undoable || s->step_gen != gen))
		ret = nvs__err(-EINVAL,
			       "nvs_swapper_step_undo: the step ended (another "
			       "thread) while the undo waited for its I/O");
	if (ret < 0) {
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	HASH_ITER(hh, s->table, t, tmp)
	{
		if (t->touched) {
			put_back(s, t);
			n++;
		}
	}
	if (s->pers && n)
		s->pers->changed = true;
	s->undoable = false;
	s->step[0] = '\0';
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return n;
}
