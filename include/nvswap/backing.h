/* SPDX-License-Identifier: MIT */
/*
 * nvswap/backing.h - tensors whose clean contents live in a file of the
 * caller's (weights in place): a model's safetensors shards read straight
 * into the pool, nothing copied into the swap file until a tensor
 * changes. Included by nvswap/swapper.h.
 */
#ifndef NVSWAP_BACKING_H
#define NVSWAP_BACKING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"
#include "nvswap/swapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most files one swapper reads tensors from. */
#define NVS_SWAPPER_MAX_FILES 4096u
/** Most pieces of one file-backed tensor. */
#define NVS_FILE_PIECES_MAX 1024u

/**
 * nvs_swapper_add_file() - a file of the caller's that tensors read
 * their clean contents from (nvs_swapper_register_file()).
 * @s:    a scratch swapper (persistent sets name no outside file).
 * @path: borrowed for the call. Opened read-only, O_DIRECT where its
 *        filesystem allows (else through the page cache:
 *        nvs_swap_stats.files_buffered counts those), and kept open
 *        until destroy; symlinks are followed (the caller decides which
 *        files it trusts). Never written.
 * @head: bytes at its start (a safetensors file's 8 + header length;
 *        0 for none) whose CRC32C is kept beside the file's size, mtime,
 *        device and inode: what tells the file added from a changed one.
 *
 * Return: the file's index (>= 0), or
 *   -EINVAL  NULL argument, not a regular file, @head beyond its size;
 *   -ENOENT/-EACCES/-ELOOP/...  open(2)'s, the message naming @path;
 *   -EOPNOTSUPP  a persistent set; -EROFS a read-only one;
 *   -EMFILE  NVS_SWAPPER_MAX_FILES added already; -ENOMEM; -EIO reading
 *            the head; -ECHILD in a forked child.
 * Threading: any thread.
 */
NVS_API int nvs_swapper_add_file(struct nvs_swapper *s, const char *path,
				 uint64_t head);

/** struct nvs_file_piece - bytes of an added file that a tensor holds. */
struct nvs_file_piece {
	uint32_t file;	   /* nvs_swapper_add_file()'s index */
	uint32_t reserved; /* 0 */
	uint64_t offset;   /* of the bytes in the file */
	uint64_t length;   /* how many (> 0) */
	uint64_t at;	   /* where they go in the tensor */
};

/**
 * nvs_swapper_register_file() - register tensor @id of @nbytes bytes
 * whose clean contents are @n pieces of added files; bytes no piece
 * covers read as zeros. Nothing is read or written now.
 * @pieces: borrowed for the call (copied); any order, not overlapping.
 *
 * A read (acquire, prefetch, nvs_swapper_read()) of the tensor reads its
 * pieces from their files into the buffer (aligned spans O_DIRECT, the
 * rest through the aio handle's bounce buffers) and then checks each
 * file it read against what nvs_swapper_add_file() recorded: its size
 * and mtime, and that its path (resolved at the add, so a chdir does not
 * move it) still names the same inode (and, after a failed read, its
 * head's CRC32C). A file
 * truncated, rewritten, replaced or deleted since is -ESTALE naming the
 * file and the tensor (a read that came back short, -EIO, says the same
 * when the file changed), and the bytes are not handed out: never data
 * of another file. Once released dirty and written back, the tensor
 * lives in the swap file like any other and its pieces are read no more;
 * an undoable step's undo (nvs_swapper_step_undo()) puts it back on
 * them. Its placement
 * is reserved in the swap file, which grows sparse: nothing is written
 * for it, and no disk block used, until it changes.
 * opts.checksum covers what the swapper writes; a read from a file is
 * checked by the file's identity, not by a CRC.
 *
 * Return: 0, or
 *   -EINVAL  NULL argument, @n 0 or above NVS_FILE_PIECES_MAX, a piece
 *            with an unknown file, a non-zero reserved field, length 0,
 *            ending beyond @nbytes or beyond its file, or overlapping
 *            another (the message names the piece);
 *   -EEXIST  @id is registered; -EFBIG  @nbytes above buffer_size;
 *   -ENOSPC  no room for its placement; -ENOMEM;
 *   -EOPNOTSUPP/-EROFS/-ECHILD  as nvs_swapper_add_file().
 * Threading: any thread.
 */
NVS_API int nvs_swapper_register_file(struct nvs_swapper *s, uint64_t id,
				      size_t nbytes,
				      const struct nvs_file_piece *pieces,
				      size_t n);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_BACKING_H */
