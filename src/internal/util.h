/* SPDX-License-Identifier: MIT */
/* Small helpers: rounding, clocks, full-length pread/pwrite, opening a
 * path that may be a FIFO. */
#ifndef NVS_INTERNAL_UTIL_H
#define NVS_INTERNAL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/types.h>

#define NVS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define NVS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define NVS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline uint64_t nvs__round_down(uint64_t x, uint64_t a)
{
	return x - x % a;
}

static inline uint64_t nvs__round_up(uint64_t x, uint64_t a)
{
	return nvs__round_down(x + a - 1, a);
}

static inline uint64_t nvs__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * In @n elements of @size bytes at @base, sorted by the uintptr_t member at
 * byte offset @key_off, the index of the last one whose key is <= @key;
 * -1 when there is none. O(log n).
 */
long nvs__find_le(const void *base, size_t n, size_t size, size_t key_off,
		  uintptr_t key);

/*
 * pread/pwrite the whole range, retrying EINTR/EAGAIN and short transfers.
 * Returns the bytes moved (less than @len only at end of file on a read),
 * or -errno.
 */
ssize_t nvs__pio_full(int fd, void *buf, size_t len, off_t off, bool write);

/*
 * openat(2) of a path a user may have pointed anywhere, that never blocks:
 * opened with O_NONBLOCK (a plain open of a FIFO without a writer blocks
 * for ever, and of some character devices waits for a carrier), then
 * fstat'ed into @st, so the type checked is the descriptor's (no window
 * between a stat and the open). A regular file's or block device's
 * descriptor has O_NONBLOCK cleared again; any other is returned with it
 * set, for the caller to refuse by type (nvs__file_type()). @dirfd is a
 * directory's descriptor or AT_FDCWD. Returns the descriptor, or -1 with
 * errno set (from openat, fstat or fcntl; the descriptor then closed).
 * On -1, @st->st_mode is 0, but for the ENXIO of a FIFO without a reader
 * opened for writing or of a socket: then it is what is there, for the
 * caller to name (lstat'ed with O_NOFOLLOW in @flags, else stat'ed).
 */
int nvs__open_file(int dirfd, const char *path, int flags, mode_t mode,
		   struct stat *st);
/* Is @mode a regular file's or a block device's: what I/O may target. */
static inline bool nvs__file_io_ok(mode_t mode)
{
	return S_ISREG(mode) || S_ISBLK(mode);
}
/* "a FIFO", "a character device"...: what @mode says, for sentences. */
const char *nvs__file_type(mode_t mode);

/* The spellings every on/off environment variable takes (NVSWAP_GPU,
 * NVSWAP_CUDA, NVSWAP_ALLOW_UNPINNED), for sentences. */
#define NVS_ENV_SWITCH_VALUES                                                  \
	"1, on, true, yes or 0, off, false, no (any case; empty is unset)"

/*
 * The on/off switch in the environment variable @name: one of
 * NVS_ENV_SWITCH_VALUES into *@on (unset or empty: @dflt). Returns 0, or
 * -EINVAL for any other value, with "NAME=value is not ..." in @msg
 * (@len bytes) for the caller to keep and report: nothing is printed, and
 * nvs_last_error() is left alone.
 */
int nvs__env_switch(const char *name, bool dflt, bool *on, char *msg,
		    size_t len);

#endif
