/* SPDX-License-Identifier: MIT */
/*
 * Sharing the disks with the processes that hold a flock on one file
 * (nvs_swapper_share_disk()): the swapper's aio handles keep to their
 * share of the queue depth, recounted from /proc/locks at most once a
 * second. Called with the swapper's lock held.
 */
#ifndef NVS_SWAPPER_SHARE_H
#define NVS_SWAPPER_SHARE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct nvs_swapper;

struct nvs__share {
	bool on;
	dev_t dev; /* the locked file's */
	ino_t ino;
	unsigned procs;	  /* holders at the last count (1 at least) */
	uint64_t next_ns; /* when to count again */
};

/* Share with the holders of the flocks on (dev, ino) from now on: counted
 * and applied now. */
void nvs__share_start(struct nvs_swapper *s, dev_t dev, ino_t ino);

/* At a read: counted again when a second has passed since the last. */
void nvs__share_tick(struct nvs_swapper *s);

/* The shares set on the handles again (a handle made since). */
void nvs__share_apply(struct nvs_swapper *s);

#endif
