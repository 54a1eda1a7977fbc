/* SPDX-License-Identifier: MIT */
/*
 * nvswap common definitions: export macro, error reporting shared by every
 * layer of the library.
 */
#ifndef NVSWAP_COMMON_H
#define NVSWAP_COMMON_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(NVS_BUILDING_LIBRARY) && defined(__GNUC__)
#define NVS_API __attribute__((visibility("default")))
#else
#define NVS_API
#endif

/** Longest sentence nvs_last_error() returns, terminating NUL included. */
#define NVS_ERRMSG_MAX 512

/**
 * nvs_last_error() - what went wrong in this thread's last failed call.
 *
 * Every nvswap call that returns a negative errno also writes a sentence
 * naming the call and its context (path, offset, length, cause) into a
 * thread-local buffer. Successful calls leave it alone, so read it right
 * after a failure.
 *
 * Return: a NUL-terminated string owned by the library, valid until the
 * calling thread's next nvswap call; "" when nothing has failed yet.
 * Threading: thread-local, always safe.
 */
NVS_API const char *nvs_last_error(void);

/**
 * nvs_strerror() - a short description of an errno value.
 * @err: an errno, positive or negative (nvswap returns -errno).
 *
 * Return: a static string; never NULL. Thread-safe (unlike strerror(3)).
 */
NVS_API const char *nvs_strerror(int err);

/**
 * nvs_parse_size() - a byte count as people write it, by the one rule
 * every size nvswap reads follows (nvswap.torch's keywords too): decimal
 * digits, then optionally a unit. K, M, G, T and KiB, MiB, GiB, TiB are
 * binary (2^10 to 2^40, as fio and dd read "64K"); KB, MB, GB, TB are
 * decimal (10^3 to 10^12, as transformers and accelerate read "5GB").
 * The unit's letter (and the i) may be either case; a lowercase b after
 * it ("1Gb", "100mb", "1Kib") is refused as ambiguous: a bit to some
 * tools (transformers reads "Gb" as gigabits), a byte to others. So
 * "4096", "64K", "100m",
 * "2GiB" (2147483648), "5GB" (5000000000).
 * @s:   the text, borrowed for the call.
 * @out: receives the bytes; unchanged on failure.
 *
 * Return: 0, -EINVAL for NULL arguments, a lowercase b after the unit
 * or anything else in @s (signs, spaces, fractions, an empty string),
 * -ERANGE when the value does not fit 64 bits; nvs_last_error() names
 * the text and states the rule.
 * Threading: any thread.
 */
NVS_API int nvs_parse_size(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_COMMON_H */
