// SPDX-License-Identifier: MIT
/*
 * CRC32C: reflected polynomial 0x82F63B78. The hardware path feeds the
 * crc32 instruction 8 bytes at a time on three independent streams at once:
 * the instruction takes three cycles to give its result but can start one
 * a cycle, so a single chain runs at a third of its speed. The three
 * partial CRCs are joined with a precomputed "append LANE zero bytes"
 * operator. The table path is for other CPUs.
 */
#include "swapper/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

/* Bytes per stream in a three-stream round. */
#define LANE 4096

static uint32_t table[256];
/* zeros[k][b]: the raw CRC register after LANE zero bytes, starting from
 * byte b in byte position k (the operator is linear: XOR four of them). */
static uint32_t zeros[4][256];
static bool use_hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[i] = c;
	}
	uint32_t basis[32];
	for (int bit = 0; bit < 32; bit++) {
		uint32_t c = 1u << bit;
		for (int i = 0; i < LANE; i++)
			c = table[c & 0xff] ^ (c >> 8);
		basis[bit] = c;
	}
	for (int k = 0; k < 4; k++)
		for (uint32_t b = 0; b < 256; b++) {
			uint32_t c = 0;
			for (int j = 0; j < 8; j++)
				if (b >> j & 1)
					c ^= basis[8 * k + j];
			zeros[k][b] = c;
		}
#if defined(__x86_64__)
	__builtin_cpu_init();
	use_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t nvs__crc32c_sw(uint32_t crc, const void *p, size_t n)
{
	const unsigned char *b = p;

	pthread_once(&once, init);
	crc = ~crc;
	while (n--)
		crc = table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* The raw register @c followed by LANE zero bytes. */
static uint32_t shift(uint32_t c)
{
	return zeros[0][c & 0xff] ^ zeros[1][c >> 8 & 0xff] ^
	       zeros[2][c >> 16 & 0xff] ^ zeros[3][c >> 24];
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t hw(uint32_t crc,
						     const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t c = ~crc;

	for (; n && ((uintptr_t)b & 7); n--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
	/* raw(c, A B C) = shift(shift(raw(c, A)) ^ raw(0, B)) ^ raw(0, C) */
	for (; n >= 3 * LANE; n -= 3 * LANE, b += 3 * LANE) {
		uint64_t c1 = 0, c2 = 0;
		for (size_t i = 0; i < LANE; i += 8) {
			uint64_t v0, v1, v2;
			memcpy(&v0, b + i, 8);
			memcpy(&v1, b + LANE + i, 8);
			memcpy(&v2, b + 2 * LANE + i, 8);
			c = __builtin_ia32_crc32di(c, v0);
			c1 = __builtin_ia32_crc32di(c1, v1);
			c2 = __builtin_ia32_crc32di(c2, v2);
		}
		c = shift(shift((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
	}
	for (; n >= 8; n -= 8, b += 8) {
		uint64_t v;
		memcpy(&v, b, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	for (; n; n--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
	return ~(uint32_t)c;
}
#endif

uint32_t nvs__crc32c(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&once, init);
#if defined(__x86_64__)
	if (use_hw)
		return hw(crc, p, n);
#endif
	return nvs__crc32c_sw(crc, p, n);
}

bool nvs__crc32c_hw(void)
{
	pthread_once(&once, init);
	return use_hw;
}
