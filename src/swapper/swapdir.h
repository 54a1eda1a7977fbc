/* SPDX-License-Identifier: MIT */
/*
 * A swapper's directory on one NVMe path: <nvme_path>/nvswap/rank<R>/,
 * held with an flock on its "lock" file so two live processes never share
 * it (a <name> level between nvswap/ and rank<R>/ lets several swappers
 * share a path). Swap files inside are named swap.*, created 0600 with O_NOFOLLOW;
 * nothing outside the directory is touched. Swap files a killed process
 * left behind are found stale (the lock is free) and removed at the next
 * open. Threading: one owner.
 */
#ifndef NVS_SWAPPER_SWAPDIR_H
#define NVS_SWAPPER_SWAPDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A directory's identity: device, inode and, where the filesystem keeps
 * one, birth time, so that an inode number reused by a directory made
 * later (the first removed by someone else) is not taken for it. */
struct nvs__dirid {
	dev_t dev;
	ino_t ino;
	int64_t born_sec; /* 0 and 0: no birth time here */
	uint32_t born_nsec;
};

struct nvs_swapdir {
	int dirfd;	       /* the rank directory */
	int lockfd;	       /* its lock file, flocked */
	unsigned stale;	       /* swap files of a dead owner removed at open */
	bool named;	       /* path has a <name> level */
	bool readonly;	       /* nvs__swapdir_open_ro(): lock shared (or
				* none on a read-only filesystem), nothing
				* made, written or removed */
	bool discard;	       /* closing removes <nvme_path>/nvswap when
				* empty, made by this process or not */
	size_t top_len;	       /* of "<nvme_path>/nvswap" in path */
	struct nvs__dirid top; /* that directory, to remove it when empty
				* and made by this process */
	char path[4096];
};

/*
 * Create (0700) and lock <@nvme_path>/nvswap/rank<@rank>/, or with a
 * @name (one path component, e.g. "param"; NULL or "" for none)
 * <@nvme_path>/nvswap/<@name>/rank<@rank>/, so that several swappers of
 * one process may share a path. Returns 0, or
 * -errno with nvs_last_error() set: -EBUSY (a live process holds it; the
 * message has its pid; a lock whose recorded holder is dead is waited
 * for up to a second, as the kernel may drop it a little after the
 * process is reaped), -ELOOP (a symlink where a directory should be),
 * -EPERM (a level owned by another user, or writable by group or others
 * without the sticky bit: the message names owner and mode),
 * -EINVAL (a bad @name, a negative @rank, "lock" not a regular file of
 * ours),
 * -ENOENT/-EACCES/-EROFS/-ENOTDIR from the path.
 */
int nvs__swapdir_open(const char *nvme_path, const char *name, int rank,
		      struct nvs_swapdir *d);
/*
 * A reader's nvs__swapdir_open(): the directories must exist (nothing is
 * made: -ENOENT naming the rank directory), the lock is taken shared
 * (-EBUSY naming a writer that holds it; readers share it), and nothing
 * is written: no pid, no clean up. Another user's directory is
 * accepted; one writable by others without the sticky bit is not
 * (-EPERM). A missing lock file on a read-only filesystem: opened
 * unlocked (lockfd -1; no writer can come). Errors otherwise as
 * nvs__swapdir_open().
 */
int nvs__swapdir_open_ro(const char *nvme_path, const char *name, int rank,
			 struct nvs_swapdir *d);
/*
 * mkdir -p @nvme_path: each missing level made 0700 (an existing one is
 * left as it is) and noted as made by this process, so that
 * nvs__swapdir_rmpath() removes it again. With @check, nothing is made:
 * only whether it could be (the first missing level's parent lets this
 * process create in it). Returns 0, or -errno with @level (@len bytes)
 * naming the level at fault: -ENOTDIR (not a directory), -EACCES,
 * -EROFS, -ELOOP..., -ENAMETOOLONG (@level is then @nvme_path); sets no
 * message (nvs__swapdir_mkpath_err() does). Threading: any thread.
 */
int nvs__swapdir_mkpath(const char *nvme_path, bool check, char *level,
			size_t len);
/* Set nvs_last_error() for nvs__swapdir_mkpath()'s @err and @level;
 * returns @err. */
int nvs__swapdir_mkpath_err(int err, const char *nvme_path, const char *level);
/* Remove @nvme_path, then its parents, each while it is empty and was
 * made by this process (nvs__swapdir_mkpath()). */
void nvs__swapdir_rmpath(const char *nvme_path);
/* nvs__swapdir_mkpath() then nvs__swapdir_open(): what a swapper uses.
 * Errors as both. */
int nvs__swapdir_make(const char *nvme_path, const char *name, int rank,
		      struct nvs_swapdir *d);
/* Create swap file "swap.<@name>" (O_EXCL, 0600, O_NOFOLLOW) with @flags
 * added (e.g. O_DIRECT; dropped when the filesystem refuses it: check
 * the descriptor's flags); returns the descriptor or -errno. */
int nvs__swapdir_create(struct nvs_swapdir *d, const char *name, int flags);
/* Unlock and close; with @remove, delete the swap files, the lock and the
 * rank directory first (scratch mode), the <name> level when empty, and
 * <nvme_path>/nvswap and the levels of nvme_path when empty and made by
 * this process. */
void nvs__swapdir_close(struct nvs_swapdir *d, bool remove);

#endif
