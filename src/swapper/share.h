/* SPDX-License-Identifier: MIT */
/*
 * Sharing the disks with the processes that hold a flock on one file
 * (nvs_swapper_share_disk()): the swapper's aio handles keep to their
 * share of the queue depth, recounted from /proc/locks at most once a
 * second, never with the swapper's lock held.
 */
#ifndef NVS_SWAPPER_SHARE_H
#define NVS_SWAPPER_SHARE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct nvs_swapper;

struct nvs__share {
	atomic_bool on;		 /* counting (set once dev and ino are) */
	_Atomic uint64_t due_ns; /* the next count; claimed by one thread */
	/* Under the swapper's lock: */
	dev_t dev; /* the locked file's */
	ino_t ino;
	unsigned procs; /* holders at the last count (1 at least) */
};

/* Share with the holders of the flocks on (dev, ino) from now on:
 * counted (from /proc/locks, without the swapper's lock) and applied now;
 * returns the count (1 at least). Takes the swapper's lock. */
unsigned nvs__share_file(struct nvs_swapper *s, dev_t dev, ino_t ino);

/* At a read's entry, WITHOUT the swapper's lock: counted again when a
 * second has passed since the last count, by the one thread that claims
 * it. */
void nvs__share_tick(struct nvs_swapper *s);

/* The shares set on the handles again (a handle made since). With the
 * swapper's lock held. */
void nvs__share_apply(struct nvs_swapper *s);

#endif
