/* SPDX-License-Identifier: MIT */
/*
 * nvswap/persist.h - persistent swap sets through a live swapper:
 * checkpoints (generations), steps that hold them back or can be undone,
 * the kept generations and whether anything is unsaved. Included by
 * nvswap/swapper.h, whose opts.persist makes a swapper persistent; the
 * sets on disk without a swapper are nvswap/swapset.h's.
 */
#ifndef NVSWAP_PERSIST_H
#define NVSWAP_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"
#include "nvswap/swapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Persistent swap sets
 * --------------------
 * With opts.persist PERSISTENT or RESUME the swap set outlives the
 * process. Its data lives in "set.data" in each path's rank directory;
 * the rank directory of the first path holds the manifests, one per kept
 * generation (manifest.<number>): the layout (paths, stripe, alignment,
 * rank, name) and, per tensor, its size, tag, CRC32C and extents.
 * Reopening restores the registry from the newest manifest (or
 * opts.generation) without reading tensor data; every tensor is ON_NVME
 * and its first read is checked against the CRC (-EBADMSG). A different
 * layout (other paths, another stripe size, a manifest of another rank)
 * is refused (-EINVAL, naming the difference), and so is a damaged or
 * missing piece (-EBADMSG: a torn manifest, an extent past the end of a
 * truncated data file or a missing one; -ENOTSUP: a manifest of a newer
 * format). Nothing is changed on disk then; nvswap-fsck says more.
 *
 * Moving a set: a manifest records the first path as "." and the others
 * relative to it when they are on the same filesystem, so a copy of the
 * whole tree (cp -a, a backup restored elsewhere) opens, verifies and
 * resumes where it lands, given its new paths in the same order. A path
 * on another filesystem than the first is recorded whole, and so is
 * every path in a manifest written before format 2: moved, such a set is
 * refused (-EINVAL) with the exact "nvswap-fsck --relocate OLD=NEW" to
 * run once (nvs_swapset_relocate()).
 *
 * Crash consistency: a generation's extents are never written while it
 * is kept. A tensor written after a checkpoint goes to new extents (copy
 * on write) until a newer checkpoint points at them; a checkpoint syncs
 * the data, then writes its manifest under a temporary name, syncs it,
 * renames it and syncs the directory. A kill -9 at any moment leaves the
 * last committed generation intact, and a reopen finds it or the new
 * one, never a mix. Writes between checkpoints are lost by a crash: they
 * belong to no generation.
 *
 * Checksums are always on in a persistent set (opts.checksum is implied).
 * At destroy a persistent set checkpoints first (tag "destroy") unless
 * nothing changed since its newest generation or a step is open
 * (nvs_swapper_step_begin()), then keeps its files.
 * Remove a set with nvs_swapper_discard() (locked until its files are
 * gone), or by deleting its directories when no process has it open.
 *
 * Read-only sets (opts.persist NVS_PERSIST_READONLY): readers share, a
 * writer excludes. A reader opens an existing set (-ENOENT otherwise,
 * naming the directory) at its newest generation (or opts.generation)
 * and writes nothing at all: no directory is made, the lock is taken
 * shared and holds no pid, the data files are opened O_RDONLY, no
 * temporary manifest or dead owner's file is cleaned up, and destroy
 * commits nothing. Any number of processes (and swappers of one
 * process) read one set at once, each through its own pool; a writer
 * (PERSISTENT, RESUME, nvs_swapset_check() and _relocate(), nvswap-fsck)
 * is then refused with -EBUSY naming the readers' pids, and a reader
 * meeting a writer likewise names the writer. A set on a read-only
 * filesystem (a read-only bind mount) opens too; one whose lock file
 * is missing there is read unlocked, as no writer can come. Another
 * user's set may be read (as their model file would be), never one in
 * a directory others could write into (-EPERM).
 * Every call that would change the set returns -EROFS with a sentence
 * naming the call and the set, and changes nothing:
 * nvs_swapper_register(), _unregister(), _set_tag(), _release() with
 * dirty true (the tensor stays acquired: release it clean),
 * _checkpoint(), _step_begin(), _step_open() and _discard() (the
 * swapper stays usable: destroy it). Reads, prefetches, evictions and
 * the list, tag, info and generation queries work as in any set; every
 * read is checked against its CRC32C. nvs_swap_stats.readonly says which
 * kind a swapper is.
 */

/**
 * nvs_swapper_checkpoint() - start making the current state a durable
 * generation named @tag (NULL: ""; at most NVS_CHECKPOINT_TAG_MAX bytes).
 *
 * Waits for write-backs already in flight, then starts the writes of the
 * dirty resident tensors (released ones; an acquire of such a tensor
 * waits for its write, so what is written is what was released) and
 * returns: a background thread waits for them, syncs the data files and
 * commits the manifest, then drops generations beyond keep_generations
 * and frees the extents only they used. Clean tensors cost nothing: they
 * are on disk already. The call blocks only to issue the writes (and
 * first for a checkpoint still committing).
 * Return: the new generation's number (> 0), or
 *   -EINVAL  not a persistent set, a NULL swapper or a tag too long;
 *   -EBUSY   a tensor is acquired and was changed since its last write
 *            (released dirty, then acquired again): its state is in the
 *            caller's hands; release it first (the message names it);
 *            or a step is open (nvs_swapper_step_begin(): the message
 *            names it): it would save part of it;
 *   -errno   of the previous checkpoint, when it failed and nobody
 *            collected it with nvs_swapper_checkpoint_wait() (nothing
 *            new is started; call again), or of a write's submit;
 *   -ECHILD  in a forked child.
 * Threading: any thread.
 */
NVS_API int nvs_swapper_checkpoint(struct nvs_swapper *s, const char *tag);

/** Longest step name nvs_swapper_step_begin() keeps (longer: cut). */
#define NVS_STEP_NAME_MAX 127u

/**
 * nvs_swapper_step_begin() - an update of several tensors is under way
 * (an optimizer step over many layers) and is not to be saved in part.
 * Until nvs_swapper_step_end(), nvs_swapper_checkpoint() returns -EBUSY
 * naming @name, and nvs_swapper_destroy() makes no checkpoint: a
 * persistent set then reopens at its newest generation, which holds
 * none of the step, as after a crash (writes after a checkpoint go to
 * new places, copy on write). Nothing else changes: tensors are read,
 * written and evicted as usual. A second begin renames the open step.
 * @name: borrowed for the call (NULL: "a step"); at most
 *        NVS_STEP_NAME_MAX bytes are kept.
 * Return: 0, -EINVAL (NULL @s), -ECHILD in a forked child.
 * Threading: any thread.
 */
NVS_API int nvs_swapper_step_begin(struct nvs_swapper *s, const char *name);

/** nvs_swapper_step_open() flag: the step can be taken back. */
#define NVS_STEP_UNDOABLE 1u

/**
 * nvs_swapper_step_open() - nvs_swapper_step_begin() with @flags.
 * NVS_STEP_UNDOABLE: nvs_swapper_step_undo() can put every tensor whose
 * id is in [@id_min, @id_max] back as it was at the open (a speculative
 * optimizer step, redone when its guess proves wrong; other tensors, a
 * gradient the redo needs, are not undone). Until the step ends, the
 * first write of such a tensor that holds data goes to a new placement
 * and the old one is kept (the disk holds both versions of what the
 * step wrote: room for them is the caller's to plan); later writes in
 * the step go to the new one. Reads see the newest version, as always.
 * The value at the open must be on disk: the open is refused while such
 * a tensor is dirty or being written (write them back and wait first).
 * One registered in the step goes back to its value at the register,
 * one unregistered in it stays removed. A change is known at its
 * release (dirty): release what you changed before an undo or the end.
 * nvs_swapper_step_begin() on an open undoable step renames it (it
 * stays undoable).
 * @name: as nvs_swapper_step_begin()'s.
 * @id_min, @id_max: the ids an undo covers (0, UINT64_MAX: all);
 *                   ignored without NVS_STEP_UNDOABLE.
 * Return: 0; -EINVAL (NULL @s, an unknown flag, @id_min > @id_max);
 *   -EBUSY (undoable: a step is open already, or a tensor is dirty or
 *   being written: the message names it); -ECHILD.
 * Threading: any thread.
 */
NVS_API int nvs_swapper_step_open(struct nvs_swapper *s, const char *name,
				  unsigned flags, uint64_t id_min,
				  uint64_t id_max);

/**
 * nvs_swapper_step_end() - the step nvs_swapper_step_begin() opened is
 * whole: checkpoints (and destroy's) are allowed again. Of an undoable
 * step, the versions kept for an undo are given back (space and disk
 * blocks). A no-op when no step is open.
 * Return: 0, -EINVAL (NULL @s), -ECHILD.
 */
NVS_API int nvs_swapper_step_end(struct nvs_swapper *s);

/**
 * nvs_swapper_step_undo() - end the undoable step open, every tensor it
 * changed back to its value at the open: what the step wrote is given
 * back, resident copies changed in it are dropped (the next acquire
 * reads the old value), and a failure kept from a write in the step is
 * forgotten (the data it was for is gone). Waits for I/O in flight on
 * those tensors first.
 * Return: how many tensors it put back; -EINVAL (NULL @s, or no
 *   undoable step is open); -EBUSY (a tensor changed in the step is
 *   acquired: nothing is undone, the step stays open); -ECHILD.
 * Threading: any thread; it waits for other threads' work on the
 *   tensors it puts back.
 */
NVS_API int nvs_swapper_step_undo(struct nvs_swapper *s);

/**
 * nvs_swapper_checkpoint_wait() - wait until the last checkpoint started
 * is committed (durable) or failed.
 * Return: its generation number, 0 when none was started, or its -errno
 *   (reported once): -ENOSPC/-EIO writing a tensor (the tensor stays
 *   resident and dirty; nothing is lost, the previous generation stays
 *   the newest) or syncing or writing the manifest.
 */
NVS_API int nvs_swapper_checkpoint_wait(struct nvs_swapper *s);

/**
 * struct nvs_generation_info - one kept generation of a persistent set.
 */
struct nvs_generation_info {
	uint64_t generation;
	int64_t time_ns; /* CLOCK_REALTIME when committed */
	uint64_t tensors;
	uint64_t tensor_bytes;
	char tag[NVS_CHECKPOINT_TAG_MAX + 1];
	uint64_t reserved[4];
};

/**
 * nvs_swapper_generations() - the kept generations, newest first.
 * @out: receives up to @cap of them (may be NULL when @cap is 0).
 * Return: how many are kept (may exceed @cap), -EINVAL, -ECHILD.
 */
NVS_API int nvs_swapper_generations(const struct nvs_swapper *s,
				    struct nvs_generation_info *out,
				    size_t cap);

/**
 * nvs_swapper_unsaved() - whether a persistent set holds changes that its
 * newest generation does not: a tensor registered, unregistered, retagged
 * or written (a write-back of unchanged bytes counts) since the last
 * checkpoint, a dirty resident tensor, or no generation yet. Exactly when
 * nvs_swapper_destroy() would checkpoint first, unless a step is open
 * (nvs_swapper_step_begin()).
 * Return: 1 or 0 (0 for a scratch swapper), -EINVAL (NULL), -ECHILD.
 */
NVS_API int nvs_swapper_unsaved(const struct nvs_swapper *s);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_PERSIST_H */
