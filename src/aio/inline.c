// SPDX-License-Identifier: MIT
/*
 * Small synchronous ops on the caller's thread. A worker hand-off costs a
 * wake-up each way (about six futex calls, tens of microseconds on a busy
 * 2-vCPU VM), more than a 4 KiB read takes on a fast disk. So a
 * synchronous op that would be one request on one worker, with nothing
 * else in flight, is done here with pread/pwrite on its resolved target:
 * what fio's psync engine does. Everything a worker adds (bounce slots for
 * misaligned memory, buffered edges, staging) sends the op to the workers.
 */
#include "aio/inline.h"
#include "aio/files.h"
#include "aio/target.h"
#include "buffers/pinned.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

/*
 * Measured on the 2-vCPU VM (bench/small_ops.py, RESULTS.md): up to 64 KiB
 * the hand-off costs more than it buys; from 128 KiB an io_uring request
 * on a worker beat pread on the caller's thread by 1.3-1.45x.
 */
uint32_t nvs__inline_default(const struct nvs_aio_opts *o)
{
	return NVS_MIN(o->block_size, 64u << 10);
}

bool nvs__inline_fits(const struct nvs_aio *h, const struct nvs_aio_io *io,
		      const struct nvs_target *t)
{
	if (h->plan || io->nbytes == 0 || io->nbytes > h->opts.inline_max ||
	    t->edges)
		return false;
	if (!t->direct)
		return true;
	if ((uintptr_t)io->buf % t->al.mem_align)
		return false; /* a worker bounces it */
	if (nvs__target_stage_unpinned(h, t) &&
	    !nvs_pinned_contains(io->buf, io->nbytes) &&
	    (h->opts.staging == NVS_STAGE_UNPINNED ||
	     io->nbytes / 4096 > t->max_segments))
		return false; /* more pages than the disk takes at once */
	return true;
}

bool nvs__inline_begin(struct nvs_aio *h, bool alone)
{
	bool idle;

	pthread_mutex_lock(&h->lock);
	idle = h->inflight == 0 &&
	       (alone || (h->finished == 0 && h->tickets_done == 0));
	if (idle)
		/* nvs_aio_wait in other threads waits for it */
		nvs__aio_inflight_add(h);
	pthread_mutex_unlock(&h->lock);
	return idle;
}

static void inline_end(struct nvs_aio *h, const struct nvs_aio_io *io, bool ok)
{
	bool write = io->opcode == NVS_AIO_WRITE;

	nvs__aio_count(&h->c.inline_ops, 1);
	nvs__aio_count(&h->c.ops_completed, 1);
	if (!ok)
		nvs__aio_count(&h->c.ops_failed, 1);
	else
		nvs__aio_count(write ? &h->c.bytes_written : &h->c.bytes_read,
			       io->nbytes);
	pthread_mutex_lock(&h->lock);
	nvs__aio_inflight_done(h);
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

int nvs__inline_run(struct nvs_aio *h, const struct nvs_aio_io *io,
		    const char *path, const struct nvs_target *t)
{
	bool write = io->opcode == NVS_AIO_WRITE;
	const char *more = "";
	ssize_t n;
	int err = 0;

	n = nvs__pio_full(t->fd, io->buf, io->nbytes, (off_t)io->offset, write);
	if (n < 0)
		err = (int)n;
	else if ((size_t)n < io->nbytes)
		err = -EIO; /* a read met the end: truncated meanwhile */
	/* As a worker's write: a full disk may be held full by our own
	 * descriptors of deleted files; closing them lets a retry find it. */
	if (write && (err == -ENOSPC || err == -EDQUOT) &&
	    nvs__files_prune(h->files))
		more = " (descriptors of deleted files closed: a retry may "
		       "find space)";
	inline_end(h, io, err == 0);
	if (err == -EIO && n >= 0)
		return NVS__SUBMIT_ERR(err, io,
				       "short read on the caller's thread: "
				       "%zd of %zu bytes (file truncated "
				       "meanwhile?)",
				       n, io->nbytes);
	if (err)
		return NVS__SUBMIT_ERR(
			err, io, "%s on the caller's thread: %s%s",
			write ? "pwrite" : "pread", nvs_strerror(err), more);
	return 0;
}
