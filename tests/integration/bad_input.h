/* SPDX-License-Identifier: MIT */
/*
 * What the bad-input suites (test_bad_input.c, test_bad_input_swap.c)
 * share: the assertion that a call fails with an exact -errno and names
 * itself in nvs_last_error(), and a file of pattern bytes.
 */
#ifndef NVS_TEST_BAD_INPUT_H
#define NVS_TEST_BAD_INPUT_H

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/common.h"
#include "testutil.h"

/* @ret is @want, and the sentence names @call. */
#define FAILS(ret, want, call)                                                 \
	do {                                                                   \
		int r_ = (ret);                                                \
		cr_assert_eq(r_, (want), "%s: got %d (%s)", #ret, r_,          \
			     nvs_last_error());                                \
		cr_assert(strstr(nvs_last_error(), (call)),                    \
			  "%s: message does not name %s: %s", #ret, (call),    \
			  nvs_last_error());                                   \
	} while (0)

/* A file of @n pattern bytes (seed @seed); returns its path. */
static inline const char *data_file(const char *name, size_t n, unsigned seed,
				    unsigned char **data)
{
	const char *p = tu_path(name);

	*data = malloc(n ? n : 1);
	tu_fill(*data, n, seed);
	tu_write_file(p, *data, n);
	return p;
}

#endif /* NVS_TEST_BAD_INPUT_H */
