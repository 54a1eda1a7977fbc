// SPDX-License-Identifier: MIT
/*
 * CRC32C: the standard check values (RFC 3720's iSCSI vectors), the CPU
 * instruction and the carry-less folds against the table on every length
 * and alignment, and chaining.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "swapper/crc32c.h"

TestSuite(crc32c);

Test(crc32c, standard_check_values)
{
	unsigned char buf[32];

	cr_assert_eq(nvs__crc32c(0, "123456789", 9), 0xE3069283u);
	cr_assert_eq(nvs__crc32c_sw(0, "123456789", 9), 0xE3069283u);
	memset(buf, 0, sizeof(buf));
	cr_assert_eq(nvs__crc32c(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, sizeof(buf));
	cr_assert_eq(nvs__crc32c(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	cr_assert_eq(nvs__crc32c(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	cr_assert_eq(nvs__crc32c(0, buf, 32), 0x113FDB5Cu);
	cr_assert_eq(nvs__crc32c(0, buf, 0), 0);
}

Test(crc32c, the_instruction_and_the_table_agree_everywhere)
{
	enum { N = 4096 + 64 };
	unsigned char *buf;
	unsigned seed = 7;

	if (!nvs__crc32c_hw())
		cr_skip_test("no SSE4.2 here: both sides would be the table");
	buf = malloc(N);
	for (int i = 0; i < N; i++)
		buf[i] = (unsigned char)rand_r(&seed);
	for (size_t off = 0; off < 16; off++)
		for (size_t n = 0; n + off <= N; n += 1 + n / 7)
			cr_assert_eq(nvs__crc32c(0, buf + off, n),
				     nvs__crc32c_sw(0, buf + off, n),
				     "offset %zu length %zu", off, n);
	free(buf);
}

/* Lengths around the three-stream rounds (3 x 4096 bytes), at every
 * alignment to 8: the joined streams equal the byte-at-a-time table. */
Test(crc32c, three_stream_rounds_agree_with_the_table)
{
	enum { N = 5 * 12288 + 64 };
	static const size_t len[] = {12287,	    12288,	   12289,
				     12288 + 8,	    2 * 12288 - 1, 2 * 12288,
				     2 * 12288 + 7, 5 * 12288,	   N - 16};
	unsigned char *buf;
	unsigned seed = 11;

	if (!nvs__crc32c_hw())
		cr_skip_test("no SSE4.2 here: both sides would be the table");
	buf = malloc(N);

	for (int i = 0; i < N; i++)
		buf[i] = (unsigned char)rand_r(&seed);
	for (size_t off = 0; off < 16; off++)
		for (size_t i = 0; i < sizeof(len) / sizeof(*len); i++)
			cr_assert_eq(nvs__crc32c(0x1234u, buf + off, len[i]),
				     nvs__crc32c_sw(0x1234u, buf + off, len[i]),
				     "offset %zu length %zu", off, len[i]);
	free(buf);
}

Test(crc32c, chaining_equals_one_pass)
{
	const char *s = "nvswap swaps tensors to NVMe and back";
	size_t n = strlen(s);

	for (size_t cut = 0; cut <= n; cut++)
		cr_assert_eq(
			nvs__crc32c(nvs__crc32c(0, s, cut), s + cut, n - cut),
			nvs__crc32c(0, s, n));
}

/* The folds on every length up to a few rounds of 256 bytes and at every
 * alignment to 64, from a non-zero CRC: equal to the table's, and the
 * 2-MiB buffer a swapped tensor might be (thousands of rounds). */
Test(crc32c, the_folds_agree_with_the_table_everywhere)
{
	enum { N = 4 * 256 + 3 * 64, BIG = 2 << 20 };
	unsigned char *buf;
	unsigned seed = 13;
	uint32_t got;

	if (nvs__crc32c_by(NVS__CRC_FOLD, 0, "", 0, &got) == -ENOTSUP)
		cr_skip_test("no AVX-512 with VPCLMULQDQ here: the folds are "
			     "not used on this CPU");
	buf = malloc(BIG + 64);
	for (int i = 0; i < BIG + 64; i++)
		buf[i] = (unsigned char)rand_r(&seed);
	for (size_t off = 0; off < 64; off++)
		for (size_t n = 0; n + off <= N; n++) {
			cr_assert_eq(nvs__crc32c_by(NVS__CRC_FOLD, 0x89abcdefu,
						    buf + off, n, &got),
				     0);
			cr_assert_eq(got,
				     nvs__crc32c_sw(0x89abcdefu, buf + off, n),
				     "offset %zu length %zu", off, n);
		}
	for (size_t off = 0; off < 3; off++) {
		cr_assert_eq(nvs__crc32c_by(NVS__CRC_FOLD, 0, buf + off,
					    BIG + off, &got),
			     0);
		cr_assert_eq(got, nvs__crc32c_sw(0, buf + off, BIG + off),
			     "offset %zu", off);
	}
	/* All zeros and all ones (no lane may cancel another). */
	memset(buf, 0, 4096);
	cr_assert_eq(nvs__crc32c_by(NVS__CRC_FOLD, 0, buf, 4096, &got), 0);
	cr_assert_eq(got, nvs__crc32c_sw(0, buf, 4096));
	memset(buf, 0xff, 4096);
	cr_assert_eq(nvs__crc32c_by(NVS__CRC_FOLD, 0, buf, 4096, &got), 0);
	cr_assert_eq(got, nvs__crc32c_sw(0, buf, 4096));
	cr_assert_eq(nvs__crc32c_path(), NVS__CRC_FOLD, "chosen where it runs");
	free(buf);
}

Test(crc32c, every_path_agrees_or_says_it_is_missing)
{
	static const char msg[] = "123456789";
	uint32_t got;

	for (int p = NVS__CRC_TABLE; p <= NVS__CRC_FOLD; p++) {
		int r = nvs__crc32c_by((enum nvs__crc_path)p, 0, msg, 9, &got);
		if (r == -ENOTSUP)
			continue;
		cr_assert_eq(r, 0);
		cr_assert_eq(got, 0xE3069283u, "path %d", p);
	}
	cr_assert_eq(nvs__crc32c_by((enum nvs__crc_path)7, 0, msg, 9, &got),
		     -ENOTSUP);
}
