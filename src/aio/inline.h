/* SPDX-License-Identifier: MIT */
/*
 * Small synchronous ops on the caller's thread (see inline.c): the fast
 * path of nvs_aio_submit_wait() and the sync DeepNVMe calls.
 */
#ifndef NVS_AIO_INLINE_H
#define NVS_AIO_INLINE_H

#include "aio/handle_types.h"

/* nvs_aio_opts.inline_max when left 0: one request's worth, at most
 * 64 KiB. */
uint32_t nvs__inline_default(const struct nvs_aio_opts *o);
/* Whether @io on its resolved target @t can run on the caller's thread. */
bool nvs__inline_fits(const struct nvs_aio *h, const struct nvs_aio_io *io,
		      const struct nvs_target *t);
/*
 * Take the handle for an inline op when nothing else is in flight (and,
 * unless @alone, no finished op waits to be collected, so a sync call's
 * count stays exactly 1). true: the op is counted in flight until
 * nvs__inline_run() ends.
 */
bool nvs__inline_begin(struct nvs_aio *h, bool alone);
/* Do @io on @t here; 0 or -errno with a sentence. Ends what begin took. */
int nvs__inline_run(struct nvs_aio *h, const struct nvs_aio_io *io,
		    const char *path, const struct nvs_target *t);

#endif
