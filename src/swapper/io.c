// SPDX-License-Identifier: MIT
/*
 * A tensor's I/O (see io.h): submitting its extents, collecting their
 * tickets, the checksum check of a read, and finishing the transition
 * READING -> RESIDENT / ON_NVME or WRITING -> ON_NVME / RESIDENT; a read
 * ahead that nobody acquired given back (nvs__swapper_drop_unused()); and
 * nvs_swapper_read(), a tensor's bytes copied out without a pool buffer.
 */
#include "swapper/io.h"
#include "internal/alloc.h"
#include "swapper/backing.h"
#include "internal/errors.h"
#include "internal/fork.h"
#include "internal/util.h"
#include "swapper/crc32c.h"
#include "swapper/paths.h"
#include "swapper/persist.h"
#include "swapper/registry.h"
#include "swapper/room.h"
#include "swapper/step.h"
#include "swapper/swapper.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

int nvs__submit_extents(struct nvs_swapper *s, struct tensor *t,
			enum nvs_aio_opcode op, void *base, bool padded,
			size_t *n)
{
	int ret = 0;

	*n = 0;
	for (size_t i = 0; i < t->nexts; i++) {
		const struct nvs_extent *e = &t->ext[i];
		struct nvs_aio_io io = {
			.opcode = op,
			.buf = (char *)base + e->tensor_off,
			.nbytes = padded ? nvs__io_len(s, e) : e->len,
			.fd = s->path[e->path].fd,
			.offset = (int64_t)e->off,
		};
		ret = nvs_aio_submit(s->aio, &io, &t->tickets[i]);
		if (ret < 0) {
			ret = nvs__swapfile_refused(
				io.fd, s->path[e->path].file, t->id,
				op == NVS_AIO_WRITE, e->off, io.nbytes, ret);
			break;
		}
		(*n)++;
	}
	s->st.io_ops += *n;
	return ret;
}

/* Say which extent of @t failed and how; returns @err. */
static int io_failed(const struct nvs_swapper *s, const struct tensor *t,
		     size_t i, int err, bool write)
{
	const struct nvs_extent *e = &t->ext[i];

	if (t->from_file)
		return nvs__backing_failed(s, t, i, err);
	return nvs__err(err,
			"nvswap: tensor %" PRIu64 ": %s %" PRIu64
			" bytes %s %s at offset %" PRIu64 " failed: %s",
			t->id, write ? "writing" : "reading", e->len,
			write ? "to" : "from", s->path[e->path].file, e->off,
			nvs_strerror(-err));
}

/* The handle @t's I/O in flight went to: an added file's, or the swap
 * files'. */
static struct nvs_aio *aio_of(const struct nvs_swapper *s,
			      const struct tensor *t)
{
	return t->from_file ? s->faio : s->aio;
}

int nvs__wait_tickets(struct nvs_swapper *s, struct tensor *t, size_t from,
		      size_t to, bool write)
{
	char msg[NVS_ERRMSG_MAX];
	int err = 0;

	for (size_t i = from; i < to; i++) {
		int r = nvs_aio_wait_op(aio_of(s, t), t->tickets[i]);
		if (r < 0 && !err) {
			err = io_failed(s, t, i, r, write);
			snprintf(msg, sizeof(msg), "%s", nvs_last_error());
		}
	}
	if (err)
		nvs__err_set(err, msg);
	return err;
}

int nvs__drain_failed_submit(struct nvs_swapper *s, struct tensor *t, size_t n,
			     bool write, int ret)
{
	char msg[NVS_ERRMSG_MAX];

	snprintf(msg, sizeof(msg), "%s", nvs_last_error());
	pthread_mutex_unlock(&s->lock);
	nvs__wait_tickets(s, t, 0, n, write);
	pthread_mutex_lock(&s->lock);
	return nvs__err_set(ret, msg);
}

void nvs__count_path_bytes(struct nvs_swapper *s, const struct tensor *t,
			   bool write)
{
	for (size_t i = 0; i < t->nexts; i++) {
		uint64_t *c = write ? s->st.path_bytes_written
				    : s->st.path_bytes_read;
		c[t->ext[i].path] += t->ext[i].len;
	}
}

/* The in-flight read or write of @t ended with @err (its sentence in this
 * thread's last error). Lock held. */
static void finish(struct nvs_swapper *s, struct tensor *t, int err)
{
	if (!err && t->io_err)
		err = nvs__err_set(t->io_err, t->io_msg ? t->io_msg
							: "nvswap: I/O failed");
	t->io_err = 0;
	nvs__free(t->io_msg);
	t->io_msg = NULL;
	nvs__tlist_remove(t);
	t->next_ticket = t->ntickets = 0;
	if (t->state == NVS_TENSOR_READING) {
		if (!err && t->from_file) {
			s->st.file_reads++;
			s->st.file_bytes_read += t->bk->bytes;
		}
		nvs__backing_done(t);
		if (err) {
			nvs__buffer_put(s, t);
			t->state = NVS_TENSOR_ON_NVME;
			s->st.io_errors++;
			if (err == -EBADMSG)
				s->st.checksum_errors++;
			nvs__keep_error(t, err, nvs_last_error());
		} else {
			t->state = NVS_TENSOR_RESIDENT;
			t->dirty = false;
			if (t->on_disk) {
				s->st.reads++;
				s->st.bytes_read += t->nbytes;
				nvs__count_path_bytes(s, t, false);
			}
			nvs__tlist_push(&s->lru, t);
		}
	} else {
		/* An acquire may hold the buffer (it was handed out during
		 * the write): then it is on no list until released. */
		bool fenced = t->fence;
		if (t->old_ext)
			nvs__persist_cow_end(s, t, !err);
		if (fenced) /* a checkpoint's: its failure is the commit's */
			nvs__persist_fence_done(s, t, err);
		if (err) {
			/* Nothing is lost: the data stays, still dirty. */
			t->state = NVS_TENSOR_RESIDENT;
			s->st.io_errors++;
			if (!fenced)
				nvs__keep_error(t, err, nvs_last_error());
			if (!t->pins)
				nvs__tlist_push(&s->lru, t);
		} else {
			if (s->pers && !fenced)
				s->pers->changed = true;
			t->dirty = t->redirty;
			t->on_disk = true;
			t->crc = t->wcrc;
			s->st.writes++;
			s->st.bytes_written += t->nbytes;
			nvs__count_path_bytes(s, t, true);
			if (t->revive || t->redirty || t->pins) {
				t->state = NVS_TENSOR_RESIDENT;
				s->st.revived++;
				if (!t->pins)
					nvs__tlist_push(&s->lru, t);
			} else {
				t->state = NVS_TENSOR_ON_NVME;
				nvs__buffer_put(s, t);
			}
		}
		t->revive = false;
		t->redirty = false;
	}
	pthread_cond_broadcast(&s->cond);
}

void nvs__collect(struct nvs_swapper *s, struct tensor *t)
{
	bool reading = t->state == NVS_TENSOR_READING;
	int err;

	t->busy = true;
	pthread_mutex_unlock(&s->lock);
	err = nvs__wait_tickets(s, t, t->next_ticket, t->ntickets, !reading);
	if (reading && t->from_file) {
		err = nvs__backing_check(s, t, err);
	} else if (!err && reading && !t->on_disk) {
		memset(t->buf, 0, t->nbytes);
	} else if (!err && reading && s->checksum) {
		uint32_t crc = nvs__crc32c(0, t->buf, t->nbytes);
		if (crc != t->crc)
			err = nvs__err(-EBADMSG,
				       "nvswap: tensor %" PRIu64
				       ": checksum mismatch reading %s at "
				       "offset %" PRIu64
				       " (crc32c %08x, written %08x); the "
				       "data was not handed out",
				       t->id, s->path[t->ext[0].path].file,
				       t->ext[0].off, crc, t->crc);
	}
	pthread_mutex_lock(&s->lock);
	t->busy = false;
	finish(s, t, err);
}

/* Collect @t's tickets that are in, without waiting: whether all are.
 * Lock held; @t in flight, not busy. */
static bool poll_tickets(struct nvs_swapper *s, struct tensor *t, bool write)
{
	while (t->next_ticket < t->ntickets) {
		int r = nvs_aio_poll_op(aio_of(s, t),
					t->tickets[t->next_ticket]);
		if (r == -EINPROGRESS)
			return false;
		if (r < 0 && !t->io_err) {
			/* The ticket is gone: keep its failure until the
			 * tensor's last one is in. */
			io_failed(s, t, t->next_ticket, r, write);
			t->io_err = r;
			nvs__keep_msg(&t->io_msg, nvs_last_error());
		}
		t->next_ticket++;
	}
	return true;
}

bool nvs__reap_writes(struct nvs_swapper *s)
{
	unsigned before = s->in_use;
	struct tensor *t, *next;

	for (t = s->flight.head; t; t = next) {
		next = t->next;
		if (!t->busy && t->state == NVS_TENSOR_WRITING &&
		    poll_tickets(s, t, true))
			finish(s, t, 0);
	}
	return s->in_use < before;
}

int nvs__swapper_drop_unused(struct nvs_swapper *s, uint64_t id)
{
	struct tensor *t;
	int ret = 0;

	NVS__PARENT_ONLY(s, "nvs_param_acquire_layer", "swapper");
	pthread_mutex_lock(&s->lock);
	t = nvs__tensor_find(s, id);
	if (!t || t->pins) {
		ret = 0; /* gone, or someone acquired it after all */
	} else if (t->busy) {
		ret = -EINPROGRESS; /* another thread collects it */
	} else if (t->state == NVS_TENSOR_READING) {
		ret = -EINPROGRESS;
		if (poll_tickets(s, t, false)) {
			/* Landed as any read does (counted; a failure kept
			 * as a failed prefetch's, for the next acquire), but
			 * unchecked: dropped at once, nobody sees the bytes. */
			finish(s, t, 0);
			if (t->state == NVS_TENSOR_RESIDENT)
				nvs__drop(s, t);
			ret = 1;
		}
	} else if (t->state == NVS_TENSOR_RESIDENT && !t->dirty) {
		nvs__drop(s, t);
		ret = 1;
	} else if (t->state == NVS_TENSOR_WRITING && t->revive && !t->redirty) {
		t->revive = false; /* its buffer back when the write ends */
		ret = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

int nvs__start_write(struct nvs_swapper *s, struct tensor *t)
{
	uint64_t padded = nvs__round_up(t->nbytes, s->align);
	size_t n;
	int ret;

	/* An undoable step keeps the value at its open: write elsewhere. */
	if (nvs__step_covers(s, t) && (ret = nvs__step_diverge(s, t)) < 0)
		return ret;
	t->fresh = false; /* its new place is being written */
	/* A generation keeps its extents: write elsewhere. */
	if (s->pers && (ret = nvs__persist_cow_begin(s, t)) < 0)
		return ret;
	nvs__tlist_remove(t);
	t->state = NVS_TENSOR_WRITING;
	t->redirty = false;
	nvs__tlist_push(&s->flight, t);
	t->busy = true;
	pthread_mutex_unlock(&s->lock);
	/* The padding goes to disk too: make it zeros, not another
	 * tensor's leftovers. */
	memset((char *)t->buf + t->nbytes, 0, padded - t->nbytes);
	t->wcrc = s->checksum ? nvs__crc32c(0, t->buf, t->nbytes) : 0;
	pthread_mutex_lock(&s->lock);
	ret = nvs__submit_extents(s, t, NVS_AIO_WRITE, t->buf, true, &n);
	t->ntickets = n;
	if (ret < 0) {
		ret = nvs__drain_failed_submit(s, t, n, true, ret);
		nvs__tlist_remove(t);
		t->ntickets = 0;
		if (t->old_ext)
			nvs__persist_cow_end(s, t, false);
		t->state = NVS_TENSOR_RESIDENT;
		t->revive = false;
		nvs__tlist_push(&s->lru, t);
		s->st.io_errors++;
	}
	t->busy = false;
	pthread_cond_broadcast(&s->cond);
	return ret;
}

int nvs__start_read(struct nvs_swapper *s, struct tensor *t, void *buf)
{
	size_t n = 0;
	int ret = 0;

	t->buf = buf;
	t->state = NVS_TENSOR_READING;
	nvs__tlist_push(&s->flight, t);
	if (!t->on_disk && !t->backed) {
		s->st.zero_fills++;
		return 0;
	}
	if (!t->on_disk)
		ret = nvs__backing_submit(s, t, buf, &n);
	else
		ret = nvs__submit_extents(s, t, NVS_AIO_READ, buf, true, &n);
	t->ntickets = n;
	if (ret < 0) {
		t->busy = true;
		ret = nvs__drain_failed_submit(s, t, n, false, ret);
		if (t->from_file) /* a truncated file fails the submit */
			ret = nvs__backing_check(s, t, ret);
		t->busy = false;
		nvs__backing_done(t);
		nvs__tlist_remove(t);
		t->ntickets = 0;
		t->state = NVS_TENSOR_ON_NVME;
		nvs__buffer_put(s, t);
		s->st.io_errors++;
	}
	return ret;
}

/* The read of ON_NVME @t straight into @dst, its lock dropped while the
 * tickets are collected (@t busy meanwhile). Lock held on entry and
 * return. */
static int read_out(struct nvs_swapper *s, struct tensor *t, void *dst)
{
	const char *file = s->path[t->ext[0].path].file;
	uint64_t off = t->ext[0].off;
	size_t n = 0;
	int err;

	t->busy = true;
	if (!t->on_disk)
		err = nvs__backing_submit(s, t, dst, &n);
	else
		err = nvs__submit_extents(s, t, NVS_AIO_READ, dst, false, &n);
	if (err < 0) {
		err = nvs__drain_failed_submit(s, t, n, false, err);
		if (t->from_file)
			err = nvs__backing_check(s, t, err);
		nvs__backing_done(t);
		s->st.io_errors++;
		goto out;
	}
	pthread_mutex_unlock(&s->lock);
	err = nvs__wait_tickets(s, t, 0, n, false);
	if (t->from_file) {
		err = nvs__backing_check(s, t, err);
	} else if (!err && s->checksum) {
		uint32_t crc = nvs__crc32c(0, dst, t->nbytes);
		if (crc != t->crc)
			err = nvs__err(-EBADMSG,
				       "nvs_swapper_read: tensor %" PRIu64
				       ": checksum mismatch reading %s at "
				       "offset %" PRIu64
				       " (crc32c %08x, written %08x)",
				       t->id, file, off, crc, t->crc);
	}
	pthread_mutex_lock(&s->lock);
	if (err) {
		s->st.io_errors++;
		if (err == -EBADMSG)
			s->st.checksum_errors++;
	} else if (t->from_file) {
		s->st.file_reads++;
		s->st.file_bytes_read += t->bk->bytes;
	} else {
		s->st.reads++;
		s->st.bytes_read += t->nbytes;
		nvs__count_path_bytes(s, t, false);
	}
	nvs__backing_done(t);
out:
	t->busy = false;
	pthread_cond_broadcast(&s->cond);
	return err;
}

int nvs_swapper_read(struct nvs_swapper *s, uint64_t id, void *dst,
		     size_t nbytes)
{
	static const char call[] = "nvs_swapper_read";
	struct tensor *t = NULL;
	int ret;

	if (!s || (!dst && nbytes))
		return nvs__err(-EINVAL, "%s: NULL %s", call,
				s ? "destination" : "swapper");
	NVS__PARENT_ONLY(s, call, "swapper");
	nvs__share_tick(s); /* the disks' sharers counted again, each second */
	pthread_mutex_lock(&s->lock);
	for (;;) {
		ret = nvs__tensor_idle(s, id, call, &t, NULL);
		if (ret < 0 || t->state != NVS_TENSOR_READING)
			break;
		nvs__collect(s, t); /* a read ahead in flight: let it land */
	}
	if (ret == 0 && t->nbytes > nbytes)
		ret = nvs__err(-ERANGE,
			       "%s: tensor %" PRIu64 " is %zu bytes, more "
			       "than the %zu given",
			       call, id, t->nbytes, nbytes);
	if (ret == 0) {
		if (t->state == NVS_TENSOR_RESIDENT ||
		    t->state == NVS_TENSOR_WRITING)
			memcpy(dst, t->buf, t->nbytes);
		else if (!t->on_disk && !t->backed)
			memset(dst, 0, t->nbytes);
		else
			ret = read_out(s, t, dst);
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}
