/* SPDX-License-Identifier: MIT */
/*
 * The nvswap aio handle: DeepNVMe's aio_handle in C. Reads and writes byte
 * ranges of files with a pool of worker threads, each driving its own
 * asynchronous I/O engine (io_uring, libaio or pread/pwrite), with alignment
 * for O_DIRECT handled inside.
 */
#ifndef NVSWAP_AIO_H
#define NVSWAP_AIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Which kernel interface the handle's engines use. */
enum nvs_backend {
	NVS_BACKEND_AUTO = 0, /* probe: io_uring, then libaio, then psync */
	NVS_BACKEND_IO_URING, /* io_uring: one ring per worker, registered
				 buffers for pinned memory */
	NVS_BACKEND_LIBAIO,   /* Linux native AIO (io_submit/io_getevents) */
	NVS_BACKEND_PSYNC,    /* pread/pwrite on the worker thread */
};

/**
 * Who chose the backend a handle uses (nvs_aio_stats.backend_reason).
 * An explicit opts.backend always wins; the environment variable
 * NVSWAP_BACKEND steers only NVS_BACKEND_AUTO.
 */
enum nvs_backend_reason {
	NVS_BACKEND_BY_PROBE = 0, /* AUTO: the first of io_uring, libaio,
				     psync that works ("probe") */
	NVS_BACKEND_BY_OPTS,	  /* the caller's opts.backend ("explicit") */
	NVS_BACKEND_BY_ENV,	  /* AUTO steered by NVSWAP_BACKEND
				     ("NVSWAP_BACKEND") */
};

/** Whether files are opened with O_DIRECT. */
enum nvs_direct {
	NVS_DIRECT_AUTO = 0, /* O_DIRECT; buffered where the fs refuses it */
	NVS_DIRECT_ALWAYS,   /* O_DIRECT or fail with -EINVAL */
	NVS_DIRECT_NEVER,    /* buffered I/O through the page cache */
};

/**
 * Which user buffers an O_DIRECT op stages through the handle's pinned
 * bounce memory (copied in before a write, out after a read) instead of
 * handing them to the disk directly.
 */
enum nvs_staging {
	NVS_STAGE_AUTO = 0,   /* the default: misaligned buffers, and
				 unpinned ones too when the disk's queue
				 would split a block_size request of 4 KiB
				 pages (max_segments < block_size / 4096,
				 as on virtio disks) */
	NVS_STAGE_MISALIGNED, /* only buffers O_DIRECT cannot take */
	NVS_STAGE_UNPINNED,   /* also every buffer outside pinned memory
				   (DeepNVMe's behavior, without its mlock
				   per op) */
};

/**
 * Flags for nvs_aio_opts.uring_flags (io_uring backend only; the other
 * backends ignore them). Off by default.
 */
enum nvs_uring_flag {
	/** A kernel thread per ring polls for submissions: no syscall per
	 *  batch, one CPU busy while I/O flows. */
	NVS_URING_SQPOLL = 1u << 0,
	/** Busy-poll for completions instead of interrupts. Needs O_DIRECT
	 *  on a device with poll queues (NVMe with nvme.poll_queues > 0);
	 *  elsewhere ops fail with -EOPNOTSUPP. */
	NVS_URING_IOPOLL = 1u << 1,
	/** Do not register buffers or files with the ring (for comparison;
	 *  registration is otherwise automatic). */
	NVS_URING_NO_FIXED = 1u << 2,
};

/** Largest accepted block_size (bytes). */
#define NVS_AIO_MAX_BLOCK_SIZE (256u << 20)
/** Largest accepted queue_depth (io_uring's ring limit). */
#define NVS_AIO_MAX_QUEUE_DEPTH 32768u
/** Largest accepted intra_op_parallelism. */
#define NVS_AIO_MAX_PARALLELISM 256u
/** nvs_aio_opts.open_files value that turns the open-file cache off. */
#define NVS_AIO_FILES_OFF UINT32_MAX
/* nvs_aio_opts.inline_max: every op goes through a worker. */
#define NVS_AIO_INLINE_OFF UINT32_MAX

/**
 * struct nvs_aio_opts - settings of an aio handle.
 *
 * Always fill it with nvs_aio_opts_init() first, then change fields: the
 * leading @size lets later versions add fields without breaking callers.
 */
struct nvs_aio_opts {
	size_t size;		       /* set by nvs_aio_opts_init */
	uint32_t block_size;	       /* bytes per request, default 1 MiB;
					  a multiple of 512 */
	uint32_t queue_depth;	       /* requests in flight per worker,
					  default 128 */
	bool single_submit;	       /* one submit call per request,
					  default false */
	bool overlap_events;	       /* sliding window instead of
					  batch-and-drain, default false */
	uint32_t intra_op_parallelism; /* worker threads = slices per op,
					  default 1 */
	enum nvs_backend backend;      /* default NVS_BACKEND_AUTO; only
					  then does the environment variable
					  NVSWAP_BACKEND
					  (libaio|psync|io_uring|auto) choose
					  it: an explicit backend wins */
	enum nvs_direct direct;	       /* default NVS_DIRECT_AUTO */
	uint32_t bounce_bytes;	       /* bounce memory per worker for
					  unaligned user buffers; 0 = default
					  (8 blocks, at most 8 MiB) */
	uint32_t max_ops;	       /* op slots (ops submitted and not yet
					  finished, plus uncollected tickets);
					  0 = default 1024 */
	uint32_t open_files;	       /* files a handle keeps open for
					  path-based ops, checked against the
					  path's inode on every op; 0 = default
					  64; at most RLIMIT_NOFILE / 8 at
					  create; NVS_AIO_FILES_OFF = open and
					  close on every op */
	enum nvs_staging staging;      /* default NVS_STAGE_AUTO */
	uint32_t uring_flags;	       /* enum nvs_uring_flag bits,
					  default 0 */
	uint32_t inline_max;	       /* a synchronous op of at most this
					  many bytes, with nothing else in
					  flight, runs on the caller's
					  thread (pread/pwrite, no worker
					  hand-off; see
					  nvs_aio_submit_wait); 0 = default
					  min(block_size, 64 KiB);
					  NVS_AIO_INLINE_OFF = never */
	bool use_gds;		       /* device memory through cuFile
					  (GPUDirect Storage) instead of the
					  pinned bounce slots; create fails
					  with -ENODEV without cuFile (see
					  nvswap/gpu.h). Default false */
	uint8_t reserved8[7];	       /* zero */
	uint64_t reserved[5];	       /* zero */
};

/**
 * struct nvs_io_stats - timing of a one-shot nvs_aio_read/nvs_aio_write.
 */
struct nvs_io_stats {
	uint64_t bytes;	   /* bytes moved by the I/O */
	uint64_t io_ns;	   /* time inside the handle's read or write */
	uint64_t total_ns; /* the whole call: set-up, I/O, validation */
	uint64_t reserved[4];
};

/**
 * struct nvs_aio_stats - counters of a handle since its creation.
 */
struct nvs_aio_stats {
	uint64_t ops_completed;	     /* ops finished, successfully or not */
	uint64_t ops_failed;	     /* of those, how many failed */
	uint64_t bytes_read;	     /* payload bytes read by successful ops */
	uint64_t bytes_written;	     /* payload bytes written */
	uint64_t requests;	     /* block requests issued to the engines */
	uint64_t bounced_requests;   /* requests staged through bounce memory */
	uint64_t edge_bytes;	     /* unaligned head/tail bytes moved with
				     buffered I/O beside O_DIRECT */
	uint64_t retries;	     /* short transfers and EAGAIN/EINTR
				     resubmitted */
	uint64_t direct_fallbacks;   /* files opened buffered because their
				      filesystem refused O_DIRECT (AUTO) */
	uint64_t bounce_bytes_total; /* bounce memory held, all workers,
				     pinned (allocated once, at create) */
	bool bounce_locked;	     /* bounce memory is page-locked (false
				     when the memlock limit refused it) */
	uint64_t files_opened;	     /* open(2) calls for path-based ops */
	uint64_t files_reused;	     /* path-based ops served by the cache */
	enum nvs_backend backend;    /* the backend chosen (never AUTO) */
	uint32_t uring_setup_flags;  /* io_uring: IORING_SETUP_* in effect
				      (SINGLE_ISSUER, DEFER_TASKRUN...) */
	uint64_t fixed_buffer_requests; /* io_uring attempts on registered
					   buffers (READ/WRITE_FIXED) */
	uint64_t fixed_file_requests;	/* io_uring attempts on registered
					   files */
	uint64_t registered_bytes;	/* memory registered with the rings,
					   all workers */
	int32_t register_error;		/* io_uring: -errno of the first
				      registration the kernel refused
				      (-ENOMEM: the memlock limit), 0 if
				      none; the I/O then goes unregistered */
	/** Why this backend: each one tried, with the reason it was not
	 *  taken, e.g. "io_uring: seccomp ...; libaio: chosen". */
	char backend_notes[240];
	enum nvs_backend_reason backend_reason; /* who chose backend */
	uint32_t requests_high_water; /* most requests one worker had in
					 flight at once since create (at
					 most queue_depth; at most the
					 queue limit while one is set) */
	uint64_t inline_ops;   /* synchronous ops done on the caller's thread
				(see nvs_aio_opts.inline_max); counted in
				ops_completed, not in requests */
	uint64_t device_bytes; /* payload bytes of ops on device memory,
				  staged through the bounce slots */
	uint64_t gds_bytes;    /* payload bytes of ops on device memory
				  moved by cuFile (use_gds) */
	uint64_t busy_ns;      /* time with at least one op in flight (from
				  the submit of the first to the completion
				  of the last; iostat's %util over a wall
				  time): bytes_read / busy_ns is the rate the
				  disk gave while it was kept busy */
};

struct nvs_aio;

/**
 * nvs_aio_opts_init() - fill @opts with the defaults (DeepNVMe's).
 * @opts: borrowed for the call.
 */
NVS_API void nvs_aio_opts_init(struct nvs_aio_opts *opts);

/**
 * nvs_aio_create() - make a handle with its worker threads and engines.
 * @opts: borrowed for the call; NULL means the defaults.
 * @out:  receives the handle; NULL on failure.
 *
 * Return: 0, or
 *   -EINVAL      an option is out of range (block_size 0, not a multiple of
 *                512 or above NVS_AIO_MAX_BLOCK_SIZE; queue_depth 0 or above
 *                NVS_AIO_MAX_QUEUE_DEPTH or the kernel's aio-max-nr for
 *                libaio; intra_op_parallelism 0 or above
 *                NVS_AIO_MAX_PARALLELISM; an unknown enum; a bad
 *                NVSWAP_BACKEND value when the backend is AUTO), or
 *                @out is NULL;
 *   -EOPNOTSUPP  the backend asked for (in @opts, or by NVSWAP_BACKEND
 *                for AUTO) is not available here (the message says why:
 *                kernel.io_uring_disabled, a seccomp filter, ENOSYS...);
 *                AUTO without NVSWAP_BACKEND never fails this way, it
 *                falls through io_uring -> libaio -> psync;
 *   -ENOMEM      out of memory; -EAGAIN  threads or kernel AIO contexts
 *                could not be created.
 * Threading: any thread. The handle belongs to the process that made it:
 * its worker threads exist only there. In a child forked afterwards every
 * call that would wait for them (submit and every read/write, wait,
 * wait_op, poll_op, destroy) fails at once with -ECHILD ("made by the
 * parent process before fork()") instead of blocking forever; destroy
 * then frees nothing (the child's copy goes with the child). -ECHILD,
 * "no child processes", is the nearest errno to "wrong process" and no
 * other handle call returns it, so it can be tested for. A child makes
 * its own handle.
 */
NVS_API int nvs_aio_create(const struct nvs_aio_opts *opts,
			   struct nvs_aio **out);

/**
 * nvs_aio_destroy() - finish every pending op, then free the handle.
 * @h: the handle, or NULL (a no-op returning 0).
 *
 * Ops still in flight complete first; nothing is abandoned, nothing aborts.
 * Return: 0, or the -errno of the first failed op that no wait collected
 * (so a failed write-behind is never silent). The handle is freed either
 * way, except in a child forked after it was made: there -ECHILD and
 * nothing is freed (see nvs_aio_create()). No other thread may use @h
 * during or after this call.
 */
NVS_API int nvs_aio_destroy(struct nvs_aio *h);

/** Kind of a submitted op. */
enum nvs_aio_opcode {
	NVS_AIO_READ = 0,
	NVS_AIO_WRITE = 1,
};

/**
 * struct nvs_aio_io - one op for nvs_aio_submit().
 *
 * @buf is borrowed until the op completes (a read writes it, a write must
 * not change it meanwhile). @path is borrowed for the call only. When @path
 * is NULL, @fd names an open file, borrowed until completion. Any address,
 * offset and size work; unaligned parts are handled inside.
 */
struct nvs_aio_io {
	enum nvs_aio_opcode opcode;
	void *buf;
	size_t nbytes;
	const char *path;
	int fd;
	int64_t offset;
};

/**
 * nvs_aio_submit() - queue one op; the general form behind every call below.
 * @h:     handle.
 * @io:    the op, borrowed for the call (see struct nvs_aio_io).
 * @op_id: NULL, or receives a ticket for nvs_aio_wait_op()/nvs_aio_poll_op().
 *
 * A submit that returns 0 completes exactly once; one that fails never
 * completes and needs no wait. Errors found before any I/O are returned
 * here: the buffer is untouched and no file is changed (except that a
 * write may have created its file).
 *
 * Ops in flight together run in no set order, as DeepNVMe's do: their
 * requests go to the kernel side by side, so a read of a range that an
 * op still in flight writes may see the old bytes or the new, and two
 * writes of one range may land either way. Wait for a write (its ticket,
 * or nvs_aio_wait()) before reading or rewriting what it writes.
 *
 * Return: 0 when queued, or
 *   -EINVAL  NULL handle/io, NULL buffer with nbytes > 0, NULL path with
 *            fd < 0, negative offset, offset + nbytes overflowing, a read
 *            ending beyond the end of the file (buffer untouched), O_DIRECT
 *            refused with NVS_DIRECT_ALWAYS, an unknown opcode;
 *   -ENOSPC  an O_DIRECT write that extends its file could not
 *            preallocate the new part (full disk or quota): nothing was
 *            written;
 *   -ENOENT  missing file (read) or missing directory (write);
 *   -EACCES  permission denied; -EISDIR, -EBADF and other open(2) errors;
 *   -EAGAIN  every op slot holds a completed ticket nobody collected.
 * Blocks while all op slots are busy with ops in flight (backpressure).
 * Threading: any thread; several threads may share a handle.
 */
NVS_API int nvs_aio_submit(struct nvs_aio *h, const struct nvs_aio_io *io,
			   uint64_t *op_id);

/**
 * nvs_aio_submit_wait() - one synchronous op: submit @io and wait for it
 * alone (other ops in flight are neither waited for nor collected).
 * @h:  handle.
 * @io: the op (see struct nvs_aio_io).
 *
 * When nothing else is in flight and the op is one request's worth (at
 * most nvs_aio_opts.inline_max bytes, aligned memory and edges for
 * O_DIRECT), it runs on the calling thread with pread(2)/pwrite(2) and no
 * worker hand-off: the latency of fio's psync engine, counted in
 * nvs_aio_stats.inline_ops. Otherwise it goes through the workers like
 * nvs_aio_submit() and this call waits for it.
 *
 * Return: 0, or -errno as nvs_aio_submit() and nvs_aio_wait_op() (with
 * nvs_last_error() set). Threading: as nvs_aio_submit().
 */
NVS_API int nvs_aio_submit_wait(struct nvs_aio *h, const struct nvs_aio_io *io);

/**
 * nvs_aio_wait_op() - wait for the op behind a ticket and collect it.
 * Return: 0 when it succeeded, its -errno when it failed (with
 * nvs_last_error() set), -ENOENT for an unknown ticket or one already
 * collected (by this call, nvs_aio_poll_op() or nvs_aio_wait()).
 */
NVS_API int nvs_aio_wait_op(struct nvs_aio *h, uint64_t op_id);

/**
 * nvs_aio_poll_op() - collect the op behind a ticket if it has finished.
 * Return: -EINPROGRESS while it runs (the ticket stays valid); otherwise as
 * nvs_aio_wait_op().
 */
NVS_API int nvs_aio_poll_op(struct nvs_aio *h, uint64_t op_id);

/**
 * nvs_aio_wait() - wait until no op is in flight; collect them all.
 *
 * Return: how many ops finished since the previous wait (tickets not yet
 * collected included; they are collected now) — 0 when none were pending —
 * or the -errno of the first of them (in submission order) that failed,
 * with nvs_last_error() set. Either way nothing is left in flight.
 * Threading: any thread. Ops other threads submit meanwhile are waited
 * for too; with several submitting threads prefer tickets.
 */
NVS_API int nvs_aio_wait(struct nvs_aio *h);

/**
 * nvs_aio_pread() - read @nbytes at @file_offset of @path into @buf.
 * @async: true = queue and return 0 (DeepNVMe async_pread); false = queue
 *         then nvs_aio_wait() (DeepNVMe sync_pread).
 *
 * @buf may be CUDA device memory (nvswap/gpu.h): the bytes are staged
 * through the handle's pinned bounce slots and copied to the device on a
 * stream per worker, or moved by cuFile when the handle has use_gds. A
 * device op whose copy fails gives -EIO with the driver's error.
 *
 * Return: async: 0 or a submit error. Sync: what nvs_aio_wait() returns,
 * 1 when nothing else was pending. Errors as nvs_aio_submit().
 * A sync op with nothing else pending (no op in flight, none finished and
 * uncollected) runs on the calling thread when it can, as
 * nvs_aio_submit_wait() says.
 */
NVS_API int nvs_aio_pread(struct nvs_aio *h, void *buf, size_t nbytes,
			  const char *path, int64_t file_offset, bool async);
/**
 * nvs_aio_pwrite() - write @nbytes of @buf at @file_offset of @path.
 *
 * The file is created (mode 0600) when missing and never truncated: after
 * success it is exactly max(old size, file_offset + nbytes) bytes, and the
 * bytes outside the written range are unchanged. With O_DIRECT the part
 * beyond the old end is preallocated at submit (fallocate), so the file
 * has its final size while the write runs; if the write then fails, the
 * range reads back as whatever was written plus zeros. A full disk gives
 * -ENOSPC (at submit when preallocation finds it, else from the wait);
 * @buf is never modified. Return as nvs_aio_pread().
 *
 * @path is opened as DeepNVMe opens it: symlinks are followed and an
 * existing file is written in place, because users name their own files
 * through links (a dataset directory linked onto the NVMe mount). So do
 * not pass a predictable name in a directory other users can write: there
 * a planted link would redirect the write. Create such a file yourself
 * first with O_CREAT | O_EXCL | O_NOFOLLOW (as nvswap-io does; in a
 * sticky directory such as /tmp nobody else can then replace it), or
 * pass its descriptor (nvs_aio_pwrite_fd, as the swapper does).
 *
 * Descriptors the handle caches (@open_files) are never what fails a
 * call: on EMFILE/ENFILE idle ones are closed and the open retried once.
 * Every open, and a preallocation that finds the disk full, first closes
 * idle ones whose file was deleted, so deleting a file frees its blocks
 * (after such a close a full disk is reported by the write, from the
 * wait, rather than at submit). A write that still meets -ENOSPC (one
 * through the page cache to a cached file, which neither opens nor
 * preallocates) closes them too, and its sentence then says "a retry may
 * find space": the retry does.
 */
NVS_API int nvs_aio_pwrite(struct nvs_aio *h, const void *buf, size_t nbytes,
			   const char *path, int64_t file_offset, bool async);
/** nvs_aio_pread(h, buf, nbytes, path, file_offset, false). */
NVS_API int nvs_aio_sync_pread(struct nvs_aio *h, void *buf, size_t nbytes,
			       const char *path, int64_t file_offset);
/** nvs_aio_pwrite(h, buf, nbytes, path, file_offset, false). */
NVS_API int nvs_aio_sync_pwrite(struct nvs_aio *h, const void *buf,
				size_t nbytes, const char *path,
				int64_t file_offset);
/** nvs_aio_pread(h, buf, nbytes, path, file_offset, true). */
NVS_API int nvs_aio_async_pread(struct nvs_aio *h, void *buf, size_t nbytes,
				const char *path, int64_t file_offset);
/** nvs_aio_pwrite(h, buf, nbytes, path, file_offset, true). */
NVS_API int nvs_aio_async_pwrite(struct nvs_aio *h, const void *buf,
				 size_t nbytes, const char *path,
				 int64_t file_offset);
/**
 * nvs_aio_pread_fd() - nvs_aio_pread() on an open file descriptor.
 * @fd: open for reading, borrowed until completion. When it has O_DIRECT,
 *      unaligned parts are read through a second, buffered descriptor
 *      opened on the same file; otherwise I/O goes through the page cache.
 */
NVS_API int nvs_aio_pread_fd(struct nvs_aio *h, void *buf, size_t nbytes,
			     int fd, int64_t file_offset, bool async);
/** nvs_aio_pwrite_fd() - nvs_aio_pwrite() on an open file descriptor. */
NVS_API int nvs_aio_pwrite_fd(struct nvs_aio *h, const void *buf, size_t nbytes,
			      int fd, int64_t file_offset, bool async);

/* Getters: the settings the handle runs with (after NVSWAP_BACKEND);
 * 0, false or "" for a NULL handle. Threading: any thread. */
NVS_API uint32_t nvs_aio_get_block_size(const struct nvs_aio *h);
NVS_API uint32_t nvs_aio_get_queue_depth(const struct nvs_aio *h);
/* The requests in flight per worker now: nvs_aio_set_queue_limit()'s, else
 * queue_depth. */
NVS_API uint32_t nvs_aio_get_queue_limit(const struct nvs_aio *h);
NVS_API bool nvs_aio_get_single_submit(const struct nvs_aio *h);
NVS_API bool nvs_aio_get_overlap_events(const struct nvs_aio *h);
NVS_API uint32_t nvs_aio_get_intra_op_parallelism(const struct nvs_aio *h);
/**
 * nvs_aio_set_queue_limit() - requests in flight per worker from now on.
 * @depth: 1 to the handle's queue_depth; 0: queue_depth again.
 *
 * For a process that shares its disks with others (nvs_aio_queue_share()):
 * the rings and slots stay sized for queue_depth, only fewer are used.
 * Requests in flight are not touched; each worker keeps to the new limit
 * from its next submission.
 * Return: 0, or -EINVAL (NULL handle, @depth above queue_depth).
 * Threading: any thread, while ops run.
 */
NVS_API int nvs_aio_set_queue_limit(struct nvs_aio *h, uint32_t depth);

/**
 * nvs_aio_queue_share() - one process's share of a queue depth that
 * @nprocs processes use on the same disks at once.
 *
 * Several processes at the full depth each share a disk unevenly
 * (bench/RESULTS.md: one can get half what another gets); their shares
 * of one depth do not, and together keep the device's queue as full as
 * one process would.
 * Return: @queue_depth / @nprocs, but never below NVS_AIO_SHARE_MIN (nor
 * above @queue_depth: a depth of 8, DeepSpeed's default, is not split);
 * @queue_depth for @nprocs of 0 or 1.
 * Threading: any thread (a pure function).
 */
NVS_API uint32_t nvs_aio_queue_share(uint32_t queue_depth, unsigned nprocs);
/* The least depth nvs_aio_queue_share() leaves a process: requests of
 * 1 MiB, 8 in flight, keep a disk's queue busy for one process. */
#define NVS_AIO_SHARE_MIN 8u

/**
 * nvs_aio_get_alignment() - buffer, offset and size alignment that lets
 * any op go to the disk without bouncing on common devices (4096, or the
 * page size when larger). Other values work too, through bounce memory.
 */
NVS_API uint32_t nvs_aio_get_alignment(const struct nvs_aio *h);
/**
 * nvs_backend_name() - "io_uring", "libaio", "psync", or "auto" for
 * NVS_BACKEND_AUTO and any other value: the names NVSWAP_BACKEND takes
 * (and fio's --ioengine names for the same engines). Threading: any.
 */
NVS_API const char *nvs_backend_name(enum nvs_backend backend);
/**
 * nvs_backend_reason_name() - "probe", "explicit" or "NVSWAP_BACKEND"
 * ("unknown" for other values). Threading: any.
 */
NVS_API const char *nvs_backend_reason_name(enum nvs_backend_reason why);
/** Name of the backend in use: "io_uring", "libaio", "psync",
 *  "fault(io_uring)"...; nvs_aio_stats.backend_reason and backend_notes
 *  say why. */
NVS_API const char *nvs_aio_backend_name(const struct nvs_aio *h);
/** Copy the handle's counters into @st. Return 0, or -EINVAL for NULLs. */
NVS_API int nvs_aio_get_stats(const struct nvs_aio *h,
			      struct nvs_aio_stats *st);

/**
 * nvs_aio_new_cpu_locked_buffer() - page-locked memory for I/O (DeepNVMe
 * new_cpu_locked_tensor): nvs_pinned_alloc() of @nbytes, zero-filled and
 * aligned for O_DIRECT, so ops on it go to the disk without bouncing.
 *
 * Every handle shares the process's one pinned registry: a buffer from
 * one handle may be freed through another, or with nvs_pinned_free().
 * Return: the buffer, or NULL with errno and nvs_last_error() set:
 * EINVAL (NULL handle, @nbytes 0), ENOMEM/EPERM as nvs_pinned_alloc()
 * (the memlock limit, with how to raise it).
 */
NVS_API void *nvs_aio_new_cpu_locked_buffer(struct nvs_aio *h, size_t nbytes);

/**
 * nvs_aio_free_cpu_locked_buffer() - give back a pinned buffer (DeepNVMe
 * free_cpu_locked_tensor). Return: 0, or -EINVAL for a NULL argument or a
 * pointer that is not a live pinned allocation (nothing is freed).
 */
NVS_API int nvs_aio_free_cpu_locked_buffer(struct nvs_aio *h, void *ptr);

/**
 * nvs_aio_is_pinned() - DeepNVMe is_pinned(): is [@ptr, @ptr + @nbytes)
 * inside one live pinned allocation (views included)? Same answer as
 * nvs_pinned_contains(); false for a NULL handle.
 */
NVS_API bool nvs_aio_is_pinned(const struct nvs_aio *h, const void *ptr,
			       size_t nbytes);

/**
 * struct nvs_dio_align - what O_DIRECT needs for one file.
 */
struct nvs_dio_align {
	uint32_t mem_align;    /* buffer address alignment */
	uint32_t offset_align; /* file offset and length alignment */
	bool from_statx;       /* true: STATX_DIOALIGN; false: the device's
				  logical block size or 4096 */
};

/**
 * nvs_dio_alignment() - query the O_DIRECT alignment of an open file.
 * Return: 0, or -EBADF/-EINVAL. Never a hard-coded 512.
 */
NVS_API int nvs_dio_alignment(int fd, struct nvs_dio_align *out);

/**
 * nvs_aio_read() - one-shot read with a temporary handle (DeepNVMe
 * aio_read): the whole of @nbytes from offset 0 of @path into @buf.
 * @opts:     handle settings, NULL for the defaults.
 * @validate: re-read the file with plain buffered I/O and compare;
 *            a mismatch gives -EBADMSG.
 * @stats:    NULL, or receives the I/O time and the whole call's time.
 * Return: 0, or -errno as nvs_aio_create()/nvs_aio_submit(), -EBADMSG.
 * Nothing is printed.
 */
NVS_API int nvs_aio_read(void *buf, size_t nbytes, const char *path,
			 const struct nvs_aio_opts *opts, bool validate,
			 struct nvs_io_stats *stats);
/**
 * nvs_aio_write() - one-shot write of @buf to offset 0 of @path (DeepNVMe
 * aio_write); @validate re-reads the file buffered and compares (-EBADMSG).
 */
NVS_API int nvs_aio_write(const void *buf, size_t nbytes, const char *path,
			  const struct nvs_aio_opts *opts, bool validate,
			  struct nvs_io_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_AIO_H */
