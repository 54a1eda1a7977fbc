/* SPDX-License-Identifier: MIT */
/* Test helpers on the aio handle (for tests that link the library; the
 * tool tests share testutil.h without it). */
#ifndef NVS_TU_AIO_H
#define NVS_TU_AIO_H

#include <criterion/criterion.h>

#include "nvswap/aio.h"

/* The handle's counters; fails the test when the call does. */
static inline struct nvs_aio_stats tu_aio_stats(struct nvs_aio *h)
{
	struct nvs_aio_stats st;

	cr_assert_eq(nvs_aio_get_stats(h, &st), 0, "%s", nvs_last_error());
	return st;
}

#endif
