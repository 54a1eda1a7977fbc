/* SPDX-License-Identifier: MIT */
/*
 * Steps (nvs_swapper_step_open()): an update of many tensors that a
 * checkpoint must not save in part, and the undoable kind, which keeps
 * every changed tensor's value at the open until the step ends.
 *
 * Undoable: a tensor changed in the step is "touched" (released dirty,
 * written or cleared). Its first write or clear "diverges" it: when its
 * placement holds data, a new placement is made for the new version and
 * the old one kept (t->kept); else it is written in place. The end gives
 * the kept placements back; an undo gives the new ones back, puts the
 * kept ones in place and drops the touched tensors' buffers.
 *
 * Every function wants the swapper's lock held.
 */
#ifndef NVS_SWAPPER_STEP_H
#define NVS_SWAPPER_STEP_H

#include "swapper/swapper_impl.h"

#include <stdbool.h>

/* An undoable step is open and covers @t. */
static inline bool nvs__step_covers(const struct nvs_swapper *s,
				    const struct tensor *t)
{
	return s->undoable && t->id >= s->undo_min && t->id <= s->undo_max;
}

/* @t is released dirty (or about to be changed) in an undoable step. */
void nvs__step_touch(struct nvs_swapper *s, struct tensor *t);

/* Before @t is written or cleared in an undoable step: keep its value
 * at the open (see above). 1 when it moved to a new placement, 0 when it
 * stays (diverged already, or nothing to keep), or -errno (no room, out
 * of memory: nothing changed, the sentence set). */
int nvs__step_diverge(struct nvs_swapper *s, struct tensor *t);

/* @t is being removed: give its kept placement back, if any. */
void nvs__step_forget(struct nvs_swapper *s, struct tensor *t);

#endif
