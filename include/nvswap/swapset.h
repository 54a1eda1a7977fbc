/* SPDX-License-Identifier: MIT */
/*
 * nvswap/swapset.h - persistent swap sets on disk, without a live
 * swapper: nvs_swapset_check() (nvswap-fsck), nvs_swapset_list() and
 * nvs_swapset_relocate(). Included by nvswap/swapper.h; the sets
 * themselves are described in nvswap/persist.h ("Persistent swap
 * sets").
 */
#ifndef NVSWAP_SWAPSET_H
#define NVSWAP_SWAPSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"
#include "nvswap/swapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/** nvs_swapset_check() flags. */
enum nvs_check_flags {
	NVS_CHECK_DATA = 1u,   /* read every tensor and check its CRC32C */
	NVS_CHECK_REPAIR = 2u, /* remove the manifests of generations that
				  do not verify (never a good one); when
				  none is left, the set's files too (its
				  set.data, locks and empty directories:
				  a line for generation 0 says so) */
};

/**
 * struct nvs_check_item - one finding of nvs_swapset_check().
 * @generation: the generation (0 for the set as a whole).
 * @id:         the tensor, or NVS_CHECK_NO_TENSOR for a line about the
 *              generation itself (its manifest, its verdict).
 * @status:     0 (verifies), or why not: -EBADMSG (CRC mismatch, a torn
 *              or corrupt manifest, overlapping extents), -ENOTSUP (a
 *              newer format), -ERANGE (an extent past the data file's
 *              end), -EIO (a read failed).
 * @what:       a sentence, valid during the callback.
 * @removed:    (verdict lines) its manifest was removed by the repair.
 */
struct nvs_check_item {
	uint64_t generation;
	uint64_t id;
	uint64_t nbytes;
	int status;
	bool removed;
	const char *what;
};
#define NVS_CHECK_NO_TENSOR UINT64_MAX

typedef void (*nvs_check_fn)(const struct nvs_check_item *item, void *arg);

/**
 * nvs_swapset_check() - verify a persistent swap set that no process has
 * open (nvswap-fsck): every manifest parses, matches the options' paths,
 * name and rank, every extent lies inside its data file and no two
 * tensors' extents overlap, and (NVS_CHECK_DATA) every written tensor's
 * bytes match its CRC32C. Each tensor checked and each generation's
 * verdict are passed to @fn (may be NULL), oldest generation first.
 * @o:     the set's paths (nvme_paths, npaths), name and rank, as given
 *         to nvs_swapper_create(); nothing else is used.
 * @flags: enum nvs_check_flags.
 * Return: how many generations do not verify (0: the set is sound), or
 *   -ENOENT  no set there (no rank directory or no manifest);
 *   -EBUSY   a live process has the set open (the message has its pid);
 *   -EINVAL  bad arguments, or the set was made with other paths (the
 *            message names them), or a set.data is not a regular file
 *            (a FIFO, a device...: named, never waited on); nothing is
 *            judged or repaired;
 *   -errno   of opening the directories or data files, or of a removal
 *            the repair could not make durable.
 * Threading: any thread; the set is locked for the call.
 */
NVS_API int nvs_swapset_check(const struct nvs_swapper_opts *o, unsigned flags,
			      nvs_check_fn fn, void *arg);

/**
 * struct nvs_swapset_info - one swap set found by nvs_swapset_list().
 * @dir:         its rank directory (<nvme_path>/nvswap[/<name>]/rank<R>).
 * @name:        the set's name ("" for none); @rank its rank.
 * @generations: manifests kept there (0: the data of a set's later path,
 *               or a set that never committed one); @newest and @oldest
 *               their numbers.
 * @tensors, @tensor_bytes, @npaths, @paths: the newest generation's
 *               (@paths absolute, relative ones resolved against the
 *               directory listed); 0 and NULL when @status < 0.
 * @data_bytes:  the size of its set.data, UINT64_MAX when it has none.
 * @pid:         the process holding the set's lock (as /proc/locks
 *               lists it), 0 for none. The lock is not tried. When
 *               /proc/locks has no entry for the lock file's device and
 *               inode (btrfs, overlayfs show another device there) or
 *               there is no /proc: a hint, the live pid the lock file
 *               names (with /proc, only if it holds an flock on an
 *               inode of the lock file's number), and
 *               @pid_hint is true.
 * @status:      0, or -errno of reading the newest manifest.
 * @what:        the newest generation's tag, or why it could not be read.
 * @whole:       bit i set: @paths[i] is recorded whole (absolute) in the
 *               manifest, so it names where the set was written, not
 *               where this copy is; clear: recorded relative to the
 *               directory listed.
 * Valid during the callback.
 */
struct nvs_swapset_info {
	const char *dir;
	const char *name;
	int rank;
	unsigned generations;
	uint64_t newest, oldest;
	uint64_t tensors, tensor_bytes;
	uint64_t data_bytes;
	unsigned npaths;
	const char *paths[NVS_SWAPPER_MAX_PATHS];
	long pid;
	int status;
	const char *what;
	bool pid_hint;
	unsigned whole;
};

typedef void (*nvs_swapset_fn)(const struct nvs_swapset_info *info, void *arg);

/**
 * nvs_swapset_list() - find every persistent swap set under @nvme_path
 * (nvswap-fsck without --name): each rank directory holding manifests or
 * a set.data, named or not, is passed to @fn (may be NULL). Nothing is
 * locked, opened for writing or changed.
 * Return: how many were found (0 when there is no <nvme_path>/nvswap),
 *   -EINVAL (NULL or empty path), -errno of @nvme_path or its nvswap
 *   directory.
 * Threading: any thread.
 */
NVS_API int nvs_swapset_list(const char *nvme_path, nvs_swapset_fn fn,
			     void *arg);

/**
 * nvs_swapset_relocate() - after a persistent set was moved, rewrite the
 * paths its manifests record (nvswap-fsck --relocate OLD=NEW). A set
 * records its first path as "." and the others relative to it when on
 * the same filesystem, so a copy of the whole tree opens as it is; a
 * path on another filesystem is recorded whole, and so are all paths of
 * a set written by an nvswap before manifest format 2: those need this
 * call when they move. Every path recorded whole that is @old or lies
 * under it gets @new_ in place of @old (relative ones already resolve
 * against where @o's first path is now and are not moved again, so @new_
 * may lie under @old), and every manifest is rewritten in the current
 * format. A manifest that cannot be read (torn) is left as it is and not
 * counted: nvs_swapset_check() judges it bad and its repair removes it.
 * Nothing is written unless all the others then name @o's paths
 * exactly. Each manifest is replaced as a checkpoint commits one
 * (temporary file, fsync, rename, fsync of the directory): a crash
 * leaves each old or new, and calling again finishes the job.
 * @o:    the set's paths where it is now, its name and rank (as given to
 *        nvs_swapper_create(); nothing else is used).
 * @old, @new_: absolute paths.
 * Return: how many manifests were rewritten (0: all were right), or
 *   -EINVAL  bad arguments, or a path that still differs from @o's (the
 *            message names it; nothing was written);
 *   -ENOENT  no set there; -EBUSY: a live process has it open;
 *   -errno of reading (other than a torn or unknown-format manifest)
 *            or writing one.
 * Threading: any thread; the set is locked for the call.
 */
NVS_API int nvs_swapset_relocate(const struct nvs_swapper_opts *o,
				 const char *old, const char *new_);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_SWAPSET_H */
