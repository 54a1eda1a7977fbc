/* SPDX-License-Identifier: MIT */
/* The swapper's nvme_paths, each named once, and its swap files' refusals. */
#ifndef NVS_SWAPPER_PATHS_H
#define NVS_SWAPPER_PATHS_H

#include <stdbool.h>
#include <stdint.h>

/*
 * -EINVAL, naming both spellings, when two of @paths are the same
 * directory (same device and inode: "/x" and "/x/", a symlink, a bind
 * mount); else 0. A path that cannot be stat'ed is left to the open that
 * follows, which says why.
 */
int nvs__paths_distinct(const char *const *paths, unsigned n);

/*
 * The handle refused to queue I/O of tensor @id on swap file @file (@fd)
 * with @err, its sentence in the last error: replace that with the
 * swapper's sentence, naming the tensor and the file, the handle's as the
 * cause. A read past the file's end means the file was truncated behind
 * the swapper's back: -EIO, not the handle's -EINVAL. Returns the -errno.
 */
int nvs__swapfile_refused(int fd, const char *file, uint64_t id, bool write,
			  uint64_t off, uint64_t len, int err);

#endif
