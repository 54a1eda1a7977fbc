/* SPDX-License-Identifier: MIT */
/*
 * What the command-line tools share and the library does not offer:
 * fatal errors that clean up first, a monotonic clock, option and
 * argument parsing with messages that say what was expected (and which
 * option was meant), and a test pattern. Not part
 * of the library; public API only.
 */
#ifndef NVSWAP_TOOL_H
#define NVSWAP_TOOL_H

#include <nvswap/nvswap.h>

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Prefixes every message: set it first thing in main(). */
extern const char *tool_name;
/* Called by tool_die() before it exits: removes temporary files, ends a
 * progress line. NULL = nothing. */
extern void (*tool_cleanup)(void);

/* Print "NAME: message" on stderr, run tool_cleanup, exit with @code
 * (1: the run failed, 2: bad usage). */
void tool_die(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));

/*
 * getopt_long() for the tools' one option style. A table lists each
 * option's canonical spelling, with dashes (--io-size), before its
 * aliases (ds_io's --io_size), so that messages name the canonical one.
 * Returns as getopt_long() (@shortopts without a leading ':'), except
 * that a bad option never comes back: an unknown one (with the closest
 * option as "did you mean"), an ambiguous abbreviation, a missing value
 * or a value given to a flag is one line on stderr, then
 * "see NAME --help", then tool_cleanup and exit(@code).
 */
int tool_getopt(int argc, char **argv, const char *shortopts,
		const struct option *longopts, int code);

/* What tool_getopt() does with the option getopt_long() just refused:
 * @ret is what it returned ('?', or ':' for a missing value when its
 * optstring starts with ':'), @arg the argument of a long option
 * ("--io-sise=4M"), NULL for a short one (optopt). For a tool with a
 * getopt loop of its own (opterr = 0). */
void tool_bad_option(const char *arg, const struct option *longopts, int ret,
		     int code) __attribute__((noreturn));

/* The canonical spelling of the option in @longopts closest to the
 * @len bytes at @name (without "--"; '-' and '_' count as the same),
 * when it is close enough to be the one meant, else NULL. */
const char *tool_closest_option(const char *name, size_t len,
				const struct option *longopts);

/* nvs_last_error() in the user's words: without the library function's
 * name it starts with ("nvs_config_load: "), which names where in the
 * library, not what the user gave. */
const char *tool_last_error(void);

/* --version: "NAME VERSION" on stdout (the version of the library the
 * tool runs with, nvs_version(), which the tools ship with); returns 0,
 * the exit status. */
int tool_version(void);

/* qsort comparison of doubles, ascending. */
int tool_cmp_double(const void *x, const void *y);

/* Seconds on CLOCK_MONOTONIC. */
double tool_now(void);

/* A size such as 512K, 1M, 4G (nvs_parse_size), not zero, into @out:
 * 0, or -EINVAL (@out unchanged) for anything else. The parsers return
 * rather than die so that the fuzz targets (tests/fuzz) can call them. */
int tool_parse_size(const char *v, size_t *out);

/* The largest whole-number argument. */
#define TOOL_UINT_MAX (1u << 20)

/* A whole number from @lo to TOOL_UINT_MAX, in decimal digits only (no
 * sign or space), into @out: 0, -ERANGE for a number outside the range (a
 * minus sign before digits included), or -EINVAL for anything else (@out
 * unchanged on failure). */
int tool_parse_uint(const char *v, unsigned lo, unsigned *out);

/* tool_parse_size(), dying (2) naming @opt on a bad size. */
size_t tool_size_arg(const char *opt, const char *v);

/* tool_parse_uint(), dying (2) naming @opt on a bad number. */
unsigned tool_uint_arg(const char *opt, const char *v, unsigned lo);

/* "auto", "io_uring", "libaio" or "psync"; -1 for anything else. */
int tool_backend(const char *v);

/* Fill @p with a xorshift sequence from @seed: data no disk compresses
 * or dedupes, and different for each seed. */
void tool_pattern(unsigned char *p, size_t n, uint64_t seed);

/* "1M", "8M", "512K", "3000" (bytes): @n in the largest unit that divides
 * it, into @buf. */
const char *tool_size_str(uint64_t n, char *buf, size_t len);

/* "8.0 MiB", "23.2 GiB": @n for people, into @buf. */
const char *tool_human(uint64_t n, char *buf, size_t len);

#endif /* NVSWAP_TOOL_H */
