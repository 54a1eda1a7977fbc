/* SPDX-License-Identifier: MIT */
/*
 * A persistent swap set's manifest: one generation of the set (its
 * layout, and every tensor's size, tag, CRC32C and extents) in a
 * versioned little-endian binary file with a CRC32C trailer, its encoding
 * and decoding, and the crash-safe way to put it on disk (temporary name,
 * fsync, rename, fsync of the directory). Files are named
 * manifest.<generation, 20 digits> in the rank directory of the set's
 * first path. Threading: none inside.
 */
#ifndef NVS_SWAPPER_MANIFEST_H
#define NVS_SWAPPER_MANIFEST_H

#include "swapper/space.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/swapper.h"

/* The format this code writes and the newest it reads. Version 2
 * records paths relative to the set's first path (see paths.h); version
 * 1 recorded them absolute (and is read as such). */
#define NVS_MANIFEST_VERSION 2u
#define NVS_MANIFEST_PREFIX "manifest."
#define NVS_MANIFEST_TMP "manifest.tmp"
/* Largest manifest read (a million tensors of 16 extents fit). */
#define NVS_MANIFEST_MAX ((size_t)1 << 31)

struct nvs_mf_tensor {
	uint64_t id;
	uint64_t nbytes;
	uint32_t crc;	 /* CRC32C of the nbytes on disk */
	bool on_disk;	 /* false: never written, reads as zeros */
	uint16_t taglen; /* caller's opaque tag */
	uint8_t *tag;
	uint32_t nexts;
	struct nvs_extent *ext;
};

struct nvs_manifest {
	uint32_t version;
	uint64_t generation;
	int64_t time_ns; /* CLOCK_REALTIME when it was made */
	uint8_t set_id[16];
	uint32_t rank;
	uint32_t npaths;
	uint64_t stripe;
	uint64_t align;
	char *name;			    /* "" for none */
	char *tag;			    /* the checkpoint's tag, "" */
	char *paths[NVS_SWAPPER_MAX_PATHS]; /* nvme_paths as recorded:
					     * nvs__paths_record() */
	uint64_t file_size[NVS_SWAPPER_MAX_PATHS]; /* data file bytes used */
	size_t ntensors;
	struct nvs_mf_tensor *t;
};

/* Free what @m holds (not @m itself); @m is then empty. */
void nvs__manifest_fini(struct nvs_manifest *m);

/* Encode @m into a new buffer (*@out, *@len; nvs__free it). 0, -ENOMEM. */
int nvs__manifest_encode(const struct nvs_manifest *m, uint8_t **out,
			 size_t *len);

/* Decode @len bytes from @buf into @m (zeroed first). 0, or
 * -EBADMSG (too short, bad magic, CRC mismatch, a field out of range:
 *   the message says which, naming @what, e.g. the file),
 * -ENOTSUP (a newer format version), -ENOMEM. */
int nvs__manifest_decode(const uint8_t *buf, size_t len, const char *what,
			 struct nvs_manifest *m);

/* Write @m as generation m->generation into directory @dirfd (@dir its
 * path, for messages): NVS_MANIFEST_TMP, fsync, rename, fsync @dirfd. */
int nvs__manifest_write(int dirfd, const char *dir,
			const struct nvs_manifest *m);

/* Read and decode manifest.<@gen> of @dirfd. As decode, and -errno of
 * the read. */
int nvs__manifest_read(int dirfd, const char *dir, uint64_t gen,
		       struct nvs_manifest *m);

/* The generations whose manifest files are in @dirfd, newest first, in
 * a new array (*@gens, nvs__free it) of *@n. 0, -ENOMEM, -errno. */
int nvs__manifest_list(int dirfd, uint64_t **gens, size_t *n);

/* Remove manifest.<@gen> (and make the removal durable with @sync). */
int nvs__manifest_remove(int dirfd, const char *dir, uint64_t gen, bool sync);

/* "manifest.<gen>" into @buf of @cap bytes. */
void nvs__manifest_name(uint64_t gen, char *buf, size_t cap);

#endif
