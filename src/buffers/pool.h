/* SPDX-License-Identifier: MIT */
/* Library-internal view of the buffer pool. */
#ifndef NVS_BUFFERS_POOL_H
#define NVS_BUFFERS_POOL_H

#include "nvswap/buffers.h"

/* nvs_pool_try_get() for callers inside the library that treat an empty
 * pool as backpressure and go on to succeed: -EAGAIN without touching
 * nvs_last_error() (a successful public call leaves it alone). */
int nvs__pool_try_get(struct nvs_pool *pool, void **buf);

#endif
