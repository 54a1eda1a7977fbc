/* SPDX-License-Identifier: MIT */
/*
 * The aio handle's op slots: taking one at submit, recording an op's first
 * failure, completing it when its last slice is done, and collecting it
 * (nvs_aio_wait, nvs_aio_wait_op, nvs_aio_poll_op).
 */
#ifndef NVS_AIO_TICKET_H
#define NVS_AIO_TICKET_H

#include "aio/handle_types.h"

/* How the op behind a slot is collected. */
enum nvs_op_kind {
	NVS_OP_UNTRACKED, /* by nvs_aio_wait, which counts it */
	NVS_OP_TICKET,	  /* by its ticket, or by nvs_aio_wait */
	NVS_OP_OWNED,	  /* by its ticket only: nvs_aio_submit_wait's op,
			     which another thread's wait must not take */
};

/* Take a free op slot (waiting for one while ops are in flight), counted
 * in flight; a ticketed or owned one stays until collected. 0 or
 * -EAGAIN. */
int nvs__op_get_slot(struct nvs_aio *h, enum nvs_op_kind kind,
		     struct nvs_op **out);
/* Record @err for @op unless it already failed. Any thread. */
void nvs__op_fail(struct nvs_aio *h, struct nvs_op *op, int err,
		  const char *msg);
/* A slice of @op is finished; the last one closes and completes the op. */
void nvs__op_slice_done(struct nvs_aio *h, struct nvs_op *op);

#endif
