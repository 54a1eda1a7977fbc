// SPDX-License-Identifier: MIT
/*
 * The staging copy: every size 0..4096 at several misalignments of both
 * sides through nvs_copy and each vector loop this CPU has, random large
 * sizes and offsets, the multi-threaded form, guard bytes on both sides,
 * and the run-time choices (loop, size window, environment overrides).
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buffers/copy.h"
#include "nvswap/buffers.h"
#include "testutil.h"

#define GUARD 64
#define NVS_MIN_SZ(a, b) ((a) < (b) ? (a) : (b))
static const size_t mis[] = {0, 1, 7, 31, 63};

typedef void (*copier)(void *d, const void *s, size_t n);

static enum nvs__copy_impl forced;

static void via_impl(void *d, const void *s, size_t n)
{
	cr_assert(nvs__copy_with(forced, d, s, n));
}

static void via_mt3(void *d, const void *s, size_t n)
{
	nvs_copy_mt(d, s, n, 3);
}

/* Copy [src+ms, +n) to dst+md with @fn and check every byte and the
 * guards on both sides of the destination. */
static void check_copy(copier fn, unsigned char *dst, const unsigned char *src,
		       size_t md, size_t ms, size_t n)
{
	memset(dst, 0xEE, md + n + 2 * GUARD);
	fn(dst + GUARD + md, src + ms, n);
	for (size_t i = 0; i < GUARD + md; i++)
		cr_assert_eq(dst[i], 0xEE, "guard before, n %zu", n);
	cr_assert(memcmp(dst + GUARD + md, src + ms, n) == 0,
		  "n %zu, dst+%zu, src+%zu", n, md, ms);
	for (size_t i = 0; i < GUARD; i++)
		cr_assert_eq(dst[GUARD + md + n + i], 0xEE,
			     "guard after, n %zu", n);
}

static void every_small_size(copier fn)
{
	unsigned char *src = malloc(4096 + 64), *dst = malloc(4096 + 256);

	tu_fill(src, 4096 + 64, 1);
	for (size_t n = 0; n <= 4096; n++)
		for (size_t a = 0; a < sizeof(mis) / sizeof(mis[0]); a++)
			for (size_t b = 0; b < sizeof(mis) / sizeof(mis[0]);
			     b++)
				check_copy(fn, dst, src, mis[a], mis[b], n);
	free(src);
	free(dst);
}

static void random_large(copier fn, size_t max, int rounds)
{
	unsigned char *src = malloc(max + 64), *dst = malloc(max + 256);
	uint64_t x = 88172645463325252ull;

	tu_fill(src, max + 64, 2);
	for (int r = 0; r < rounds; r++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		size_t n = (size_t)(x % max);
		check_copy(fn, dst, src, (x >> 40) % 64, (x >> 50) % 64, n);
	}
	free(src);
	free(dst);
}

Test(copy, nvs_copy_every_size_to_4096_any_alignment)
{
	every_small_size(nvs_copy);
}

static void vector_loop(enum nvs__copy_impl impl, const char *name)
{
	unsigned char a = 1, b = 0;

	forced = impl;
	if (!nvs__copy_with(forced, &b, &a, 1))
		cr_skip_test("this CPU has no %s: its loop cannot run here",
			     name);
	cr_assert_eq(b, 1);
	every_small_size(via_impl);
	random_large(via_impl, 3u << 20, 20);
}

Test(copy, sse2_loop_every_size_to_4096_any_alignment)
{
	vector_loop(NVS__COPY_SSE2, "SSE2");
}

Test(copy, avx2_loop_every_size_to_4096_any_alignment)
{
	vector_loop(NVS__COPY_AVX2, "AVX2");
}

Test(copy, avx512_loop_every_size_to_4096_any_alignment)
{
	vector_loop(NVS__COPY_AVX512, "AVX-512F");
}

Test(copy, random_large_sizes_and_misalignments)
{
	random_large(nvs_copy, 48u << 20, 40);
}

Test(copy, streaming_window_sizes_take_the_vector_loop)
{
	size_t lo, hi;

	nvs__copy_window(&lo, &hi);
	cr_assert_geq(lo, 1u << 20);
	cr_log_info("streaming window [%zu, %zu), loop %s", lo, hi,
		    nvs_copy_impl());
	if (hi <= lo)
		cr_skip_test("no streaming window on this machine: glibc "
			     "streams from %zu bytes on, nvs_copy is memcpy",
			     hi);
	/* Around both ends of the window, odd offsets. */
	size_t max = NVS_MIN_SZ(hi + 4096, (size_t)300 << 20);
	unsigned char *src = malloc(max + 64), *dst = malloc(max + 256);
	tu_fill(src, max + 64, 3);
	check_copy(nvs_copy, dst, src, 5, 9, lo - 1);
	check_copy(nvs_copy, dst, src, 5, 9, lo);
	check_copy(nvs_copy, dst, src, 63, 1, lo + 4097);
	if (hi < max) {
		check_copy(nvs_copy, dst, src, 3, 0, hi - 1);
		check_copy(nvs_copy, dst, src, 3, 0, hi);
	}
	free(src);
	free(dst);
}

Test(copy, environment_sets_the_window)
{
	size_t lo, hi;

	setenv("NVSWAP_COPY_NT_MIN", "65536", 1);
	setenv("NVSWAP_COPY_NT_MAX", "1048576", 1);
	nvs__copy_window(&lo, &hi);
	cr_assert_eq(lo, 65536);
	cr_assert_eq(hi, 1048576);
	random_large(nvs_copy, 2u << 20, 30);
}

Test(copy, multithreaded_form_copies_exactly)
{
	/* Pieces are >= 8 MiB: 40 MiB makes up to 5 of them. */
	random_large(via_mt3, 40u << 20, 12);
	unsigned char *src = malloc((40u << 20) + 64),
		      *dst = malloc((40u << 20) + 256);
	tu_fill(src, (40u << 20) + 64, 4);
	for (unsigned t = 0; t <= 9; t++) {
		memset(dst, 0, 40u << 20);
		nvs_copy_mt(dst + 1, src + 3, (40u << 20) - 5, t);
		cr_assert(memcmp(dst + 1, src + 3, (40u << 20) - 5) == 0,
			  "%u threads", t);
		cr_assert_eq(dst[0], 0);
	}
	nvs_copy_mt(dst, src, 0, 4);
	free(src);
	free(dst);
}

Test(copy, implementation_matches_the_cpu)
{
	const char *impl = nvs_copy_impl();

	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		cr_assert_str_eq(impl, "avx512");
	else if (__builtin_cpu_supports("avx2"))
		cr_assert_str_eq(impl, "avx2");
	else
		cr_assert_str_eq(impl, "sse2");
}
