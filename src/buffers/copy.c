// SPDX-License-Identifier: MIT
/*
 * The staging copy. Measured on x86-64 (bench/copy.c): glibc memcpy is
 * the fastest while source and destination fit in the last-level cache,
 * and glibc switches to its own non-temporal loop above
 * x86_non_temporal_threshold (3/4 of the L3 size it reads from CPUID). In
 * between - copies too big for the cache that glibc still does with
 * ordinary stores, which first read every destination line - a streaming
 * loop is about 2x faster. So nvs_copy() uses its vector loop only in that
 * window and memcpy everywhere else: it cannot be slower than memcpy.
 */
#include "buffers/copy.h"
#include "internal/util.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvswap/buffers.h"

typedef void (*copy_fn)(char *d, const char *s, size_t n);

/* Copy the head with memcpy until @d is 64-byte aligned; returns the
 * bytes done. */
static size_t align_head(char *d, const char *s, size_t n)
{
	size_t head = (size_t)(-(uintptr_t)d & 63);

	head = NVS_MIN(head, n);
	memcpy(d, s, head);
	return head;
}

__attribute__((target("avx512f"))) static void nt_avx512(char *d, const char *s,
							 size_t n)
{
	size_t h = align_head(d, s, n);

	d += h, s += h, n -= h;
	for (; n >= 256; n -= 256, d += 256, s += 256) {
		__m512i a = _mm512_loadu_si512((const void *)s);
		__m512i b = _mm512_loadu_si512((const void *)(s + 64));
		__m512i c = _mm512_loadu_si512((const void *)(s + 128));
		__m512i e = _mm512_loadu_si512((const void *)(s + 192));
		_mm512_stream_si512((void *)d, a);
		_mm512_stream_si512((void *)(d + 64), b);
		_mm512_stream_si512((void *)(d + 128), c);
		_mm512_stream_si512((void *)(d + 192), e);
	}
	_mm_sfence(); /* streaming stores are weakly ordered */
	memcpy(d, s, n);
}

__attribute__((target("avx2"))) static void nt_avx2(char *d, const char *s,
						    size_t n)
{
	size_t h = align_head(d, s, n);

	d += h, s += h, n -= h;
	for (; n >= 128; n -= 128, d += 128, s += 128) {
		__m256i a =
			_mm256_loadu_si256((const __m256i *)(const void *)s);
		__m256i b = _mm256_loadu_si256(
			(const __m256i *)(const void *)(s + 32));
		__m256i c = _mm256_loadu_si256(
			(const __m256i *)(const void *)(s + 64));
		__m256i e = _mm256_loadu_si256(
			(const __m256i *)(const void *)(s + 96));
		_mm256_stream_si256((__m256i *)(void *)d, a);
		_mm256_stream_si256((__m256i *)(void *)(d + 32), b);
		_mm256_stream_si256((__m256i *)(void *)(d + 64), c);
		_mm256_stream_si256((__m256i *)(void *)(d + 96), e);
	}
	_mm_sfence();
	memcpy(d, s, n);
}

static void nt_sse2(char *d, const char *s, size_t n)
{
	size_t h = align_head(d, s, n);

	d += h, s += h, n -= h;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
		__m128i b = _mm_loadu_si128(
			(const __m128i *)(const void *)(s + 16));
		__m128i c = _mm_loadu_si128(
			(const __m128i *)(const void *)(s + 32));
		__m128i e = _mm_loadu_si128(
			(const __m128i *)(const void *)(s + 48));
		_mm_stream_si128((__m128i *)(void *)d, a);
		_mm_stream_si128((__m128i *)(void *)(d + 16), b);
		_mm_stream_si128((__m128i *)(void *)(d + 32), c);
		_mm_stream_si128((__m128i *)(void *)(d + 48), e);
	}
	_mm_sfence();
	memcpy(d, s, n);
}

static const struct impl {
	const char *name;
	copy_fn fn;
} impls[] = {
	[NVS__COPY_SSE2] = {"sse2", nt_sse2},
	[NVS__COPY_AVX2] = {"avx2", nt_avx2},
	[NVS__COPY_AVX512] = {"avx512", nt_avx512},
};

/* Chosen once (init_once); read-only after, published by the once. */
static struct {
	enum nvs__copy_impl impl;
	size_t lo, hi; /* streaming loop for lo <= n < hi */
	unsigned ncpus;
} cfg;
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Set (release) once cfg is filled; the acquire load in init() pairs with
 * it, so the hot path costs one load and a branch, not a pthread_once. */
static atomic_bool ready;

static uint64_t sysfs_l3(void)
{
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "re");
	unsigned long long v = 0;
	char unit = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%llu%c", &v, &unit) < 1)
		v = 0;
	fclose(f);
	if (unit == 'K')
		v <<= 10;
	else if (unit == 'M')
		v <<= 20;
	return v;
}

/* glibc's x86_non_temporal_threshold: from GLIBC_TUNABLES, else its
 * default, 3/4 of the L3 size it got from CPUID (what sysconf reports). */
static uint64_t glibc_nt_threshold(uint64_t l3_cpuid)
{
	const char *t = getenv("GLIBC_TUNABLES");
	const char *key = "glibc.cpu.x86_non_temporal_threshold=";
	const char *p = t ? strstr(t, key) : NULL;

	if (p)
		return strtoull(p + strlen(key), NULL, 0);
	return l3_cpuid / 4 * 3;
}

/* A size from the environment (NVSWAP_COPY_NT_MIN=16M); ignored when
 * malformed, as tuning knobs are. */
static void env_size(const char *name, size_t *v)
{
	const char *e = getenv(name);
	uint64_t x;

	if (e && nvs_parse_size(e, &x) == 0 && x <= SIZE_MAX)
		*v = (size_t)x;
}

static void init_once(void)
{
	long cpuid_l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
	uint64_t l3 = cpuid_l3 > 0 ? (uint64_t)cpuid_l3 : 0;
	uint64_t fs = sysfs_l3();

	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	/* Once: sysconf reads /sys, far too slow to ask per copy. */
	cfg.ncpus = cpus > 0 ? (unsigned)cpus : 1;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		cfg.impl = NVS__COPY_AVX512;
	else if (__builtin_cpu_supports("avx2"))
		cfg.impl = NVS__COPY_AVX2;
	else
		cfg.impl = NVS__COPY_SSE2;
	/* The smaller L3 figure (virtual machines disagree with
	 * themselves); streaming pays once both buffers outgrow half of it. */
	if (fs && (!l3 || fs < l3))
		l3 = fs;
	if (!l3)
		l3 = 8u << 20;
	cfg.lo = (size_t)NVS_MAX(l3 / 2, (uint64_t)1 << 20);
	cfg.hi = (size_t)glibc_nt_threshold(cpuid_l3 > 0 ? (uint64_t)cpuid_l3
							 : l3 * 4 / 3);
	env_size("NVSWAP_COPY_NT_MIN", &cfg.lo);
	env_size("NVSWAP_COPY_NT_MAX", &cfg.hi);
	atomic_store_explicit(&ready, true, memory_order_release);
}

static inline void init(void)
{
	if (__builtin_expect(
		    !atomic_load_explicit(&ready, memory_order_acquire), 0))
		pthread_once(&once, init_once);
}

/* Copy @n bytes of a copy of @total bytes: streaming when the whole copy
 * is too big for the cache and this piece is one glibc would not stream
 * itself. */
static void copy_part(void *dst, const void *src, size_t n, size_t total)
{
	if (total < cfg.lo || n >= cfg.hi)
		memcpy(dst, src, n);
	else
		impls[cfg.impl].fn(dst, src, n);
}

void nvs_copy(void *dst, const void *src, size_t nbytes)
{
	/* memcpy(NULL, NULL, 0) is undefined; a zero-byte copy is not. */
	if (!nbytes)
		return;
	init();
	copy_part(dst, src, nbytes, nbytes);
}

const char *nvs_copy_impl(void)
{
	init();
	return impls[cfg.impl].name;
}

void nvs__copy_window(size_t *lo, size_t *hi)
{
	init();
	*lo = cfg.lo;
	*hi = cfg.hi;
}

bool nvs__copy_with(enum nvs__copy_impl impl, void *dst, const void *src,
		    size_t nbytes)
{
	init();
	if ((unsigned)impl > NVS__COPY_AVX512 ||
	    (impl == NVS__COPY_AVX512 && !__builtin_cpu_supports("avx512f")) ||
	    (impl == NVS__COPY_AVX2 && !__builtin_cpu_supports("avx2")))
		return false;
	impls[impl].fn(dst, src, nbytes);
	return true;
}

/* ------------------------------------------------------- multi-thread */

#define MT_MIN_PIECE (8u << 20)
#define MT_MAX_THREADS 8u

struct piece {
	char *d;
	const char *s;
	size_t n, total;
};

static void *piece_main(void *arg)
{
	struct piece *p = arg;

	copy_part(p->d, p->s, p->n, p->total);
	return NULL;
}

void nvs_copy_mt(void *dst, const void *src, size_t nbytes, unsigned nthreads)
{
	struct piece pc[MT_MAX_THREADS];
	pthread_t th[MT_MAX_THREADS];
	bool started[MT_MAX_THREADS] = {false};
	size_t k, per, off = 0;

	init();
	if (nthreads == 0)
		nthreads = cfg.ncpus;
	k = NVS_MIN((size_t)NVS_MIN(nthreads, MT_MAX_THREADS),
		    nbytes / MT_MIN_PIECE);
	if (k <= 1) {
		nvs_copy(dst, src, nbytes);
		return;
	}
	/* Pieces end on 4 KiB boundaries of the destination where they can,
	 * so no two threads stream into the same cache line or page. */
	per = nvs__round_up(nbytes / k, 4096);
	for (size_t i = 0; i < k; i++) {
		size_t n =
			i == k - 1 ? nbytes - off : NVS_MIN(per, nbytes - off);
		pc[i] = (struct piece){(char *)dst + off,
				       (const char *)src + off, n, nbytes};
		off += n;
	}
	for (size_t i = 1; i < k; i++)
		started[i] =
			pthread_create(&th[i], NULL, piece_main, &pc[i]) == 0;
	piece_main(&pc[0]);
	for (size_t i = 1; i < k; i++) {
		if (started[i])
			pthread_join(th[i], NULL);
		else
			piece_main(&pc[i]);
	}
}
