// SPDX-License-Identifier: MIT
/*
 * CRC32C: reflected polynomial 0x82F63B78. Three paths, chosen once:
 * - fold (AVX-512 with VPCLMULQDQ): the message is folded 256 bytes at a
 *   time by carry-less multiplication, sixteen 128-bit lanes at once, into
 *   128 bits that the crc32 instruction then reduces; 1.7-2.3 times the
 *   speed of the instruction alone here, which is what a read of a set
 *   waits for (bench/RESULTS.md, "Weights in place, and CRC32C by
 *   folding").
 * - sse4.2: the crc32 instruction 8 bytes at a time on three independent
 *   streams at once (its latency is three cycles, its throughput one), the
 *   partial CRCs joined with a precomputed "append LANE zero bytes"
 *   operator; it also does what is left after the folds.
 * - table: other CPUs.
 */
#include "swapper/crc32c.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define POLY 0x82F63B78u

/* Bytes per stream in a three-stream round. */
#define LANE 4096

static uint32_t table[256];
/* zeros[k][b]: the raw CRC register after LANE zero bytes, starting from
 * byte b in byte position k (the operator is linear: XOR four of them). */
static uint32_t zeros[4][256];
static bool use_hw, use_fold;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/*
 * Folding constants. A 128-bit lane holds, reflected, a remainder R whose
 * first 8 bytes (low qword L) are its high half: R = Rh x^64 + Rl. Moved
 * D bits further along the message it becomes Rh x^(64+D) + Rl x^D mod
 * P. A carry-less product of two bit-reversed 64-bit values is the
 * bit-reversed product times x, so the lane's new value is
 * clmul(L, rev64(x^(D+63) mod P)) ^ clmul(H, rev64(x^(D-1) mod P)),
 * under 97 bits: fold_k() makes that pair for D. Computed at start up
 * from the polynomial, checked against the table by the tests.
 */
struct fold_k {
	uint64_t lo, hi;
};
static struct fold_k k2048, k1536, k1024, k512, k384, k256, k128;

/* x^@n mod P, P = x^32 + 0x1EDC6F41 (CRC32C unreflected). */
static uint64_t xpow_mod(unsigned n)
{
	uint64_t v = 1;

	while (n--) {
		v <<= 1;
		if (v >> 32 & 1)
			v ^= 0x11EDC6F41ull;
	}
	return v;
}

static uint64_t rev64(uint64_t v)
{
	uint64_t r = 0;

	for (int i = 0; i < 64; i++)
		r |= (v >> i & 1) << (63 - i);
	return r;
}

static struct fold_k fold_k(unsigned bits)
{
	return (struct fold_k){rev64(xpow_mod(bits + 63)),
			       rev64(xpow_mod(bits - 1))};
}

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
	k2048 = fold_k(2048);
	k1536 = fold_k(1536);
	k1024 = fold_k(1024);
	k512 = fold_k(512);
	k384 = fold_k(384);
	k256 = fold_k(256);
	k128 = fold_k(128);
#if defined(__x86_64__)
	__builtin_cpu_init();
	use_hw = __builtin_cpu_supports("sse4.2");
	use_fold = use_hw && __builtin_cpu_supports("avx512f") &&
		   __builtin_cpu_supports("vpclmulqdq");
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
/* The raw register @c after @n bytes at @p, by the crc32 instruction. */
__attribute__((target("sse4.2"))) static uint64_t
hw_raw(uint64_t c, const void *p, size_t n)
{
	const unsigned char *b = p;

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
	return c;
}

#define FOLD_TARGET "avx512f,vpclmulqdq,pclmul,sse4.2"

/* Every 128-bit lane of @a moved by the pair @k's distance. */
__attribute__((target(FOLD_TARGET))) static inline __m512i
fold(__m512i a, __m512i k, __m512i add)
{
	/* 0x96: the XOR of the three. */
	return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
					 _mm512_clmulepi64_epi128(a, k, 0x11),
					 add, 0x96);
}

__attribute__((target(FOLD_TARGET))) static inline __m512i
pair(const struct fold_k *k)
{
	return _mm512_broadcast_i32x4(
		_mm_set_epi64x((long long)k->hi, (long long)k->lo));
}

/* The raw register @c after @n bytes at @p, @n a positive multiple of
 * 256: four 512-bit accumulators folded forward 256 bytes a round, then
 * into one, its four lanes into one, and the crc32 instruction reduces
 * those 128 bits (their CRC from 0 is the register after all of it). */
__attribute__((target(FOLD_TARGET))) static uint64_t
fold_raw(uint64_t c, const unsigned char *b, size_t n)
{
	__m512i a0, a1, a2, a3, k, zero = _mm512_setzero_si512();
	__m128i r;

	/* Processing from register c = XOR c into the first 4 bytes. */
	a0 = _mm512_xor_si512(
		_mm512_loadu_si512(b),
		_mm512_inserti32x4(zero, _mm_cvtsi32_si128((int)(uint32_t)c),
				   0));
	a1 = _mm512_loadu_si512(b + 64);
	a2 = _mm512_loadu_si512(b + 128);
	a3 = _mm512_loadu_si512(b + 192);
	k = pair(&k2048);
	for (size_t i = 256; i < n; i += 256) {
		a0 = fold(a0, k, _mm512_loadu_si512(b + i));
		a1 = fold(a1, k, _mm512_loadu_si512(b + i + 64));
		a2 = fold(a2, k, _mm512_loadu_si512(b + i + 128));
		a3 = fold(a3, k, _mm512_loadu_si512(b + i + 192));
	}
	a3 = fold(a0, pair(&k1536), a3);
	a3 = fold(a1, pair(&k1024), a3);
	a3 = fold(a2, pair(&k512), a3);
	/* Lanes 0-2 moved onto lane 3 (its own pair is zero). */
	k = _mm512_set_epi64(0, 0, (long long)k128.hi, (long long)k128.lo,
			     (long long)k256.hi, (long long)k256.lo,
			     (long long)k384.hi, (long long)k384.lo);
	a0 = fold(a3, k, zero);
	r = _mm_xor_si128(_mm512_extracti32x4_epi32(a0, 0),
			  _mm512_extracti32x4_epi32(a0, 1));
	r = _mm_xor_si128(r, _mm512_extracti32x4_epi32(a0, 2));
	r = _mm_xor_si128(r, _mm512_extracti32x4_epi32(a3, 3));
	c = __builtin_ia32_crc32di(0, (uint64_t)_mm_cvtsi128_si64(r));
	return __builtin_ia32_crc32di(c, (uint64_t)_mm_extract_epi64(r, 1));
}

static uint32_t hw(uint32_t crc, const void *p, size_t n)
{
	return ~(uint32_t)hw_raw(~crc, p, n);
}

static uint32_t folded(uint32_t crc, const void *p, size_t n)
{
	size_t body = n & ~(size_t)255;
	uint64_t c = ~crc;

	if (body)
		c = fold_raw(c, p, body);
	return ~(uint32_t)hw_raw(c, (const unsigned char *)p + body, n - body);
}
#endif

/* Below this the folds' set-up costs more than they gain. */
#define FOLD_MIN 1024

uint32_t nvs__crc32c(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&once, init);
#if defined(__x86_64__)
	if (use_fold && n >= FOLD_MIN)
		return folded(crc, p, n);
	if (use_hw)
		return hw(crc, p, n);
#endif
	return nvs__crc32c_sw(crc, p, n);
}

int nvs__crc32c_by(enum nvs__crc_path path, uint32_t crc, const void *p,
		   size_t n, uint32_t *out)
{
	pthread_once(&once, init);
	switch (path) {
	case NVS__CRC_TABLE:
		*out = nvs__crc32c_sw(crc, p, n);
		return 0;
#if defined(__x86_64__)
	case NVS__CRC_SSE42:
		if (!use_hw)
			return -ENOTSUP;
		*out = hw(crc, p, n);
		return 0;
	case NVS__CRC_FOLD:
		if (!use_fold)
			return -ENOTSUP;
		*out = folded(crc, p, n);
		return 0;
#endif
	default:
		return -ENOTSUP;
	}
}

enum nvs__crc_path nvs__crc32c_path(void)
{
	pthread_once(&once, init);
	return use_fold ? NVS__CRC_FOLD
	       : use_hw ? NVS__CRC_SSE42
			: NVS__CRC_TABLE;
}

bool nvs__crc32c_hw(void)
{
	pthread_once(&once, init);
	return use_hw;
}
