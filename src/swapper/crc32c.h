/* SPDX-License-Identifier: MIT */
/*
 * CRC32C (Castagnoli), the checksum of swapped tensors: the SSE4.2 crc32
 * instruction where the CPU has it (chosen once at run time), else a
 * table. Threading: any thread.
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

#endif
