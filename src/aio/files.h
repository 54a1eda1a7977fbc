/* SPDX-License-Identifier: MIT */
/*
 * The handle's open-file cache: path-based ops reuse descriptors instead of
 * opening and closing the file every time (DeepNVMe does the latter). Each
 * use is checked against a fresh stat() of the path, so a file that was
 * replaced or deleted is reopened, never written through a stale
 * descriptor. Fixed capacity, preallocated: no allocation per op; the
 * capacity is cut to an eighth of RLIMIT_NOFILE at create. A descriptor
 * the cache holds never costs the caller a file: on EMFILE/ENFILE the
 * handle closes idle entries and retries; every miss, and ENOSPC at
 * preallocation, first drops idle entries of deleted files (whose blocks
 * are freed only when their last descriptor closes).
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_AIO_FILES_H
#define NVS_AIO_FILES_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "nvswap/aio.h"

/* One cached file. Fields are read-only while a reference is held, except
 * bfd, which is set once through nvs__files_bfd(). */
struct nvs_file {
	uint64_t id; /* unique for the process's life: engines key on it */
	int fd;	     /* O_DIRECT unless the filesystem refused it */
	int bfd;     /* buffered descriptor for unaligned edges, or -1 */
	bool direct;
	struct nvs_dio_align al;
	unsigned max_segments; /* of the disk's queue, 0 = unknown */
};

struct nvs_files;

/* A cache of @cap files, at most RLIMIT_NOFILE / 8 (at least 1); @cap 0
 * gives *out NULL (caching off). */
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
/* @f's buffered descriptor for unaligned edges, opened from @path with
 * @flags on first use and kept; -1 with errno when the open fails. */
int nvs__files_bfd(struct nvs_files *c, struct nvs_file *f, const char *path,
		   int flags);
/*
 * O_DIRECT alignment and the disk queue's max segments for the inode @st
 * describes, open as @fd: remembered for the last few inodes (@c may be
 * NULL: nothing remembered), so a caller's descriptor costs one fstat per
 * op, not a statx and a sysfs read. 0 or -errno (nvs_dio_alignment's).
 */
int nvs__files_describe(struct nvs_files *c, int fd, const struct stat *st,
			struct nvs_dio_align *al, unsigned *max_segments);
/* Drop a reference taken by get or add. */
void nvs__files_release(struct nvs_files *c, struct nvs_file *f);
/* Descriptors closed so far: when it changes, engines drop the files they
 * registered (the kernel would keep closed files open for them). */
uint64_t nvs__files_closes(const struct nvs_files *c);

/* Close every entry no op holds; how many (NULL: 0). */
unsigned nvs__files_close_idle(struct nvs_files *c);
/* Close the idle entries whose file was deleted (no link left), so its
 * blocks go back to the filesystem; how many (NULL: 0). */
unsigned nvs__files_prune(struct nvs_files *c);
/*
 * open(2), but on EMFILE/ENFILE close idle entries of @c (may be NULL)
 * and try once more. Opened by nvs__open_file(), so a FIFO never blocks
 * it; a regular file's or block device's descriptor has O_NONBLOCK
 * cleared again, any other is returned with it set for the caller to
 * refuse by type (nvs__file_type()).
 * Returns the descriptor, or -1 with errno set.
 */
int nvs__files_open(struct nvs_files *c, const char *path, int flags,
		    mode_t mode);

#endif
