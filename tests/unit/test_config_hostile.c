// SPDX-License-Identifier: MIT
/*
 * Hostile config text the loader already refused before issue 24, kept
 * under test: every case fails with -EINVAL and a "FILE:LINE:COLUMN"
 * position, never a crash, a hang, or a silently wrong value.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/config.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(config_hostile, .fini = fini);

/* Loading @json fails with -EINVAL and a message containing @msg. */
static void refused(const char *json, const char *msg)
{
	struct nvs_config *c = (struct nvs_config *)&c;

	cr_assert_eq(nvs_config_load_string(json, "t.json", &c), -EINVAL,
		     "%s -> %s", json, nvs_last_error());
	cr_assert_null(c);
	cr_assert(strstr(nvs_last_error(), msg), "wanted '%s' in '%s'", msg,
		  nvs_last_error());
}

/* The same, for @n bytes written to a file (which may hold NULs). */
static void file_refused(const void *bytes, size_t n, const char *msg)
{
	const char *p = tu_path("hostile.json");
	struct nvs_config *c = (struct nvs_config *)&c;

	tu_write_file(p, bytes, n);
	cr_assert_eq(nvs_config_load(p, &c), -EINVAL, "%s", nvs_last_error());
	cr_assert_null(c);
	cr_assert(strstr(nvs_last_error(), msg), "wanted '%s' in '%s'", msg,
		  nvs_last_error());
	unlink(p);
}

Test(config_hostile, numbers_json_does_not_allow_are_refused_with_a_position)
{
	refused("{\"aio\": {\"queue_depth\": 1e309}}",
		"t.json:1:29: malformed JSON: real number overflow");
	refused("{\"aio\": {\"queue_depth\": 0x10}}", "t.json:1:26:");
	refused("{\"aio\": {\"queue_depth\": -0}}",
		"t.json:1:10: aio.queue_depth: must be a whole number of at "
		"least 1");
	refused("{\"aio\": {\"queue_depth\": \"16\"}}",
		"t.json:1:10: aio.queue_depth: must be a number");
}

Test(config_hostile, duplicate_keys_are_refused_with_a_position)
{
	refused("{\"aio\": {\"queue_depth\": 8, \"queue_depth\": 16}}",
		"duplicate");
	refused("{\"aio\": {\"queue_depth\": 8, \"queue_depth\": 16}}",
		"t.json:1:");
}

Test(config_hostile, bytes_that_are_not_utf8_json_are_refused_with_a_position)
{
	static const char bom[] = "\xef\xbb\xbf{\"aio\": {}}";
	static const char nul_inside[] = "{\"aio\": {}}\0{\"aio\": 1}";
	static const char nul_key[] = "{\"zero_optimization\": {\"stage\\u0000"
				      "x\": 3}}";

	refused("{\"aio\": {\"queue_depth\": 8}, \"x\": \"\xff\xfe\"}",
		"t.json:1:34: malformed JSON: unable to decode byte 0xff");
	refused(bom, "t.json:1:1: malformed JSON");
	file_refused(nul_inside, sizeof(nul_inside) - 1, "hostile.json:");
	refused(nul_key, "t.json:1:");
}

Test(config_hostile, deep_nesting_is_refused_not_recursed_into)
{
	size_t n = 100000;
	char *deep = malloc(2 * n + 1);

	cr_assert_not_null(deep);
	memset(deep, '[', n);
	memset(deep + n, ']', n);
	deep[2 * n] = 0;
	refused(deep, "maximum parsing depth reached");
	refused(deep, "t.json:1:");
	free(deep);
}

Test(config_hostile, a_file_over_16_mib_is_refused_before_it_is_read)
{
	size_t n = (16u << 20) + 1;
	char *big = malloc(n);

	cr_assert_not_null(big);
	memset(big, ' ', n);
	big[0] = '{';
	big[n - 1] = '}';
	file_refused(big, n, "16777216 bytes");
	free(big);
}
