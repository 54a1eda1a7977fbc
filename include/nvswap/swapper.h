/* SPDX-License-Identifier: MIT */
/*
 * The swap manager: tensors registered by a caller-chosen 64-bit id, kept
 * in swap files on one or more NVMe paths and brought into a fixed pool of
 * pinned buffers on demand, with asynchronous prefetch and write-back so
 * the I/O overlaps the caller's compute.
 */
#ifndef NVSWAP_SWAPPER_H
#define NVSWAP_SWAPPER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/aio.h"
#include "nvswap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most NVMe paths (devices) one swapper stripes over. */
#define NVS_SWAPPER_MAX_PATHS 16

/**
 * NVS_SWAPPER_WAIT_MS_DEFAULT - how long prefetch/acquire wait at most
 * for another thread to give a pool buffer back (nvs_swapper_opts.wait_ms).
 * 60 s: far longer than any legitimate wait (one tensor's write-back, at
 * most buffer_size bytes - 1 GiB takes ~10 s even at 100 MB/s - plus the
 * other thread's step), short enough that a program nobody will unblock
 * fails with a sentence within a minute instead of hanging.
 */
#define NVS_SWAPPER_WAIT_MS_DEFAULT 60000u

/** NVS_WAIT_FOREVER - wait_ms for an explicitly unlimited wait. */
#define NVS_WAIT_FOREVER UINT32_MAX

/**
 * enum nvs_tensor_state - where a tensor's data is.
 *
 *   ON_NVME  --prefetch/acquire-->  READING  --read done-->  RESIDENT
 *   RESIDENT --evict, dirty-->  WRITING  --write done-->  ON_NVME
 *   RESIDENT --evict, clean-->  ON_NVME (no I/O)
 *
 *   ON_NVME  --acquire_blank-->  RESIDENT (pinned; no I/O: see there)
 *
 * A failed read goes back to ON_NVME (retry with prefetch or acquire); a
 * failed write goes back to RESIDENT, still dirty (nothing is lost; retry
 * with evict). A prefetch or acquire of a WRITING tensor keeps its buffer
 * when the write ends (RESIDENT; clean unless released dirty meanwhile)
 * instead of reading it back; an acquire hands the buffer out at once,
 * while the write goes on (see nvs_swapper_acquire()).
 */
enum nvs_tensor_state {
	NVS_TENSOR_ON_NVME = 0,
	NVS_TENSOR_READING = 1,
	NVS_TENSOR_RESIDENT = 2,
	NVS_TENSOR_WRITING = 3,
};

/**
 * struct nvs_swapper_opts - settings of a swapper.
 * Fill it with nvs_swapper_opts_init() (or nvs_config_swapper_opts(),
 * in the config header),
 * then set at least nvme_paths/npaths, buffer_size and buffer_count.
 */
struct nvs_swapper_opts {
	size_t size;	 /* set by nvs_swapper_opts_init */
	unsigned npaths; /* entries of nvme_paths, 1..NVS_SWAPPER_MAX_PATHS */
	const char *nvme_paths[NVS_SWAPPER_MAX_PATHS]; /* directories, one
							  per device, made
							  (0700) when
							  missing; borrowed
							  for create */
	const char *name;   /* NULL: swap files in <path>/nvswap/rank<R>/; else
			     <path>/nvswap/<name>/rank<R>/ (one component,
			     not empty: -EINVAL), so several swappers can
			     share a path */
	int rank;	    /* default 0 */
	size_t buffer_size; /* bytes per pool buffer = largest tensor */
	unsigned buffer_count; /* pool buffers = tensors resident at once */
	size_t elem_size;      /* bytes per element, used only by
				  nvs_config_swapper_opts() (0 there = 2 for
				  parameters, 4 for optimizer state) */
	uint64_t stripe_size;  /* tensors of at least this many bytes are
				  striped over the paths in units of this;
				  default 1 MiB, a multiple of 4096 */
	bool pin_memory;       /* default true: the pool is page-locked;
				  false: locked when possible, unlocked memory
				  accepted when the memlock limit refuses */
	bool auto_evict;       /* default true: when the pool is empty,
				  prefetch/acquire evict a released tensor
				  themselves: the least recently released
				  clean one, else the least recently
				  released dirty one (written back first,
				  nothing lost). false: they wait for the
				  caller to evict (bounded by wait_ms) */
	bool checksum;	       /* default false: CRC32C each tensor when
				  written, verify when read (-EBADMSG).
				  Off by default because it costs: the
				  swap path ran at 0.91-0.93x with it on
				  (0.79x before the CRC was folded), at a
				  4 GB/s disk's full speed
				  (bench/RESULTS.md); turn it on where a
				  flipped or lost byte must not reach
				  training */
	uint8_t persist;       /* enum nvs_persist: NVS_PERSIST_SCRATCH
				  (default: files removed at destroy),
				  NVS_PERSIST_PERSISTENT, NVS_PERSIST_RESUME
				  or NVS_PERSIST_READONLY (see "Persistent
				  swap sets" below) */
	bool page_cache;       /* default false: swap files are opened
				  O_DIRECT (where the filesystem allows),
				  so what the swapper holds is its pool.
				  true: through the page cache, which the
				  kernel may fill with the files beside
				  the pool (memory no budget counts): a
				  server with memory to spare reads
				  recent tensors at memory speed */
	bool keep_blocks;      /* default false: unregister gives a
				  written tensor's disk blocks back to
				  the filesystem at once (a hole
				  punched). true: they stay allocated
				  in the swap file, and the next tensor
				  placed there overwrites them in place:
				  for tensors that come and go every
				  step (activations), where punching and
				  allocating again cost more than the
				  I/O; the swap file then holds its
				  high-water mark of disk until destroy.
				  Scratch swappers only (-EINVAL with a
				  persistent set, which frees by
				  generation). A tensor placed on such
				  blocks still reads as zeros until
				  written */
	uint8_t reserved8[2];
	/* How long prefetch/acquire wait at most for another thread to give
	 * a buffer back (evict, or release when auto_evict is on) when the
	 * pool is empty; then -ETIMEDOUT. Default (and 0)
	 * NVS_SWAPPER_WAIT_MS_DEFAULT (60 s); NVS_WAIT_FOREVER = no limit,
	 * only on explicit request. A wait that could never end (every
	 * buffer held by the calling thread's acquires) is -EDEADLK at
	 * once, whatever wait_ms says. */
	uint32_t wait_ms;
	uint32_t keep_generations; /* persistent sets: checkpoints kept
				      (their extents too); default (and 0)
				      2, at most 64 */
	struct nvs_aio_opts aio;   /* the swapper's aio handle; filled by
				    nvs_aio_opts_init(). max_ops 0 = sized for
				    the pool; bounce_bytes 0 = 256 KiB (only
				    register's data from unaligned memory is
				    staged) */
	uint64_t generation;	   /* reopening a persistent set: 0 (default)
				the newest generation, else this one */
	uint64_t reserved[7];
};

/**
 * enum nvs_persist - what a swapper's files are (nvs_swapper_opts.persist).
 * @NVS_PERSIST_SCRATCH: scratch space, removed at destroy; a crash
 *	loses it (the next create removes what is left).
 * @NVS_PERSIST_PERSISTENT: a persistent swap set: reopened when its
 *	directory holds one (same name, rank and paths), else created.
 * @NVS_PERSIST_RESUME: as PERSISTENT, but the set must exist: -ENOENT
 *	when it does not (the message names the directory and the ranks
 *	that do hold a set there).
 * @NVS_PERSIST_READONLY: an existing set opened to read (serve) it,
 *	shared with other readers: see "Read-only sets" below.
 */
enum nvs_persist {
	NVS_PERSIST_SCRATCH = 0,
	NVS_PERSIST_PERSISTENT = 1,
	NVS_PERSIST_RESUME = 2,
	NVS_PERSIST_READONLY = 3,
};

/**
 * nvs_persist_name() - "scratch", "persistent", "resume" or "readonly"
 * for an enum nvs_persist value (the config's and Python's spelling);
 * NULL for any other value. Threading: any thread.
 */
NVS_API const char *nvs_persist_name(unsigned persist);

/** Longest tag of a tensor (nvs_swapper_set_tag()), in bytes. */
#define NVS_SWAPPER_TAG_MAX 1024u
/** Longest tag of a checkpoint (nvs_swapper_checkpoint()), in bytes. */
#define NVS_CHECKPOINT_TAG_MAX 255u
/** Most generations a persistent set keeps. */
#define NVS_KEEP_GENERATIONS_MAX 64u

/**
 * struct nvs_swap_stats - counters of a swapper since its creation.
 */
struct nvs_swap_stats {
	uint64_t bytes_read;	  /* tensor bytes read from NVMe */
	uint64_t bytes_written;	  /* tensor bytes written (register with
				     init data included) */
	uint64_t reads;		  /* tensor reads completed */
	uint64_t writes;	  /* tensor writes completed */
	uint64_t io_ops;	  /* aio ops (one per extent) */
	uint64_t io_errors;	  /* tensor reads or writes that failed */
	uint64_t checksum_errors; /* reads refused by the checksum */
	uint64_t prefetches;	  /* prefetch calls that started a read */
	uint64_t acquires;	  /* successful acquires */
	uint64_t acquire_hits;	  /* of those, already resident (no wait) */
	uint64_t acquire_wait_ns; /* time blocked in acquire: I/O not hidden
				     by compute, and waits for a buffer */
	uint64_t clean_evictions; /* evictions that needed no write */
	uint64_t auto_evictions;  /* evictions the swapper chose itself */
	uint64_t zero_fills;	  /* reads of never-written tensors served
				     by zero-filling, no I/O */
	uint64_t revived;	  /* writes whose buffer was kept because the
				     tensor was wanted again */
	uint64_t buffer_waits;	  /* prefetches/acquires that found the pool
				     empty (and collected a write-back,
				     evicted, or waited for an eviction) */
	uint64_t buffer_wait_ns;  /* time from then until they had a buffer
				     (or failed) */
	unsigned buffer_count;	  /* pool buffers */
	unsigned buffers_in_use;  /* held now (resident or in flight) */
	unsigned pool_high_water; /* most held at once */
	unsigned tensors;	  /* registered now */
	size_t buffer_size;	  /* bytes per pool buffer (rounded up to the
				     I/O alignment) */
	bool pinned;		  /* the pool is page-locked */
	enum nvs_backend backend; /* the aio backend in use */
	uint64_t tensor_bytes;	  /* bytes of the registered tensors */
	unsigned npaths;
	uint64_t path_bytes_read[NVS_SWAPPER_MAX_PATHS];
	uint64_t path_bytes_written[NVS_SWAPPER_MAX_PATHS];
	uint64_t path_space_used[NVS_SWAPPER_MAX_PATHS]; /* allocated bytes */
	uint64_t path_file_size[NVS_SWAPPER_MAX_PATHS];	 /* swap file size */
	uint64_t write_hits; /* acquires of a tensor being written back,
				served from its buffer without waiting for
				the write (counted in acquire_hits too) */
	uint64_t io_busy_ns; /* time the swapper's aio handle had I/O in
				flight (nvs_aio_stats.busy_ns): bytes_read
				/ io_busy_ns is the rate reads ran at while
				the disk was kept busy */
	bool checksum;	     /* every read is checked against a CRC32C
				(opts.checksum, always for a persistent set) */
	bool readonly;	     /* opened NVS_PERSIST_READONLY: nothing is
				written */
	uint8_t reserved8[6];
	uint32_t queue_depth;	  /* the aio handle's requests in flight
				     per worker now (opts.aio.queue_depth:
				     a config's, shared by a node's ranks;
				     less while disk_sharers > 1) */
	uint32_t files_buffered;  /* added files (nvs_swapper_add_file())
				     read through the page cache: their
				     filesystem refuses O_DIRECT */
	uint64_t file_reads;	  /* reads of file-backed tensors from
				     their files (nvswap/backing.h) */
	uint64_t file_bytes_read; /* the bytes those took from the files
				     (apart from bytes_read, the swap
				     files') */
	uint32_t disk_sharers;	  /* processes sharing the disks
				     (nvs_swapper_share_disk(), a read-only
				     set's readers): queue_depth is this
				     one's share; 0 when not counted */
	uint32_t reserved32;
	uint64_t reserved[1];
};

/** struct nvs_tensor_info - one tensor, for nvs_swapper_info(). */
struct nvs_tensor_info {
	enum nvs_tensor_state state;
	size_t nbytes;
	unsigned acquired; /* acquires not yet released */
	bool dirty;	   /* resident data not yet written */
	bool on_disk;	   /* has been written at least once (false: reads
			      as zeros without I/O) */
	unsigned extents;  /* pieces on the paths */
	bool backed;	   /* reads from an added file (nvswap/backing.h):
			      not written since it was registered */
	uint64_t reserved[4];
};

struct nvs_swapper;

/** nvs_swapper_opts_init() - the defaults (see struct nvs_swapper_opts). */
NVS_API void nvs_swapper_opts_init(struct nvs_swapper_opts *opts);

/**
 * nvs_swapper_create() - open the swap directories, create the swap files
 * (one per path, O_DIRECT where the filesystem allows), the pinned pool
 * and the aio handle.
 * @opts: borrowed for the call.
 * @out:  receives the swapper; NULL on failure.
 *
 * A missing nvme_path is made first, as mkdir -p does, each level it
 * makes 0700 (an existing one is left as it is); a scratch swapper's
 * destroy, or a failed create, removes those levels again when empty.
 * Swap files of a process that died without cleaning up (its lock is
 * free) are removed first, and its <nvme_path>/nvswap is adopted: the
 * last scratch swapper there removes it when empty. Nothing else outside
 * the rank directories is touched.
 * Return: 0, or
 *   -EINVAL  NULL argument, opts not from nvs_swapper_opts_init(), no
 *            path or more than NVS_SWAPPER_MAX_PATHS, a zero buffer size
 *            or count, a stripe size not a multiple of 4096, a bad name;
 *   -EBUSY   a live process (or another swapper here) holds a rank
 *            directory; the message has its pid (all of them, when
 *            readers hold a set a writer wants). A lock whose recorded
 *            holder has died is waited for up to 1 s (the kernel may
 *            release it a little after the process is reaped);
 *   -ENOTDIR/-EACCES/-EROFS  an nvme_path, or a level of it to be made,
 *            that is not a directory or cannot be made: the message
 *            names that level;
 *   -ENOMEM/-EPERM  the pool (memlock limit) or memory;
 *   persistent sets (opts.persist, see "Persistent swap sets" in
 *   nvswap/persist.h):
 *   -EEXIST  scratch space asked where a persistent set lives;
 *   -ENOENT  RESUME or READONLY and no set there, or opts.generation
 *            not kept;
 *   -EINVAL  a set of another layout (paths, stripe, rank, name): the
 *            message names the difference; a bad persist value or
 *            keep_generations;
 *   -EBADMSG a manifest that does not verify, or data files that do not
 *            hold its extents; -ENOTSUP  a manifest of a newer format;
 *   -EPERM   also: a swap directory (nvswap/, a <name> level or rank<R>)
 *            owned by another user, or writable by group or others
 *            without the sticky bit; the message names owner and mode;
 *   and the errors of nvs_aio_create().
 * Threading: any thread. The swapper belongs to the process that made it
 * (its handle's workers exist only there): in a child forked afterwards
 * every call that takes the swapper (register, unregister, prefetch,
 * try_prefetch, acquire, release, read, evict, wait, wait_all, stats,
 * info, destroy) fails
 * at once with -ECHILD and a sentence saying so, instead of blocking
 * forever; destroy then frees and removes nothing, the parent's files
 * stay the parent's. A child makes its own swapper.
 */
NVS_API int nvs_swapper_create(const struct nvs_swapper_opts *opts,
			       struct nvs_swapper **out);

/**
 * nvs_swapper_destroy() - finish all I/O in flight, then remove the swap
 * files and directories and free everything.
 * @s: the swapper, or NULL (a no-op returning 0).
 *
 * Pointers from nvs_swapper_acquire() are invalid afterwards, released or
 * not. Scratch: dirty resident tensors are not written (the files are
 * scratch). Persistent: a checkpoint (tag "destroy") is made first,
 * unless nothing changed since the newest generation, and the files are
 * kept; when it fails its -errno is returned and the set
 * reopens at its previous generation.
 * Return: 0, or the -errno of an I/O failure no call reported yet;
 * -ECHILD in a child forked after the swapper was made (nothing is freed
 * or removed: see nvs_swapper_create()).
 * No other thread may use @s during or after this call.
 */
NVS_API int nvs_swapper_destroy(struct nvs_swapper *s);

/**
 * nvs_swapper_discard() - destroy @s and remove its files: for a
 * persistent set, every generation (manifests, set.data), then its lock
 * and the directories this process made for it, all while the set is
 * still locked, so no other process can open it half removed. Unsaved
 * changes are not checkpointed; the I/O in flight ends first and its
 * failures are moot. A scratch swapper: as nvs_swapper_destroy().
 * @s: the swapper, or NULL (a no-op returning 0).
 *
 * Use it to drop a finished run's set, or one just made by mistake (a
 * resume that found nothing), instead of destroy and a recursive rm,
 * which leaves the set unlocked in between.
 * Return: 0; -errno when a file could not be unlinked (named in
 * nvs_last_error(); @s is freed anyway, the lock released and the files
 * that stay are left for nvswap-fsck); -ECHILD in a child forked after
 * the swapper was made (nothing freed or removed).
 */
NVS_API int nvs_swapper_discard(struct nvs_swapper *s);

/**
 * nvs_swapper_register() - add tensor @id of @nbytes bytes, on NVMe.
 * @init: NULL: the tensor reads as zeros (no I/O until it is first
 *        written); else @nbytes bytes written to its place now (borrowed
 *        for the call; any alignment).
 *
 * Return: 0, or
 *   -EEXIST  @id is registered;
 *   -EINVAL  @nbytes is 0; -EFBIG  @nbytes exceeds the pool's buffer
 *            size (the message names both);
 *   -ENOSPC/-EIO  writing @init failed: the tensor is not registered;
 *   -ENOMEM.
 * Threading: any thread.
 */
NVS_API int nvs_swapper_register(struct nvs_swapper *s, uint64_t id,
				 size_t nbytes, const void *init);

/**
 * nvs_swapper_unregister() - forget tensor @id and free its space and
 * buffer (waits for its I/O in flight; unwritten changes are dropped).
 * Return: 0, -ENOENT (unknown id), -EBUSY (acquired and not released).
 */
NVS_API int nvs_swapper_unregister(struct nvs_swapper *s, uint64_t id);

/**
 * nvs_swapper_prefetch() - start reading tensor @id into a pool buffer and
 * return; a no-op when it is already resident or being read. On a WRITING
 * tensor it keeps the buffer once the write ends (no read).
 *
 * When the pool is empty it first waits for a write-back to end, evicts
 * by itself (auto_evict), or waits for another thread to evict or
 * release (bounded by wait_ms).
 * Return: 0, or
 *   -ENOENT   unknown id;
 *   -EDEADLK  every pool buffer is held by an acquire of the calling
 *             thread (acquired and not released; an acquire belongs to
 *             the thread that made it), so nobody else can free one:
 *             returned at once. When other threads hold some, the call
 *             waits for them instead (-ETIMEDOUT after wait_ms);
 *   -ETIMEDOUT  no buffer within wait_ms.
 *             For both, nvs_last_error() gives the pool's state: buffers
 *             in all, held by acquires (by this thread), resident and
 *             released clean/dirty, in flight;
 *   -ENOSPC, -EIO...  no free buffer because a tensor whose write-back
 *             failed holds one (the message names it; free space and
 *             evict it again) - returned rather than waited on;
 *   -EFBIG    a tensor of a persistent set larger than this swapper's
 *             buffer_size (opened with a smaller one than it was saved
 *             with): no buffer can hold it; nvs_swapper_read() copies it;
 *   -errno    the read could not be submitted (the tensor stays ON_NVME).
 * A read that fails later is reported by the next acquire or wait of @id.
 */
NVS_API int nvs_swapper_prefetch(struct nvs_swapper *s, uint64_t id);

/**
 * nvs_swapper_try_prefetch() - nvs_swapper_prefetch() that never waits
 * for a buffer: it takes a free one or one a finished write-back gives
 * back, else returns -EAGAIN and changes nothing. For read-ahead that
 * should shrink, not stall, when buffers are short.
 * Return: 0, -EAGAIN, -ENOENT, or a submit error.
 */
NVS_API int nvs_swapper_try_prefetch(struct nvs_swapper *s, uint64_t id);

/**
 * nvs_swapper_acquire() - the resident data of tensor @id.
 * @ptr: receives the tensor's buffer (nbytes bytes, 4096-aligned, pinned),
 *       the caller's until nvs_swapper_release(); write to it and release
 *       with dirty = true to keep the change.
 *
 * Starts a read when the tensor is on NVMe; waits only for a read still
 * in flight for this tensor. A tensor whose write-back is in flight
 * (evicted dirty) is handed out at once, from the buffer being written
 * (the tensor is WRITING, acquired, until the write ends; it keeps the
 * buffer then): re-acquiring a layer just evicted, as the next training
 * step does with the last layer of this one, costs no wait and no read.
 * Changes made to it before that write ends may or may not reach the
 * disk with it; the release must then say dirty, and the next evict
 * waits for the write in flight and writes the tensor again.
 * Acquires nest: each needs a release.
 * Return: 0, or -ENOENT, -EDEADLK, -ETIMEDOUT as nvs_swapper_prefetch();
 *   -EIO (or another -errno) the read failed: the tensor is ON_NVME and a
 *        later acquire retries it (-EIO also when the swap file was cut
 *        short behind the swapper's back; the message names the id and
 *        the file);
 *   -EBADMSG  checksum mismatch: the data is not handed out; the message
 *        names the id and the file.
 * @ptr is NULL on failure.
 */
NVS_API int nvs_swapper_acquire(struct nvs_swapper *s, uint64_t id, void **ptr);

/**
 * nvs_swapper_acquire_blank() - nvs_swapper_acquire() of a tensor the
 * caller overwrites whole: a tensor on NVMe gets a pool buffer as it is,
 * not read and not zeroed (the bytes another tensor left there). Fill
 * all its bytes and release it dirty; a last release without dirty (the
 * caller changed its mind, or failed) gives the buffer back and leaves
 * the tensor as it was, on NVMe. Until then another acquire or
 * nvs_swapper_read() of it sees what the buffer holds. A tensor resident
 * or being written is handed out as nvs_swapper_acquire() does (its
 * data; release dirty to keep a change), one being read is waited for
 * (a failed read is not reported: it was not needed). For stores that
 * register a tensor and fill it at once (activations): no zero-fill of
 * a never-written tensor, no read of a written one.
 * Return: as nvs_swapper_acquire(), but no read error; -EROFS on a
 *   read-only set.
 */
NVS_API int nvs_swapper_acquire_blank(struct nvs_swapper *s, uint64_t id,
				      void **ptr);

/**
 * nvs_swapper_release() - end one acquire of @id.
 * @dirty: the caller changed the data; it will be written at eviction.
 * The tensor stays resident until evicted.
 * Return: 0, -ENOENT, or -EBUSY when @id is not acquired.
 */
NVS_API int nvs_swapper_release(struct nvs_swapper *s, uint64_t id, bool dirty);

/**
 * nvs_swapper_evict() - free tensor @id's buffer: start the write-back when
 * it is dirty (the buffer returns to the pool when the write ends), else
 * give the buffer back at once. A no-op on ON_NVME and WRITING tensors; a
 * READING one is waited for, then dropped; a WRITING one released dirty
 * since its write began (acquired during the write) is waited for, then
 * written again.
 * Return: 0, -ENOENT, -EBUSY (acquired), or the -errno of a write that
 * could not be submitted (the tensor stays resident and dirty).
 */
NVS_API int nvs_swapper_evict(struct nvs_swapper *s, uint64_t id);

/**
 * nvs_swapper_wait() - wait until tensor @id has no I/O in flight.
 * Return: 0, -ENOENT, or the -errno of its last read or write if that
 * failed and was not reported yet (reported once). After a failed write
 * the tensor is RESIDENT and dirty: evict again to retry.
 */
NVS_API int nvs_swapper_wait(struct nvs_swapper *s, uint64_t id);

/**
 * nvs_swapper_wait_all() - wait until no I/O is in flight.
 * Return: 0, or the first unreported -errno of any tensor (all of them are
 * reported by this call).
 */
NVS_API int nvs_swapper_wait_all(struct nvs_swapper *s);

/**
 * nvs_swapper_read() - copy tensor @id's bytes into @dst (@nbytes of room)
 * without taking a pool buffer: from its buffer when it is resident (or
 * being written back: the data as it stands, changes not yet written
 * included), zeros when it was never written, else read from NVMe
 * straight into @dst (any memory: unaligned or unpinned is staged by the
 * aio handle), its checksum checked when the swapper keeps them. The
 * tensor stays as it was (a read ahead in flight is waited for first).
 * Any size: a tensor of a persistent set larger than this swapper's
 * buffer_size, which nvs_swapper_acquire() refuses, is read so. Counted
 * in the stats' reads and bytes_read.
 * Return: 0, -EINVAL (NULL @s, or @dst with @nbytes), -ENOENT (no such
 * tensor), -ERANGE (@nbytes below its size), -EBADMSG (a checksum
 * mismatch: @dst holds what was read), a read's -errno, -ECHILD in a
 * forked child.
 */
NVS_API int nvs_swapper_read(struct nvs_swapper *s, uint64_t id, void *dst,
			     size_t nbytes);

/**
 * nvs_swapper_share_disk() - share the disks with the processes that hold
 * a flock on @path.
 * @path: a file or directory the processes that use the same disks each
 *        flock(2), shared or exclusive (this one usually does too);
 *        borrowed for the call.
 *
 * Several processes reading at the full queue depth each share a disk
 * unevenly. From now on the swapper's aio handles (the swap files' and
 * the added files', nvswap/backing.h) keep to nvs_aio_queue_share() of
 * their queue depth for N processes: the processes holding a flock on
 * @path (one holding it twice counts once), counted from /proc/locks now
 * and again when a read starts (acquire, prefetch, read) at most once a
 * second, by one thread, the swapper's lock dropped meanwhile; a process
 * that comes or goes changes the others' shares within about a second.
 * N is 1 where /proc/locks cannot be read; holders in a PID namespace
 * this process does not see (another container's) are not listed there
 * and not counted; on a filesystem whose device /proc/locks numbers
 * differently (overlayfs, btrfs) holders are matched by inode number
 * alone. A read-only set (NVS_PERSIST_READONLY) does this on its lock
 * file at create; nvswap.torch on the directory of weights it serves in
 * place. The depth split is the one the handle was made with: one a
 * launcher already split (nvs_launch_share_queue()) is split again.
 * Stats: queue_depth (the share in use), disk_sharers (N).
 * Return: N (1 or more), or -EINVAL (NULL argument), -errno of stat(2)
 * on @path, naming it, -ECHILD in a forked child.
 * Threading: any thread.
 */
NVS_API int nvs_swapper_share_disk(struct nvs_swapper *s, const char *path);

/** nvs_swapper_stats() - copy the counters. 0, -EINVAL for NULLs, or
 *  -ECHILD in a forked child (see nvs_swapper_create()). */
NVS_API int nvs_swapper_stats(const struct nvs_swapper *s,
			      struct nvs_swap_stats *st);

/** nvs_swapper_info() - tensor @id's state. 0, -ENOENT, -EINVAL, or
 *  -ECHILD in a forked child. */
NVS_API int nvs_swapper_info(const struct nvs_swapper *s, uint64_t id,
			     struct nvs_tensor_info *info);

/** nvs_swapper_dir() - the rank directory on path @i, NULL past the end. */
NVS_API const char *nvs_swapper_dir(const struct nvs_swapper *s, unsigned i);

/**
 * nvs_swapper_set_tag() - attach @len opaque bytes to tensor @id (for
 * example its dtype and shape), kept in a persistent set's manifest and
 * restored at reopen. @len 0 clears it. Any swapper.
 * Return: 0, -ENOENT, -EINVAL (@len > NVS_SWAPPER_TAG_MAX, NULL @tag
 * with @len > 0), -ENOMEM.
 */
NVS_API int nvs_swapper_set_tag(struct nvs_swapper *s, uint64_t id,
				const void *tag, size_t len);

/**
 * nvs_swapper_get_tag() - copy tensor @id's tag into @buf (up to @cap
 * bytes). Return: its length (may exceed @cap: then only @cap bytes are
 * copied), -ENOENT, -EINVAL.
 */
NVS_API int nvs_swapper_get_tag(const struct nvs_swapper *s, uint64_t id,
				void *buf, size_t cap);

/**
 * nvs_swapper_list() - the registered ids in ascending order.
 * @ids: receives up to @cap of them (may be NULL when @cap is 0).
 * Return: how many tensors are registered (may exceed @cap), -EINVAL,
 * -ENOMEM, -ECHILD.
 */
NVS_API int nvs_swapper_list(const struct nvs_swapper *s, uint64_t *ids,
			     size_t cap);

#ifdef __cplusplus
}
#endif

/* Persistent swap sets: checkpoints, steps, generations. */
#include "nvswap/persist.h"
/* The sets on disk, without a live swapper: check, list, relocate. */
#include "nvswap/swapset.h"
/* Tensors whose clean contents live in the caller's files. */
#include "nvswap/backing.h"

#endif /* NVSWAP_SWAPPER_H */
