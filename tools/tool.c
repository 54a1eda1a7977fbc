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

/* The canonical entry of @o's option: the first with its flag and val. */
static const struct option *canonical(const struct option *longopts,
				      const struct option *o)
{
	const struct option *c = longopts;

	while (c->flag != o->flag || c->val != o->val)
		c++;
	return c;
}

static char fold(char c)
{
	return c == '_' ? '-' : c;
}

/* Damerau-Levenshtein distance (optimal string alignment: a swap of two
 * neighbours counts one) between @a[@na] and @b, '-' and '_' the same;
 * SIZE_MAX for names longer than any option. */
static size_t distance(const char *a, size_t na, const char *b)
{
	size_t nb = strlen(b), d[3][64], *p2 = d[0], *p1 = d[1], *cur = d[2];

	if (na >= 64 || nb >= 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= nb; j++)
		p1[j] = j;
	for (size_t i = 1; i <= na; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= nb; j++) {
			size_t v =
				p1[j - 1] + (fold(a[i - 1]) != fold(b[j - 1]));

			if (p1[j] + 1 < v)
				v = p1[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 &&
			    fold(a[i - 1]) == fold(b[j - 2]) &&
			    fold(a[i - 2]) == fold(b[j - 1]) &&
			    p2[j - 2] + 1 < v)
				v = p2[j - 2] + 1;
			cur[j] = v;
		}
		size_t *t = p2;
		p2 = p1;
		p1 = cur;
		cur = t;
	}
	return p1[nb];
}

const char *tool_closest_option(const char *name, size_t len,
				const struct option *longopts)
{
	const struct option *best = NULL;
	size_t bestd = SIZE_MAX;
	/* Close enough: one edit in a short name, two in a longer one,
	 * three in a long one; never the whole name. */
	size_t most = len <= 4 ? 1 : len < 12 ? 2 : 3;

	for (const struct option *o = longopts; o->name; o++) {
		size_t d = distance(name, len, o->name);

		if (d < bestd) {
			bestd = d;
			best = o;
		}
	}
	if (!best || bestd > most || bestd >= len)
		return NULL;
	return canonical(longopts, best)->name;
}

void tool_bad_option(const char *arg, const struct option *longopts, int ret,
		     int code)
{
	const char *name, *eq, *near;
	const struct option *hit = NULL;
	size_t len;
	int nhit = 0;

	if (tool_cleanup)
		tool_cleanup();
	if (!arg) {
		fprintf(stderr, "%s: %s '-%c'\n", tool_name,
			ret == ':' ? "missing value for option"
				   : "unknown option",
			optopt);
		goto see_help;
	}
	name = arg + 2;
	eq = strchr(name, '=');
	len = eq ? (size_t)(eq - name) : strlen(name);
	/* The option(s) getopt_long() matched: exactly, else the distinct
	 * options the abbreviation starts. */
	for (const struct option *o = longopts; o->name; o++) {
		if (strncmp(o->name, name, len))
			continue;
		if (strlen(o->name) == len) {
			hit = o;
			nhit = 1;
			break;
		}
		if (!hit || canonical(longopts, o) != canonical(longopts, hit))
			nhit++;
		if (!hit)
			hit = o;
	}
	if (nhit == 1)
		hit = canonical(longopts, hit);
	if (nhit == 1 && ret == ':') {
		fprintf(stderr, "%s: option '--%s' needs a value\n", tool_name,
			hit->name);
	} else if (nhit == 1 && hit->has_arg == no_argument && eq) {
		fprintf(stderr, "%s: option '--%s' takes no value\n", tool_name,
			hit->name);
	} else if (nhit > 1) {
		const char *sep = ":";

		fprintf(stderr, "%s: option '--%.*s' is ambiguous", tool_name,
			(int)len, name);
		/* Each option once, by its canonical name, also when only
		 * its aliases start so ("--io_"). */
		for (const struct option *o = longopts; o->name; o++) {
			const struct option *c = canonical(longopts, o);
			bool seen = false;

			if (strncmp(o->name, name, len))
				continue;
			for (const struct option *e = longopts; e != o; e++)
				seen |= !strncmp(e->name, name, len) &&
					canonical(longopts, e) == c;
			if (seen)
				continue;
			fprintf(stderr, "%s '--%s'", sep, c->name);
			sep = ",";
		}
		fputc('\n', stderr);
	} else if ((near = tool_closest_option(name, len, longopts))) {
		fprintf(stderr,
			"%s: unknown option '--%.*s'; did you mean "
			"'--%s'?\n",
			tool_name, (int)len, name, near);
	} else {
		fprintf(stderr, "%s: unknown option '--%.*s'\n", tool_name,
			(int)len, name);
	}
see_help:
	fprintf(stderr, "see %s --help\n", tool_name);
	exit(code);
}

int tool_getopt(int argc, char **argv, const char *shortopts,
		const struct option *longopts, int code)
{
	char opts[32];
	int c, before = optind;

	/* A leading ':' tells a missing value (':') from the rest ('?'). */
	snprintf(opts, sizeof(opts), ":%s", shortopts);
	opterr = 0;
	c = getopt_long(argc, argv, opts, longopts, NULL);
	if (c != '?' && c != ':')
		return c;
	/* A long option is always stepped over, and is then the argument
	 * before optind; a short one in a group ("-hx") is not. */
	if (optind > before && !strncmp(argv[optind - 1], "--", 2))
		tool_bad_option(argv[optind - 1], longopts, c, code);
	tool_bad_option(NULL, longopts, c, code);
}

double tool_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *tool_last_error(void)
{
	const char *e = nvs_last_error();
	size_t n =
		strncmp(e, "nvs_", 4)
			? 0
			: 4 + strspn(e + 4,
				     "abcdefghijklmnopqrstuvwxyz0123456789_");

	return n && !strncmp(e + n, ": ", 2) ? e + n + 2 : e;
}

int tool_version(void)
{
	printf("%s %s\n", tool_name, nvs_version());
	return 0;
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
