// SPDX-License-Identifier: MIT
/*
 * The command-line tools' shared helpers (see tool.h).
 */
#include "tool.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *tool_name = "nvswap";
void (*tool_cleanup)(void);

void tool_die(int code, const char *fmt, ...)
{
	va_list ap;

	if (tool_cleanup)
		tool_cleanup();
	fprintf(stderr, "%s: ", tool_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(code);
}

double tool_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int tool_cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

int tool_parse_size(const char *v, size_t *out)
{
	uint64_t n;

	if (!v || nvs_parse_size(v, &n) < 0 || n == 0 || n > SIZE_MAX)
		return -EINVAL;
	*out = (size_t)n;
	return 0;
}

int tool_parse_uint(const char *v, unsigned lo, unsigned *out)
{
	const unsigned hi = TOOL_UINT_MAX;
	const char *d = v ? v + (*v == '-') : NULL;
	char *end;
	unsigned long n;

	/* Digits only: strtoul would also take leading space and "+5", and
	 * wrap "-1" around. A minus sign before digits names a number out
	 * of range, not "not a number". */
	if (!v || *d < '0' || *d > '9' || d[strspn(d, "0123456789")])
		return -EINVAL;
	errno = 0;
	n = strtoul(d, &end, 10);
	if (*v == '-' || errno || n < lo || n > hi)
		return -ERANGE;
	*out = (unsigned)n;
	return 0;
}

size_t tool_size_arg(const char *opt, const char *v)
{
	size_t n;

	if (tool_parse_size(v, &n) < 0)
		tool_die(2,
			 "%s: bad size '%s' (a number with an optional K, M "
			 "or G suffix, e.g. 512K, 1M, 4G)",
			 opt, v);
	return n;
}

unsigned tool_uint_arg(const char *opt, const char *v, unsigned lo)
{
	unsigned n;
	int ret = tool_parse_uint(v, lo, &n);

	/* Digits that name a number outside the range are not "not a
	 * whole number": say which numbers are. */
	if (ret == -ERANGE)
		tool_die(2, "%s: '%s' is out of range (from %u to %u)", opt, v,
			 lo, TOOL_UINT_MAX);
	if (ret < 0)
		tool_die(2, "%s: '%s' is not a whole number (from %u to %u)",
			 opt, v, lo, TOOL_UINT_MAX);
	return n;
}

int tool_backend(const char *v)
{
	if (!strcmp(v, "auto"))
		return NVS_BACKEND_AUTO;
	if (!strcmp(v, "io_uring"))
		return NVS_BACKEND_IO_URING;
	if (!strcmp(v, "libaio"))
		return NVS_BACKEND_LIBAIO;
	if (!strcmp(v, "psync"))
		return NVS_BACKEND_PSYNC;
	return -1;
}

void tool_pattern(unsigned char *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i + 8 <= n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (size_t i = n & ~(size_t)7; i < n; i++)
		p[i] = (unsigned char)(i * 31);
}

const char *tool_size_str(uint64_t n, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && n && n % 1024 == 0) {
		n /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)n);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)n, units[u]);
	return buf;
}

const char *tool_human(uint64_t n, char *buf, size_t len)
{
	if (n >= (1ull << 30))
		snprintf(buf, len, "%.1f GiB", (double)n / (1ull << 30));
	else if (n >= (1ull << 20))
		snprintf(buf, len, "%.1f MiB", (double)n / (1ull << 20));
	else if (n >= 1024)
		snprintf(buf, len, "%.1f KiB", (double)n / 1024);
	else
		snprintf(buf, len, "%llu bytes", (unsigned long long)n);
	return buf;
}
