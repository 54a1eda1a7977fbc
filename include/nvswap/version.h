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

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_VERSION_H */
