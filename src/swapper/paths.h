/* SPDX-License-Identifier: MIT */
/* The swapper's nvme_paths as directories: each named once. */
#ifndef NVS_SWAPPER_PATHS_H
#define NVS_SWAPPER_PATHS_H

/*
 * -EINVAL, naming both spellings, when two of @paths are the same
 * directory (same device and inode: "/x" and "/x/", a symlink, a bind
 * mount); else 0. A path that cannot be stat'ed is left to the open that
 * follows, which says why.
 */
int nvs__paths_distinct(const char *const *paths, unsigned n);

#endif
