/* SPDX-License-Identifier: MIT */
/*
 * The handle's open-file cache: path-based ops reuse descriptors instead of
 * opening and closing the file every time (DeepNVMe does the latter). Each
 * use is checked against a fresh stat() of the path, so a file that was
 * replaced or deleted is reopened, never written through a stale
 * descriptor. Fixed capacity, preallocated: no allocation per op.
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_AIO_FILES_H
#define NVS_AIO_FILES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "nvswap/aio.h"

/* One cached file. Fields are read-only while a reference is held, except
 * bfd, which is set once through nvs__files_set_bfd(). */
struct nvs_file {
	uint64_t id; /* unique for the process's life: engines key on it */
	int fd;	     /* O_DIRECT unless the filesystem refused it */
	int bfd;     /* buffered descriptor for unaligned edges, or -1 */
	bool direct;
	struct nvs_dio_align al;
	unsigned max_segments; /* of the disk's queue, 0 = unknown */
};

struct nvs_files;

/* A cache of @cap files; @cap 0 gives *out NULL (caching off). */
int nvs__files_create(unsigned cap, struct nvs_files **out);
/* Close every file. No reference may be held. NULL is a no-op. */
void nvs__files_destroy(struct nvs_files *c);
/*
 * The cached file for @path opened for reading or writing, when it is
 * still the inode @st describes; takes a reference. NULL on a miss (an
 * entry for a replaced file is dropped).
 */
struct nvs_file *nvs__files_get(struct nvs_files *c, const char *path,
				bool write, const struct stat *st);
/*
 * Cache a file just opened; on success the descriptor belongs to the cache
 * and a reference is returned. NULL when the cache is full of files in use
 * or the path is too long: the caller keeps the descriptor.
 */
struct nvs_file *nvs__files_add(struct nvs_files *c, const char *path,
				bool write, const struct stat *st, int fd,
				bool direct, const struct nvs_dio_align *al,
				unsigned max_segments);
/* Give @f its buffered descriptor @bfd (transferred); returns the one to
 * use (another thread may have set one first: @bfd is then closed). */
int nvs__files_set_bfd(struct nvs_files *c, struct nvs_file *f, int bfd);
/* @f's buffered descriptor, or -1 when none was set yet. */
int nvs__files_bfd(struct nvs_files *c, struct nvs_file *f);
/* Drop a reference taken by get or add. */
void nvs__files_release(struct nvs_files *c, struct nvs_file *f);
/* Descriptors closed so far: when it changes, engines drop the files they
 * registered (the kernel would keep closed files open for them). */
uint64_t nvs__files_closes(const struct nvs_files *c);

#endif
