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

struct nvs_target {
	int fd, bfd;
	bool own_fd, own_bfd, direct;
	struct nvs_dio_align al;
	unsigned max_segments; /* of the disk's queue, 0 = unknown */
	struct nvs_file *file; /* from the cache: fd and bfd belong to it */
	unsigned closed;       /* idle cached files this op closed */
};

#define NVS__SUBMIT_ERR(err, io, what, ...)                                    \
	nvs__err((err), "nvs_aio %s %s offset %" PRId64 " length %zu: " what,  \
		 nvs__aio_opname((io)->opcode == NVS_AIO_WRITE), path,         \
		 (io)->offset, (io)->nbytes, __VA_ARGS__)

/*
 * Open or check the descriptor for @io (@path names it in errors), learn
 * its alignment and size, check a read's range, and prepare a write's
 * blocks. 0 or -errno with a sentence; close @t with nvs__target_close()
 * either way.
 */
int nvs__target_open(struct nvs_aio *h, const struct nvs_aio_io *io,
		     const char *path, struct nvs_target *t);
/* Buffered descriptor on the same file, for the unaligned edges. */
int nvs__target_open_buffered(struct nvs_aio *h, const struct nvs_aio_io *io,
			      const char *path, struct nvs_target *t);
/* Release what @t holds: the cache reference, the descriptors it owns. */
void nvs__target_close(struct nvs_aio *h, struct nvs_target *t);
/* Body boundaries for a direct file: a page or the offset alignment. */
uint32_t nvs__target_edge_grain(const struct nvs_target *t);
/* Whether @n bytes at @off on @t have unaligned edges to do buffered. */
bool nvs__target_needs_edges(const struct nvs_target *t, int64_t off, size_t n);
/* Whether unpinned memory goes through the pinned bounce slots on @t. */
bool nvs__target_stage_unpinned(const struct nvs_aio *h,
				const struct nvs_target *t);

#endif
