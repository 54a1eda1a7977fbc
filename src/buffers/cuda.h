/* SPDX-License-Identifier: MIT */
/*
 * The CUDA runtime, when one is present at run time: pinned mappings are
 * cudaHostRegister()ed so device copies from them are true async DMA. No
 * build-time dependency: libcudart is dlopen()ed, preferring a copy the
 * process has already loaded. NVSWAP_CUDA=off disables it (any of
 * nvs__env_switch()'s spellings; another value is refused); NVSWAP_CUDART
 * names the library to load.
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_BUFFERS_CUDA_H
#define NVS_BUFFERS_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "nvswap/buffers.h"

/* Look for the runtime (once; later calls return at once). */
void nvs__cuda_init(void);
/* After nvs__cuda_init(): 0, or -EINVAL (nvs_last_error() naming @call,
 * the variable and its value) when NVSWAP_CUDA holds no on/off value. */
int nvs__cuda_env(const char *call);
/* Register @n bytes at @p. true when registered; false when CUDA is not
 * used (absent, off, or this failure turns it off for the process). */
bool nvs__cuda_register(void *p, size_t n);
void nvs__cuda_unregister(void *p);
enum nvs_cuda_state nvs__cuda_state(void);
const char *nvs__cuda_status(void);

#endif
