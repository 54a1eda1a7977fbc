// SPDX-License-Identifier: MIT
/*
 * CRC32C: reflected polynomial 0x82F63B78. The hardware path feeds the
 * crc32 instruction 8 bytes at a time (one per cycle of throughput on
 * current x86; far above disk speed); the table path is for other CPUs.
 */
#include "swapper/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[256];
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

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t hw(uint32_t crc,
						     const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t c = ~crc;

	for (; n && ((uintptr_t)b & 7); n--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *b++);
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
