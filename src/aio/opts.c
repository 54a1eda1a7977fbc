// SPDX-License-Identifier: MIT
/*
 * The aio handle's options: nvs_aio_opts_init's defaults (DeepSpeed's), and
 * the check at create that refuses out-of-range values with a sentence
 * naming the option and fills the defaults of those left 0.
 */
#include "aio/opts.h"
#include "aio/choice.h"
#include "aio/handle_types.h"
#include "aio/inline.h"
#include "internal/errors.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#define DEFAULT_MAX_OPS 1024u
#define DEFAULT_OPEN_FILES 64u
#define MAX_OPEN_FILES 4096u

int nvs__aio_opts_check(struct nvs_aio_opts *o, const struct nvs_aio_opts *in,
			enum nvs_backend_reason *why)
{
	nvs_aio_opts_init(o);
	if (in) {
		if (in->size < offsetof(struct nvs_aio_opts, bounce_bytes) ||
		    in->size > sizeof(*in))
			return nvs__err(-EINVAL,
					"nvs_aio_create: opts->size %zu is not "
					"from nvs_aio_opts_init()",
					in->size);
		memcpy(o, in, in->size);
		o->size = sizeof(*o);
	}
	if (o->block_size == 0 || o->block_size % 512 ||
	    o->block_size > NVS_AIO_MAX_BLOCK_SIZE)
		return nvs__err(-EINVAL,
				"nvs_aio_create: block_size %" PRIu32
				" must be a non-zero multiple of 512 up to %u",
				o->block_size, NVS_AIO_MAX_BLOCK_SIZE);
	if (o->queue_depth == 0 || o->queue_depth > NVS_AIO_MAX_QUEUE_DEPTH)
		return nvs__err(-EINVAL,
				"nvs_aio_create: queue_depth %" PRIu32
				" must be 1..%u",
				o->queue_depth, NVS_AIO_MAX_QUEUE_DEPTH);
	if (o->intra_op_parallelism == 0 ||
	    o->intra_op_parallelism > NVS_AIO_MAX_PARALLELISM)
		return nvs__err(-EINVAL,
				"nvs_aio_create: intra_op_parallelism %" PRIu32
				" must be 1..%u",
				o->intra_op_parallelism,
				NVS_AIO_MAX_PARALLELISM);
	if ((unsigned)o->backend > NVS_BACKEND_PSYNC)
		return nvs__err(-EINVAL, "nvs_aio_create: unknown backend %d",
				(int)o->backend);
	if ((unsigned)o->direct > NVS_DIRECT_NEVER)
		return nvs__err(-EINVAL,
				"nvs_aio_create: unknown direct mode %d",
				(int)o->direct);
	if ((unsigned)o->staging > NVS_STAGE_UNPINNED)
		return nvs__err(-EINVAL,
				"nvs_aio_create: unknown staging mode %d",
				(int)o->staging);
	if (o->uring_flags & ~(uint32_t)(NVS_URING_SQPOLL | NVS_URING_IOPOLL |
					 NVS_URING_NO_FIXED))
		return nvs__err(-EINVAL,
				"nvs_aio_create: unknown uring_flags bits "
				"0x%" PRIx32,
				o->uring_flags);
	if (o->max_ops > (1u << NVS_OP_SLOT_BITS))
		return nvs__err(-EINVAL,
				"nvs_aio_create: max_ops %" PRIu32 " above %u",
				o->max_ops, 1u << NVS_OP_SLOT_BITS);
	if (o->max_ops == 0)
		o->max_ops = DEFAULT_MAX_OPS;
	if (o->open_files == 0)
		o->open_files = DEFAULT_OPEN_FILES;
	else if (o->open_files == NVS_AIO_FILES_OFF)
		o->open_files = 0;
	else if (o->open_files > MAX_OPEN_FILES)
		return nvs__err(-EINVAL,
				"nvs_aio_create: open_files %" PRIu32
				" above %u",
				o->open_files, MAX_OPEN_FILES);
	if (o->inline_max == 0)
		o->inline_max = nvs__inline_default(o);
	else if (o->inline_max == NVS_AIO_INLINE_OFF)
		o->inline_max = 0;
	return nvs__backend_choose(&o->backend, why);
}

void nvs_aio_opts_init(struct nvs_aio_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->size = sizeof(*opts);
	opts->block_size = 1u << 20;
	opts->queue_depth = 128;
	opts->single_submit = false;
	opts->overlap_events = false;
	opts->intra_op_parallelism = 1;
	opts->backend = NVS_BACKEND_AUTO;
	opts->direct = NVS_DIRECT_AUTO;
}
