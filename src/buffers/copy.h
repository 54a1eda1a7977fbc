/* SPDX-License-Identifier: MIT */
/* Library-internal view of the staging copy (tests and benchmarks). */
#ifndef NVS_BUFFERS_COPY_H
#define NVS_BUFFERS_COPY_H

#include <stdbool.h>
#include <stddef.h>

enum nvs__copy_impl {
	NVS__COPY_SSE2 = 0,
	NVS__COPY_AVX2 = 1,
	NVS__COPY_AVX512 = 2,
};

/* Sizes n with lo <= n < hi use the streaming loop; others memcpy.
 * NVSWAP_COPY_NT_MIN / NVSWAP_COPY_NT_MAX (bytes) override them. */
void nvs__copy_window(size_t *lo, size_t *hi);
/* Copy with the streaming loop of @impl at any size; false (nothing
 * copied) when this CPU lacks it. */
bool nvs__copy_with(enum nvs__copy_impl impl, void *dst, const void *src,
		    size_t nbytes);

#endif
