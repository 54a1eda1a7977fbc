/* SPDX-License-Identifier: MIT */
/* Small inline helpers: rounding, clocks, full-length pread/pwrite. */
#ifndef NVS_INTERNAL_UTIL_H
#define NVS_INTERNAL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
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

#endif
