/* SPDX-License-Identifier: MIT */
/*
 * Internal seam of the swap manager (the public API is nvswap/swapper.h):
 * a swapper whose aio handle injects faults, for tests.
 */
#ifndef NVS_SWAPPER_SWAPPER_H
#define NVS_SWAPPER_SWAPPER_H

#include "aio/engine.h"
#include "nvswap/swapper.h"

/* nvs_swapper_create() over a fault-injecting handle following @plan. */
int nvs__swapper_create_fault(const struct nvs_swapper_opts *opts,
			      const struct nvs_fault_plan *plan,
			      struct nvs_swapper **out);

#endif
