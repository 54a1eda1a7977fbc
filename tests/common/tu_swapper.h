/* SPDX-License-Identifier: MIT */
/* Test helpers on the swap manager: the options its tests start from. */
#ifndef NVS_TU_SWAPPER_H
#define NVS_TU_SWAPPER_H

#include <criterion/criterion.h>

#include "nvswap/swapper.h"
#include "testutil.h"

/* nvs_swapper_opts_init() with one path, tu_dir(), and @count buffers of
 * @size bytes, at queue depth 8. */
static inline void tu_swapper_opts(struct nvs_swapper_opts *o, size_t size,
				   unsigned count)
{
	nvs_swapper_opts_init(o);
	o->npaths = 1;
	o->nvme_paths[0] = tu_dir();
	o->buffer_size = size;
	o->buffer_count = count;
	o->aio.queue_depth = 8;
}

/* A set made for a test, saved and closed: @s checkpointed as @tag, the
 * checkpoint waited for, @s destroyed. */
static inline void tu_swapper_commit_close(struct nvs_swapper *s,
					   const char *tag)
{
	cr_assert_gt(nvs_swapper_checkpoint(s, tag), 0, "%s", nvs_last_error());
	cr_assert_gt(nvs_swapper_checkpoint_wait(s), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

#endif
