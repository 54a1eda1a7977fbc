/* SPDX-License-Identifier: MIT */
/*
 * The aio handle's op slots: taking one at submit, recording an op's first
 * failure, completing it when its last slice is done, and collecting it
 * (nvs_aio_wait, nvs_aio_wait_op, nvs_aio_poll_op).
 */
#ifndef NVS_AIO_TICKET_H
#define NVS_AIO_TICKET_H

#include "aio/handle_types.h"

/* Take a free op slot (waiting for one while ops are in flight), counted
 * in flight; a ticketed one stays until collected. 0 or -EAGAIN. */
int nvs__op_get_slot(struct nvs_aio *h, bool ticket, struct nvs_op **out);
/* Record @err for @op unless it already failed. Any thread. */
void nvs__op_fail(struct nvs_aio *h, struct nvs_op *op, int err,
		  const char *msg);
/* A slice of @op is finished; the last one closes and completes the op. */
void nvs__op_slice_done(struct nvs_aio *h, struct nvs_op *op);

#endif
