/* SPDX-License-Identifier: MIT */
/*
 * The aio handle's workers: each owns an engine on its own thread, takes
 * the slices queued to it and cuts them into block_size requests kept
 * queue_depth deep.
 */
#ifndef NVS_AIO_WORKER_H
#define NVS_AIO_WORKER_H

#include "aio/handle_types.h"

/*
 * Cut @op (its offset, nbytes, direct and grain set) over @buf into
 * slices, one per worker at most; the number of slices.
 */
unsigned nvs__slices_plan(struct nvs_aio *h, struct nvs_op *op, char *buf);
/* Queue @s to @w; the worker owns it until the slice is done. */
void nvs__worker_enqueue(struct nvs_worker *w, struct nvs_slice *s);
/* Workers with @backend: memory first, then threads, each of which makes
 * its own engine. On failure nvs_last_error() says why. */
int nvs__workers_create(struct nvs_aio *h, enum nvs_backend backend);
/* Stop and free every worker; they must have nothing in flight. */
void nvs__workers_teardown(struct nvs_aio *h);

#endif
