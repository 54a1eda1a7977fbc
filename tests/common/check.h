/* SPDX-License-Identifier: MIT */
/*
 * CHECK() for the test drivers that run without Criterion (under TSan, or
 * linked against the shared library): counts, prints each failure with
 * nvs_last_error(), and check_report() prints "N passed, N failed" (which
 * scripts/run-tests.sh adds up) and gives the exit status. Include it in
 * one file per program.
 */
#ifndef NVS_TEST_CHECK_H
#define NVS_TEST_CHECK_H

#include <stdio.h>

#include "nvswap/common.h"

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (cond) {                                                    \
			check_passed++;                                        \
		} else {                                                       \
			check_failed++;                                        \
			fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__,        \
				__LINE__, #cond);                              \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, " (%s)\n", nvs_last_error());          \
		}                                                              \
	} while (0)

static inline int check_report(void)
{
	printf("%d passed, %d failed\n", check_passed, check_failed);
	return check_failed ? 1 : 0;
}

#endif
