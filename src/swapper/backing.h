/* SPDX-License-Identifier: MIT */
/*
 * File-backed tensors (nvswap/backing.h): the caller's files a swapper
 * reads from, each with the identity it had when added, and a tensor's
 * pieces of them. A tensor reads from its pieces while it is backed and
 * not on_disk (never written since it was registered, or put back by an
 * undo); its first write-back moves it to the swap file. Every function
 * wants the swapper's lock held unless it says otherwise.
 */
#ifndef NVS_SWAPPER_BACKING_H
#define NVS_SWAPPER_BACKING_H

#include "swapper/swapper_impl.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "nvswap/swapper.h"

struct nvs_wfile {
	int fd;
	bool direct;
	char *path; /* as given, for the messages */
	char *real; /* its realpath at the add: what is stat'ed (a relative
		       path would name another file after a chdir) */
	/* At nvs_swapper_add_file(). */
	dev_t dev;
	ino_t ino;
	uint64_t size;
	struct timespec mtime;
	uint64_t head;
	uint32_t head_crc;
};

struct nvs_backing {
	size_t n;
	uint64_t bytes;	   /* the pieces' (what a read takes from files) */
	uint64_t *tickets; /* one per piece, while a read of them is out */
	uint64_t *saved;   /* the tensor's own tickets meanwhile */
	struct nvs_file_piece p[]; /* sorted by at */
};

/* Submit the reads of @t's pieces into @buf (its gaps zeroed first):
 * t->tickets becomes the backing's and t->from_file is set; *@n how many
 * were submitted. 0, or -errno (the sentence names the file and the
 * tensor; the submitted ones must still be waited for). */
int nvs__backing_submit(struct nvs_swapper *s, struct tensor *t, void *buf,
			size_t *n);

/* A read of @t's pieces ended with @err (0: all bytes in; its sentence
 * set otherwise): each file it read checked against its identity at add
 * (metadata; and, when the read failed, its head's CRC32C): a changed
 * one makes the result -ESTALE naming it and the tensor. Returns the
 * result, its sentence set when it is not 0. No lock: @t is busy. */
int nvs__backing_check(struct nvs_swapper *s, struct tensor *t, int err);

/* The read of @t's pieces is over: t->tickets its own again,
 * t->from_file cleared (a no-op when it was not set). Lock held. */
void nvs__backing_done(struct tensor *t);

/* Say which piece of @t the failed ticket @i was, as the swap path's
 * extents are named; returns @err. */
int nvs__backing_failed(const struct nvs_swapper *s, const struct tensor *t,
			size_t i, int err);

/* Free @t's backing (unregister, or a tensor freed). No lock needed. */
void nvs__backing_free(struct nvs_backing *bk);

/* Close and free every added file (destroy). No lock needed. */
void nvs__files_close(struct nvs_swapper *s);

#endif
