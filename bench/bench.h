/* SPDX-License-Identifier: MIT */
/* Small helpers shared by the benchmarks: a clock, medians, sizes. */
#ifndef NVSWAP_BENCH_H
#define NVSWAP_BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <nvswap/common.h>

static inline double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Sort @v (so v[0] is the minimum, v[n - 1] the maximum); its median. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A size argument: a positive byte count, K/M/G suffixes allowed. */
static inline int bench_parse_size(const char *s, size_t *out)
{
	uint64_t v;

	if (nvs_parse_size(s, &v) < 0 || v == 0 || v > SIZE_MAX)
		return -EINVAL;
	*out = (size_t)v;
	return 0;
}

/* Plain buffered read of the whole of @path's first @n bytes, to check
 * what a write left: 0, or -1 when it cannot be read or is shorter. */
static inline int bench_read_file(const char *path, unsigned char *b, size_t n)
{
	int fd = open(path, O_RDONLY);
	size_t done = 0;

	if (fd < 0)
		return -1;
	while (done < n) {
		ssize_t r = pread(fd, b + done, n - done, (off_t)done);
		if (r <= 0)
			break;
		done += (size_t)r;
	}
	close(fd);
	return done == n ? 0 : -1;
}

#endif
