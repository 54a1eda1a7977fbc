/* SPDX-License-Identifier: MIT */
/*
 * Who holds a set's lock: the flocks /proc/locks lists on one inode, and
 * a sentence naming their processes. A reader holds a set shared, a
 * writer exclusively, so a refused opener can name the other side.
 */
#ifndef NVS_SWAPPER_FLOCKS_H
#define NVS_SWAPPER_FLOCKS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct nvs__flock {
	long pid;      /* the process that took it (as /proc/locks says) */
	bool write;    /* held exclusively (a writer) */
	bool same_dev; /* the device matched too, not the inode alone */
};

/*
 * The flocks held on inode @ino: up to @cap of them in @out, those on
 * device @dev first (btrfs and overlayfs report another device to stat
 * than to /proc/locks, so an inode number alone may be the lock).
 * Waiters are not holders. Returns how many there are (may be more than
 * @cap), or -errno when /proc/locks cannot be read.
 */
int nvs__flocks_on(dev_t dev, ino_t ino, struct nvs__flock *out, unsigned cap);

/*
 * "process 12" or "processes 12, 34 and 56" (at most @n of @total
 * named, "and N more" after them) into @buf.
 */
void nvs__flocks_name(const struct nvs__flock *f, unsigned n, unsigned total,
		      char *buf, size_t len);

#endif
