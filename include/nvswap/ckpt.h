/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint writer: streams arbitrary caller memory (pageable,
 * misaligned, any length) into one new file with O_DIRECT, through pinned
 * staging buffers and the aio handle, so that copying buffer k+1 overlaps
 * the write of buffer k. The file appears under its final name only when
 * complete and durable (temp name, fsync, rename, fsync of the directory).
 * nvs_ckpt_write_async() defers the copy itself to the writer's own
 * thread, so the caller's next step (computing the next buffer) overlaps
 * it too.
 */
#ifndef NVSWAP_CKPT_H
#define NVSWAP_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/aio.h"
#include "nvswap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Default bytes per staging buffer (nvs_ckpt_opts.buffer_size). */
#define NVS_CKPT_BUFFER_SIZE_DEFAULT (16u << 20)
/** Default number of staging buffers (nvs_ckpt_opts.buffer_count). */
#define NVS_CKPT_BUFFER_COUNT_DEFAULT 4u
/** Most staging buffers one writer takes. */
#define NVS_CKPT_MAX_BUFFERS 64u

/**
 * struct nvs_ckpt_opts - settings of a checkpoint writer.
 * Fill it with nvs_ckpt_opts_init() first, then change fields.
 */
struct nvs_ckpt_opts {
	size_t size;		/* set by nvs_ckpt_opts_init */
	size_t buffer_size;	/* bytes per staging buffer: one write op;
				  a multiple of 4096, default 16 MiB */
	unsigned buffer_count;	/* staging buffers, 2..NVS_CKPT_MAX_BUFFERS,
				  default 4: one fills while the others are
				  written */
	bool fsync;		/* default true: fsync the file before the
				  rename and the directory after it; false
				  leaves durability to the kernel (the
				  rename still publishes only a complete
				  file, but a crash may lose it) */
	enum nvs_direct direct; /* default NVS_DIRECT_AUTO: O_DIRECT, buffered
				   where the filesystem refuses it (tmpfs) */
	uint32_t mode;		/* permission bits of the new file, default
				  0666; the umask applies, as for fopen() */
	uint64_t size_hint;	/* expected file size, 0 = unknown; when set
				  the file is preallocated to it at open
				  (fallocate), so a full disk fails the
				  open, and trimmed to the bytes written at
				  close */
	struct nvs_aio *aio;	/* NULL (default): the writer makes its own
				  handle (1 MiB blocks); else a handle
				  borrowed until close/abort, whose other
				  ops are neither waited for nor collected */
	uint64_t reserved[6];	/* zero */
};

struct nvs_ckpt_writer;

/**
 * nvs_ckpt_opts_init() - fill @opts with the defaults.
 * @opts: borrowed for the call.
 */
NVS_API void nvs_ckpt_opts_init(struct nvs_ckpt_opts *opts);

/**
 * nvs_ckpt_writer_open() - start writing a new file that will be @path.
 * @path: the final name, borrowed for the call. The data goes to
 *        "<path>.tmp.<pid>.<n>" (created with O_EXCL, in the same
 *        directory) until nvs_ckpt_close() renames it; a file already
 *        at @path stays untouched until then.
 * @opts: borrowed for the call; NULL means the defaults.
 * @out:  receives the writer; NULL on failure.
 *
 * Return: 0, or
 *   -EINVAL  NULL or empty @path, NULL @out, @opts not from
 *            nvs_ckpt_opts_init(), buffer_size 0 or not a multiple of
 *            4096, buffer_count out of range, an unknown direct mode, or
 *            NVS_DIRECT_ALWAYS where the filesystem refuses O_DIRECT;
 *   -ENOENT  the directory of @path does not exist;
 *   -ENOSPC  (or -EDQUOT, -EFBIG) size_hint could not be preallocated;
 *   -EACCES, -ENOTDIR, -ENAMETOOLONG, -EROFS... from creating the file;
 *   -ENOMEM  out of memory (staging buffers: unlocked memory is used
 *            when the memlock limit refuses locked memory);
 *   others as nvs_aio_create() for the writer's own handle.
 * A failed open leaves no file behind.
 * Threading: any thread. A writer is used by one thread at a time.
 */
NVS_API int nvs_ckpt_writer_open(const char *path,
				 const struct nvs_ckpt_opts *opts,
				 struct nvs_ckpt_writer **out);

/**
 * nvs_ckpt_write() - append @n bytes of @p to the file.
 * @p: any memory, any alignment; borrowed for the call only (the bytes
 *     are copied into a staging buffer before this returns, so the
 *     caller may reuse @p at once).
 *
 * Blocks only while every staging buffer is being written (backpressure).
 * Writes are issued one staging buffer at a time; errors of an earlier
 * buffer's write may surface here or at close.
 * While deferred copies (nvs_ckpt_write_async()) are queued, a write of
 * up to NVS_CKPT_SIDE_MAX bytes is copied into a side buffer and queued
 * behind them (the bytes keep their order in the file); a larger one
 * first waits for the queue to drain, then copies on the caller.
 * Return: 0, or
 *   -EINVAL  NULL writer, NULL @p with @n > 0;
 *   -ENOSPC  the disk is full (-EDQUOT, -EFBIG likewise), -EIO...: a
 *            write failed. The error is sticky: every later write and
 *            nvs_ckpt_close() return it too; the file never appears.
 */
NVS_API int nvs_ckpt_write(struct nvs_ckpt_writer *w, const void *p, size_t n);

/** Deferred copies one writer queues at most (nvs_ckpt_write_async()). */
#define NVS_CKPT_ASYNC_MAX 256u
/** Largest nvs_ckpt_write() that joins the queue through a side buffer. */
#define NVS_CKPT_SIDE_MAX (256u << 10)

/**
 * nvs_ckpt_write_async() - append @n bytes of @p, copied later.
 * @p:      any memory, any alignment; borrowed until the copy is done:
 *          it must stay valid and unchanged until nvs_ckpt_async_done()
 *          reaches *@ticket, or until nvs_ckpt_wait(), nvs_ckpt_close()
 *          or nvs_ckpt_abort() returns.
 * @ticket: receives the copy's number (1, 2, ... in the order of the
 *          calls; nvs_ckpt_write() calls that join the queue take
 *          numbers too), or 0 when the bytes were copied before the
 *          call returned; may be NULL.
 *
 * The copy into the staging buffers and the submits run on a thread the
 * writer starts at its first deferred write and joins at close or abort,
 * in call order, so the caller computes its next buffer meanwhile. Blocks
 * while NVS_CKPT_ASYNC_MAX copies are queued. Where that thread cannot be
 * started (or its side buffer allocated) the copy runs on the caller and
 * *@ticket is 0. Errors are sticky as for nvs_ckpt_write(): a failed copy
 * or write is returned by the next write, nvs_ckpt_wait() or close; the
 * copies queued after it are skipped (and count as done).
 * Return: 0, or the errors of nvs_ckpt_write().
 * Threading: the writer's one-thread-at-a-time rule holds for this call
 * too; the copy thread is the writer's own.
 */
NVS_API int nvs_ckpt_write_async(struct nvs_ckpt_writer *w, const void *p,
				 size_t n, uint64_t *ticket);

/**
 * nvs_ckpt_async_done() - how many queued copies are done: every ticket
 * up to the returned number may be reused by its owner. 0 for NULL. Safe
 * from any thread while @w is open (an atomic read).
 */
NVS_API uint64_t nvs_ckpt_async_done(const struct nvs_ckpt_writer *w);

/**
 * nvs_ckpt_wait() - wait until every queued copy is done.
 * Return: 0, -EINVAL for NULL, or the sticky error of a failed write.
 */
NVS_API int nvs_ckpt_wait(struct nvs_ckpt_writer *w);

/**
 * nvs_ckpt_offset() - bytes accepted by nvs_ckpt_write() and
 * nvs_ckpt_write_async() so far, queued copies included (the file's size
 * once closed); 0 for NULL.
 */
NVS_API uint64_t nvs_ckpt_offset(const struct nvs_ckpt_writer *w);

/**
 * nvs_ckpt_temp_path() - the name the data is written under until close;
 * "" for NULL. Valid until close or abort.
 */
NVS_API const char *nvs_ckpt_temp_path(const struct nvs_ckpt_writer *w);

/**
 * nvs_ckpt_close() - finish the file and publish it under its final name.
 * @w: the writer; freed by this call whatever it returns.
 *
 * Finishes the queued copies, writes the last staging buffer (its
 * unaligned tail through a buffered descriptor), waits for every write, trims a preallocation to the bytes
 * written, fsyncs the file, renames it to @path (replacing a file there
 * atomically) and fsyncs the directory.
 * Return: 0, or
 *   -EINVAL  NULL writer;
 *   the sticky error of a failed write, or -errno of the final write,
 *   ftruncate, fsync, close or rename (-ENOSPC, -EIO...): then the temp
 *   file is removed and a file that was at @path is untouched;
 *   -errno of the directory's fsync: the only failure after which the
 *   new file is at @path (complete, but its name may not survive a
 *   crash).
 */
NVS_API int nvs_ckpt_close(struct nvs_ckpt_writer *w);

/**
 * nvs_ckpt_abort() - give up: skip the queued copies not yet started,
 * wait for the one running and the writes in flight, remove the temp
 * file, free @w. The final name is never touched.
 * @w: the writer, or NULL (a no-op returning 0).
 * Return: 0, or -errno when the temp file could not be removed (it is
 * still named in nvs_last_error()); @w is freed either way.
 */
NVS_API int nvs_ckpt_abort(struct nvs_ckpt_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_CKPT_H */
