/* SPDX-License-Identifier: MIT */
/*
 * CRC32C (Castagnoli), the checksum of swapped tensors: folded by
 * carry-less multiplication where the CPU has AVX-512 and VPCLMULQDQ,
 * else the SSE4.2 crc32 instruction, else a table (chosen once at run
 * time). Threading: any thread.
 */
#ifndef NVS_SWAPPER_CRC32C_H
#define NVS_SWAPPER_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC32C of @n bytes at @p, continuing from @crc (0 to start). */
uint32_t nvs__crc32c(uint32_t crc, const void *p, size_t n);
/* The table version, whatever the CPU (tests compare the two). */
uint32_t nvs__crc32c_sw(uint32_t crc, const void *p, size_t n);
/* Whether nvs__crc32c uses the CPU instruction. */
bool nvs__crc32c_hw(void);

/* The paths, for the tests and the benchmark. */
enum nvs__crc_path {
	NVS__CRC_TABLE,
	NVS__CRC_SSE42,
	NVS__CRC_FOLD,
};
/* CRC32C by @path (the fold path on every length: what is not a multiple
 * of 256 bytes goes by the instruction). 0 and *@out, or -ENOTSUP when
 * this CPU lacks it. */
int nvs__crc32c_by(enum nvs__crc_path path, uint32_t crc, const void *p,
		   size_t n, uint32_t *out);
/* The path nvs__crc32c takes for a large buffer. */
enum nvs__crc_path nvs__crc32c_path(void);

#endif
