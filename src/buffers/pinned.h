/* SPDX-License-Identifier: MIT */
/*
 * Pinned allocations for the library's own buffers (bounce slots, pools):
 * the registry-backed calls behind nvs_pinned_alloc()/nvs_pinned_free(),
 * with the caller's name in errors and an alignment of the caller's.
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_BUFFERS_PINNED_H
#define NVS_BUFFERS_PINNED_H

#include <stdbool.h>
#include <stddef.h>

#include "nvswap/buffers.h"

/*
 * Zeroed memory of @n bytes aligned to @align (a power of two, at least
 * NVS_PINNED_ALIGN). Locked when possible; when locking fails and
 * @fallback is true (or unpinned memory is allowed process-wide), unlocked
 * memory instead. *@locked tells which. NULL with *@err (may be NULL) set
 * to -EINVAL/-ENOMEM/-EPERM and nvs_last_error() naming @call.
 */
void *nvs__pinned_alloc(size_t n, size_t align, bool fallback, const char *call,
			bool *locked, int *err);
/* Free a live pinned allocation: 0, or -EINVAL (ignored, counted). */
int nvs__pinned_free(void *p, const char *call);
/* Give whole freed mappings back to the OS (see nvs__arena_trim): what a
 * destroyed pool calls, so that nothing outlives its owner. */
void nvs__pinned_trim(void);
/* An aio handle begins (+1) or ends (-1, then trims): mappings are given
 * back only while no handle may hold them registered. */
void nvs__pinned_users(int delta);

#endif
