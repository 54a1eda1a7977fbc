/* SPDX-License-Identifier: MIT */
/*
 * Pinned host memory: page-locked allocations from nvswap's own jemalloc
 * arena, a fixed pool of pinned buffers for the swappers, and the staging
 * copy. Pinned memory never pages out, is aligned for O_DIRECT, is backed
 * by huge pages where the kernel can, and is registered with CUDA when a
 * CUDA runtime is present at run time, so disk and device DMA reach it
 * without extra copies.
 */
#ifndef NVSWAP_BUFFERS_H
#define NVSWAP_BUFFERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Alignment of every pinned allocation and pool buffer (at least). */
#define NVS_PINNED_ALIGN 4096u

/* ------------------------------------------------------ pinned memory */

/** What pinned memory does with CUDA (see nvs_pinned_cuda_status()). */
enum nvs_cuda_state {
	NVS_CUDA_UNKNOWN = 0, /* not looked for yet: nothing allocated */
	NVS_CUDA_OFF,	      /* NVSWAP_CUDA=off in the environment */
	NVS_CUDA_ABSENT,      /* no CUDA runtime (libcudart) found */
	NVS_CUDA_ACTIVE,      /* pinned memory is cudaHostRegister()ed */
	NVS_CUDA_FAILED,      /* runtime found, registration failed (no
				 device or driver): not used from then on */
};

/**
 * struct nvs_pinned_stats - the process's pinned memory, for
 * nvs_pinned_stats(). Byte counts of allocations are what callers asked
 * for; locked bytes are what the arena mapped (allocations are rounded up
 * to jemalloc size classes, and freed memory stays mapped and locked for
 * reuse).
 */
struct nvs_pinned_stats {
	uint64_t bytes_in_use;		/* live allocations, drops on free */
	uint64_t high_water;		/* peak of bytes_in_use */
	uint64_t live_allocations;	/* allocations not yet freed */
	uint64_t bytes_locked;		/* mapped and mlocked; may stay */
	uint64_t limit;			/* cap on bytes_locked, 0 = none */
	uint64_t memlock_limit;		/* RLIMIT_MEMLOCK now; UINT64_MAX when
					  unlimited or CAP_IPC_LOCK */
	uint64_t unpinned_bytes;	/* mapped without lock (the opt-in
					  fallback when locking fails) */
	uint64_t unpinned_allocations;	/* live allocations not locked */
	uint64_t allocs;		/* successful allocations, ever */
	uint64_t frees;			/* successful frees, ever */
	uint64_t failed_allocs;		/* allocations that failed */
	uint64_t bad_frees;		/* frees of pointers that were not
					  live pinned allocations: ignored */
	uint64_t cuda_registered_bytes; /* of bytes_locked, registered */
	enum nvs_cuda_state cuda;
	uint32_t reserved32;
	uint64_t reserved[6];
};

/**
 * nvs_pinned_alloc() - page-locked, zero-filled memory.
 * @nbytes: bytes wanted, at least 1.
 * @err:    NULL, or receives 0 or the -errno below.
 *
 * The memory is mlock()ed (never paged out), aligned to NVS_PINNED_ALIGN
 * (so any O_DIRECT file accepts it), huge-page hinted, and registered with
 * CUDA when a CUDA runtime is present. It comes from a jemalloc arena
 * private to nvswap: the process's malloc() is not affected.
 *
 * Return: the memory (free it with nvs_pinned_free()), or NULL with
 * *@err set and nvs_last_error() explaining:
 *   -EINVAL  @nbytes is 0; or the environment holds a bad value, named
 *            in the message, and every allocation is refused:
 *            NVSWAP_CUDA or NVSWAP_ALLOW_UNPINNED no on/off spelling
 *            (README: "On/off variables"), NVSWAP_PINNED_LIMIT no size;
 *   -ENOMEM  @nbytes is larger than any allocation can be, the address
 *            space or the cap from nvs_pinned_set_limit() is exhausted,
 *            or RLIMIT_MEMLOCK is too small (the message gives the size
 *            asked, the limit, and how to raise it);
 *   -EPERM   the memlock limit is 0 for this unprivileged process.
 * When locking fails and unpinned memory was allowed
 * (nvs_pinned_allow_unpinned(), or NVSWAP_ALLOW_UNPINNED=1 in the
 * environment), the memory is returned unlocked instead, counted in
 * unpinned_bytes, and nvs_pinned_contains() is false for it.
 * Threading: any thread. After fork() the child can allocate and free
 * too, but memory locks are not inherited (POSIX): the child's copy of
 * earlier allocations is pageable, though the stats still count it.
 * Pools and handles made before a fork belong to the parent.
 */
NVS_API void *nvs_pinned_alloc(size_t nbytes, int *err);

/**
 * nvs_pinned_free() - give back memory from nvs_pinned_alloc().
 * @ptr: the pointer nvs_pinned_alloc() returned, or NULL (a no-op).
 *
 * The memory stays locked in the arena for the next allocation (a
 * mapping of 2 MiB or more with nothing live in it goes back to the OS
 * when a pool or the last aio handle is destroyed). A pointer
 * that is not a live pinned allocation (foreign memory, a view inside one,
 * one already freed) is ignored, counted in bad_frees, and described in
 * nvs_last_error(): nothing crashes.
 * Threading: any thread.
 */
NVS_API void nvs_pinned_free(void *ptr);

/**
 * nvs_pinned_contains() - is [@ptr, @ptr + @nbytes) page-locked memory
 * inside one live pinned allocation? (DeepNVMe's is_pinned(), views
 * included.) With @nbytes 0: does @ptr point into one.
 *
 * Return: true or false; false for NULL, for ranges that run past the end
 * of their allocation, and for unlocked memory from the unpinned fallback.
 * Threading: any thread; O(log n) in live allocations.
 */
NVS_API bool nvs_pinned_contains(const void *ptr, size_t nbytes);

/**
 * nvs_pinned_stats() - counters of the process's pinned memory.
 * Return: 0, or -EINVAL when @st is NULL.
 */
NVS_API int nvs_pinned_stats(struct nvs_pinned_stats *st);

/**
 * nvs_pinned_set_limit() - cap the bytes the pinned arena may lock.
 * @bytes: the cap, 0 for none (the default; NVSWAP_PINNED_LIMIT=N[K|M|G]
 *         in the environment sets the initial value).
 *
 * Allocations that would need more locked memory fail with -ENOMEM.
 * Memory already locked stays. Return: 0.
 */
NVS_API int nvs_pinned_set_limit(uint64_t bytes);

/**
 * nvs_pinned_allow_unpinned() - opt in (or out) to unlocked memory when
 * locking fails, instead of an error. The default is off, or on when the
 * environment has NVSWAP_ALLOW_UNPINNED=1 (or on, true, yes; any case).
 * Threading: any thread.
 */
NVS_API void nvs_pinned_allow_unpinned(bool allow);

/**
 * nvs_pinned_cuda_status() - one sentence on CUDA registration: which
 * runtime was found, or why none is used. The string is static and
 * stable once the state is no longer NVS_CUDA_UNKNOWN.
 */
NVS_API const char *nvs_pinned_cuda_status(void);

/* -------------------------------------------------------- buffer pool */

/**
 * struct nvs_pool_opts - a pool of equal pinned buffers.
 * Fill it with nvs_pool_opts_init() first, then set at least buffer_size
 * and buffer_count.
 */
struct nvs_pool_opts {
	size_t size;	       /* set by nvs_pool_opts_init */
	size_t buffer_size;    /* bytes per buffer, > 0 */
	unsigned buffer_count; /* buffers, > 0 */
	uint32_t alignment;    /* buffer start alignment, a power of two;
				  0 = NVS_PINNED_ALIGN */
	bool allow_unpinned;   /* use unlocked memory when locking fails
				  (also allowed process-wide, see
				  nvs_pinned_allow_unpinned()) */
	uint8_t reserved8[7];
	uint64_t reserved[6];
};

/** struct nvs_pool_stats - counters of one pool. */
struct nvs_pool_stats {
	size_t buffer_size;
	unsigned buffer_count;
	unsigned in_use;     /* buffers out now */
	unsigned high_water; /* most buffers out at once */
	bool pinned;	     /* the buffers are page-locked */
	uint64_t gets;	     /* buffers handed out, ever */
	uint64_t puts;	     /* buffers given back, ever */
	uint64_t waits;	     /* gets that had to wait for a put */
	uint64_t wait_ns;    /* time spent in those waits */
	uint64_t bad_puts;   /* puts refused: foreign or already back */
	uint64_t reserved[4];
};

struct nvs_pool;

/** nvs_pool_opts_init() - zero @opts and set its size field. */
NVS_API void nvs_pool_opts_init(struct nvs_pool_opts *opts);

/**
 * nvs_pool_create() - allocate @opts->buffer_count pinned buffers of
 * @opts->buffer_size bytes, all at once, zero-filled.
 * @opts: borrowed for the call.
 * @out:  receives the pool; NULL on failure.
 *
 * Return: 0, or
 *   -EINVAL  NULL argument, opts not from nvs_pool_opts_init(), a zero
 *            size or count, an alignment that is not a power of two, or a
 *            total size that overflows;
 *   -ENOMEM/-EPERM  as nvs_pinned_alloc() (memlock limit, cap).
 * Threading: any thread.
 */
NVS_API int nvs_pool_create(const struct nvs_pool_opts *opts,
			    struct nvs_pool **out);

/**
 * nvs_pool_destroy() - free the pool and its memory.
 * @pool: the pool, or NULL (a no-op returning 0).
 *
 * The buffers' memory goes back to the OS (unmapped, so no longer locked
 * or resident) unless an aio handle is alive, which may hold it
 * registered with io_uring; then it goes when the last handle is
 * destroyed.
 *
 * Return: 0, or -EBUSY while buffers are out or a thread waits in get:
 * then nothing is freed and the pool stays usable.
 */
NVS_API int nvs_pool_destroy(struct nvs_pool *pool);

/**
 * nvs_pool_get() - take a buffer, waiting until one is free.
 * @buf: receives the buffer (buffer_size bytes, aligned; contents are
 *       whatever the last user left). It belongs to the caller until
 *       nvs_pool_put().
 *
 * The most recently returned buffer is handed out first (LIFO: warm in
 * cache and TLB). Return: 0, or -EINVAL for NULL arguments.
 * Threading: any thread; several may wait, each put wakes one.
 */
NVS_API int nvs_pool_get(struct nvs_pool *pool, void **buf);

/**
 * nvs_pool_try_get() - nvs_pool_get() without waiting.
 * Return: 0, -EAGAIN when every buffer is out (nvs_last_error() says
 * so, as for every failure), -EINVAL for NULLs.
 */
NVS_API int nvs_pool_try_get(struct nvs_pool *pool, void **buf);

/**
 * nvs_pool_get_timeout() - nvs_pool_get() waiting at most @timeout_ms
 * milliseconds. Return: 0, -ETIMEDOUT, -EINVAL for NULLs.
 */
NVS_API int nvs_pool_get_timeout(struct nvs_pool *pool, void **buf,
				 unsigned timeout_ms);

/**
 * nvs_pool_put() - give a buffer back.
 * @buf: a buffer from this pool's get, exactly as handed out.
 *
 * Return: 0, or -EINVAL (nothing changes, counted in bad_puts) when @buf
 * is not one of this pool's buffers (foreign memory, a pointer inside a
 * buffer) or is already back in the pool (a double put).
 * Threading: any thread, not only the one that took it.
 */
NVS_API int nvs_pool_put(struct nvs_pool *pool, void *buf);

/** Bytes per buffer; 0 for NULL. */
NVS_API size_t nvs_pool_buffer_size(const struct nvs_pool *pool);
/** Number of buffers; 0 for NULL. */
NVS_API unsigned nvs_pool_buffer_count(const struct nvs_pool *pool);

/** nvs_pool_stats() - copy the pool's counters. 0, or -EINVAL. */
NVS_API int nvs_pool_stats(const struct nvs_pool *pool,
			   struct nvs_pool_stats *st);

/* ------------------------------------------------------- staging copy */

/**
 * nvs_copy() - copy @nbytes from @src to @dst (memcpy semantics: the two
 * ranges must not overlap).
 *
 * Any alignment and size; with @nbytes 0 nothing is touched and either
 * pointer may be NULL. Below a size threshold this is glibc memcpy;
 * above it, a vector loop (AVX-512, AVX2 or SSE2, whichever this CPU has,
 * chosen once at run time) with non-temporal stores, which do not pull the
 * destination into cache: right for staging buffers that go to a disk or
 * a device next. Threading: any thread.
 */
NVS_API void nvs_copy(void *dst, const void *src, size_t nbytes);

/**
 * nvs_copy_mt() - nvs_copy() split over up to @nthreads threads (the
 * caller's included) for large copies; @nthreads 0 = one per online CPU,
 * at most 8. Pieces are at least 8 MiB, so small copies run on the
 * caller alone. If threads cannot be started the caller copies the rest:
 * the copy always completes.
 */
NVS_API void nvs_copy_mt(void *dst, const void *src, size_t nbytes,
			 unsigned nthreads);

/** nvs_copy_impl() - "avx512", "avx2" or "sse2": the vector loop used. */
NVS_API const char *nvs_copy_impl(void);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_BUFFERS_H */
