/* SPDX-License-Identifier: MIT */
/*
 * The swapper's nvme_paths, each named once; how a persistent set records
 * them (relative to its first path, so that a copy of the tree opens);
 * and its swap files' refusals.
 */
#ifndef NVS_SWAPPER_PATHS_H
#define NVS_SWAPPER_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * -EINVAL, naming both spellings, when two of @paths are the same
 * directory (same device and inode: "/x" and "/x/", a symlink, a bind
 * mount); else 0. A path that cannot be stat'ed is left to the open that
 * follows, which says why.
 */
int nvs__paths_distinct(const char *const *paths, unsigned n);

/*
 * How a persistent set records path @i of @real (the real paths of its
 * nvme_paths; @real[0] is the set's root, where its manifests live): "."
 * for path 0; the path relative to @real[0] when it is on the same
 * filesystem (so a copy of the tree, "cp -a" or a restored backup, opens
 * where it lands); the absolute path when it is on another filesystem.
 * A new string in *@out (nvs__free it). 0, -ENOMEM, or -errno of stat
 * (the sentence names the path).
 */
int nvs__paths_record(const char *const *real, unsigned i, char **out);

/*
 * Recorded path @rec as an absolute path into @out (@cap bytes): an
 * absolute one as it is, a relative one joined to @root (a real path, so
 * "." and ".." are resolved by name). 0 or -ENAMETOOLONG.
 */
int nvs__paths_resolve(const char *rec, const char *root, char *out,
		       size_t cap);

/*
 * Whether the @n paths a manifest records (@rec) name the real paths
 * @real the set is opened with; else -EINVAL with a sentence that starts
 * with @who, names the manifest (@where) and the path, and says how to
 * move a set (nvswap-fsck --relocate OLD=NEW with the exact values).
 */
int nvs__paths_match(const char *who, const char *where, const char *const *rec,
		     const char *const *real, unsigned n);

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
