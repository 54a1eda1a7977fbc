/* SPDX-License-Identifier: MIT */
/*
 * What an op runs on: the descriptor of a path (from the open-file cache,
 * else opened here) or of the caller's fd, checked for the op, its O_DIRECT
 * alignment, and a buffered descriptor for the unaligned edges.
 */
#ifndef NVS_AIO_TARGET_H
#define NVS_AIO_TARGET_H

#include "aio/handle_types.h"

#include <inttypes.h>

#define NVS__SUBMIT_ERR(err, io, what, ...)                                    \
	nvs__err((err), "nvs_aio %s %s offset %" PRId64 " length %zu: " what,  \
		 nvs__aio_opname((io)->opcode == NVS_AIO_WRITE), path,         \
		 (io)->offset, (io)->nbytes, __VA_ARGS__)

/*
 * Resolve @io to a ready target, the one call of the submit path: the
 * path's descriptor from the open-file cache (else opened with O_DIRECT,
 * falling back to buffered, and offered to the cache) or the caller's fd,
 * checked for the op; its alignment, a read's range, a write's blocks, and
 * the buffered descriptor when the op has unaligned edges. @path names it
 * in errors. 0 or -errno with a sentence; release @t with
 * nvs__target_close() either way.
 */
int nvs__target_open(struct nvs_aio *h, const struct nvs_aio_io *io,
		     const char *path, struct nvs_target *t);
/* Release what @t holds: the cache reference, the descriptors it owns. */
void nvs__target_close(struct nvs_aio *h, struct nvs_target *t);
/* Body boundaries for a direct file: a page or the offset alignment. */
uint32_t nvs__target_edge_grain(const struct nvs_target *t);
/* Whether unpinned memory goes through the pinned bounce slots on @t. */
bool nvs__target_stage_unpinned(const struct nvs_aio *h,
				const struct nvs_target *t);

#endif
