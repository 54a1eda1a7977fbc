// SPDX-License-Identifier: MIT
/*
 * The aio handle's op slots and tickets. A slot is taken at submit and
 * counted in flight; its last slice completes it, into the handle's
 * untracked count or, for a ticket, into a done slot that stays until
 * nvs_aio_wait_op, nvs_aio_poll_op or nvs_aio_wait collects it.
 */
#include "aio/ticket.h"
#include "aio/target.h"
#include "gpu/gds.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void op_free_locked(struct nvs_aio *h, struct nvs_op *op)
{
	op->state = NVS_OP_FREE;
	op->gen = (op->gen + 1) & 0xfffffffu;
	if (op->gen == 0)
		op->gen = 1;
	op->next_free = h->free_ops;
	h->free_ops = op;
}

void nvs__op_fail(struct nvs_aio *h, struct nvs_op *op, int err,
		  const char *msg)
{
	pthread_mutex_lock(&h->lock);
	if (!op->err) {
		op->err = err;
		snprintf(op->msg, sizeof(op->msg), "%s", msg);
	}
	pthread_mutex_unlock(&h->lock);
}

static void op_finish_locked(struct nvs_aio *h, struct nvs_op *op)
{
	nvs__aio_inflight_done(h);
	nvs__aio_count(&h->c.ops_completed, 1);
	if (op->err)
		nvs__aio_count(&h->c.ops_failed, 1);
	else if (op->write)
		nvs__aio_count(&h->c.bytes_written, op->nbytes);
	else
		nvs__aio_count(&h->c.bytes_read, op->nbytes);
	if (!op->err && op->mem.device >= 0)
		nvs__aio_count(op->gds ? &h->c.gds_bytes : &h->c.device_bytes,
			       op->nbytes);
	if (op->ticket) {
		op->state = NVS_OP_DONE;
		if (op->owned)
			h->owned_done++;
		else
			h->tickets_done++;
	} else {
		h->finished++;
		if (op->err && (!h->first_err || op->seq < h->first_seq)) {
			h->first_err = op->err;
			h->first_seq = op->seq;
			memcpy(h->first_msg, op->msg, sizeof(h->first_msg));
		}
		op_free_locked(h, op);
	}
	pthread_cond_broadcast(&h->cond);
}

/* A slice of @op is finished; the last one closes and completes the op. */
void nvs__op_slice_done(struct nvs_aio *h, struct nvs_op *op)
{
	if (atomic_fetch_sub_explicit(&op->slices_left, 1,
				      memory_order_acq_rel) != 1)
		return;
	nvs__gds_handle_close(op->gds_fh);
	op->gds_fh = NULL;
	nvs__target_close(h, &op->t);
	pthread_mutex_lock(&h->lock);
	op_finish_locked(h, op);
	pthread_mutex_unlock(&h->lock);
}

int nvs__op_get_slot(struct nvs_aio *h, enum nvs_op_kind kind,
		     struct nvs_op **out)
{
	struct nvs_op *op;

	pthread_mutex_lock(&h->lock);
	while (!h->free_ops) {
		if (h->inflight == 0 && h->owned_done == 0) {
			pthread_mutex_unlock(&h->lock);
			return nvs__err(-EAGAIN,
					"nvs_aio_submit: all %u op slots hold "
					"finished tickets nobody collected",
					h->nops);
		}
		pthread_cond_wait(&h->cond, &h->lock);
	}
	op = h->free_ops;
	h->free_ops = op->next_free;
	op->state = NVS_OP_RUNNING;
	op->ticket = kind != NVS_OP_UNTRACKED;
	op->owned = kind == NVS_OP_OWNED;
	op->err = 0;
	op->msg[0] = '\0';
	op->seq = h->next_seq++;
	nvs__aio_inflight_add(h);
	*out = op;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

/* Collect every finished op; the caller holds h->lock, nothing in flight. */
static int collect_all_locked(struct nvs_aio *h, char *msg)
{
	unsigned n = h->finished;
	int err = h->first_err;
	uint64_t seq = h->first_seq;

	if (err)
		memcpy(msg, h->first_msg, NVS_ERRMSG_MAX);
	for (unsigned i = 0; h->tickets_done && i < h->nops; i++) {
		struct nvs_op *op = &h->ops[i];
		if (op->state != NVS_OP_DONE || op->owned)
			continue;
		n++;
		if (op->err && (!err || op->seq < seq)) {
			err = op->err;
			seq = op->seq;
			memcpy(msg, op->msg, NVS_ERRMSG_MAX);
		}
		h->tickets_done--;
		op_free_locked(h, op);
	}
	h->finished = 0;
	h->first_err = 0;
	pthread_cond_broadcast(&h->cond);
	return err ? err : (int)NVS_MIN(n, (unsigned)INT_MAX);
}

int nvs_aio_wait(struct nvs_aio *h)
{
	char msg[NVS_ERRMSG_MAX];
	int ret;

	if (!h)
		return nvs__err(-EINVAL, "nvs_aio_wait: handle is NULL");
	NVS__PARENT_ONLY(h, "nvs_aio_wait", "handle");
	pthread_mutex_lock(&h->lock);
	while (h->inflight > 0)
		pthread_cond_wait(&h->cond, &h->lock);
	ret = collect_all_locked(h, msg);
	pthread_mutex_unlock(&h->lock);
	if (ret < 0)
		nvs__err_set(ret, msg);
	return ret;
}

static int ticket_op(struct nvs_aio *h, uint64_t id, struct nvs_op **out)
{
	uint64_t slot = id & NVS_OP_SLOT_MASK;
	struct nvs_op *op;

	if (slot >= h->nops)
		return -ENOENT;
	op = &h->ops[slot];
	if (op->gen != (uint32_t)(id >> NVS_OP_SLOT_BITS) ||
	    op->state == NVS_OP_FREE || !op->ticket)
		return -ENOENT;
	*out = op;
	return 0;
}

static int collect_op(struct nvs_aio *h, uint64_t id, bool block,
		      const char *call)
{
	char msg[NVS_ERRMSG_MAX];
	struct nvs_op *op;
	int ret;

	if (!h)
		return nvs__err(-EINVAL, "%s: handle is NULL", call);
	NVS__PARENT_ONLY(h, call, "handle");
	pthread_mutex_lock(&h->lock);
	for (;;) {
		ret = ticket_op(h, id, &op);
		if (ret < 0 || op->state == NVS_OP_DONE)
			break;
		if (!block) {
			ret = -EINPROGRESS;
			break;
		}
		pthread_cond_wait(&h->cond, &h->lock);
	}
	if (ret == 0) {
		ret = op->err;
		if (ret)
			memcpy(msg, op->msg, sizeof(msg));
		if (op->owned)
			h->owned_done--;
		else
			h->tickets_done--;
		op_free_locked(h, op);
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	if (ret == -ENOENT)
		return nvs__err(ret,
				"%s: no op behind ticket %#" PRIx64
				" (unknown, or already collected)",
				call, id);
	if (ret < 0 && ret != -EINPROGRESS)
		nvs__err_set(ret, msg);
	return ret;
}

int nvs_aio_wait_op(struct nvs_aio *h, uint64_t op_id)
{
	return collect_op(h, op_id, true, "nvs_aio_wait_op");
}

int nvs_aio_poll_op(struct nvs_aio *h, uint64_t op_id)
{
	return collect_op(h, op_id, false, "nvs_aio_poll_op");
}
