/* SPDX-License-Identifier: MIT */
/* nvswap version numbers, at compile time and at run time. */
#ifndef NVSWAP_VERSION_H
#define NVSWAP_VERSION_H

#include "nvswap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NVS_VERSION_MAJOR 0
#define NVS_VERSION_MINOR 1
#define NVS_VERSION_PATCH 0
#define NVS_VERSION_STRING "0.1.0"

/**
 * nvs_version() - the version of the library linked at run time.
 *
 * Return: a static string such as "0.1.0"; compare it with
 * NVS_VERSION_STRING to detect a header/library mismatch.
 */
NVS_API const char *nvs_version(void);

/**
 * nvs_build_features() - what this build of the library was made with:
 * the backends and the liburing version, whether statx gives O_DIRECT
 * alignment, the jemalloc version under the pinned arena, how CUDA is
 * found, the build type and sanitizers. For reports (nvswap-report);
 * the format is for people and may change.
 *
 * Return: a static string.
 */
NVS_API const char *nvs_build_features(void);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_VERSION_H */
