/* SPDX-License-Identifier: MIT */
/*
 * The CUDA driver API, dlopen()ed at first use (see nvswap/gpu.h): the
 * entry points nvswap uses, pointer recognition and contexts. The driver
 * API rather than the runtime: it is what every CUDA process has loaded
 * (a runtime linked statically included), its pointer query creates no
 * context, and its calls name the context they run in.
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_GPU_DRIVER_H
#define NVS_GPU_DRIVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/gpu.h"

typedef uint64_t nvs_cuptr; /* CUdeviceptr */

/* The driver's entry points; valid once nvs__gpu_load() returned 0. */
struct nvs_cu {
	int (*Init)(unsigned);
	int (*DriverGetVersion)(int *);
	int (*DeviceGetCount)(int *);
	int (*DeviceGet)(int *, int);
	int (*DeviceGetName)(char *, int, int);
	int (*DeviceTotalMem)(size_t *, int);
	int (*DeviceGetAttribute)(int *, int, int);
	int (*DevicePrimaryCtxRetain)(void **, int);
	int (*CtxSetCurrent)(void *);
	int (*CtxGetCurrent)(void **);
	int (*PointerGetAttributes)(unsigned, int *, void **, nvs_cuptr);
	int (*MemAlloc)(nvs_cuptr *, size_t);
	int (*MemFree)(nvs_cuptr);
	int (*Memcpy)(nvs_cuptr, nvs_cuptr, size_t);
	int (*MemcpyAsync)(nvs_cuptr, nvs_cuptr, size_t, void *);
	int (*MemsetD8)(nvs_cuptr, unsigned char, size_t);
	int (*StreamCreate)(void **, unsigned);
	int (*StreamDestroy)(void *);
	int (*StreamSynchronize)(void *);
	int (*MemHostRegister)(void *, size_t, unsigned);
	int (*MemHostUnregister)(void *);
	int (*GetErrorString)(int, const char **);
	int (*GetErrorName)(int, const char **);
};

extern struct nvs_cu nvs__cu;

/* CUresult values nvswap tells apart. */
#define NVS_CU_SUCCESS 0
#define NVS_CU_ERROR_INVALID_VALUE 1
#define NVS_CU_ERROR_OUT_OF_MEMORY 2
#define NVS_CU_ERROR_NO_DEVICE 100
#define NVS_CU_ERROR_INVALID_DEVICE 101
#define NVS_CU_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define NVS_CU_MEMHOSTREGISTER_PORTABLE 0x1u

/*
 * Load and initialise the driver (once; later calls return the first
 * result). 0, or -ENODEV with nvs_last_error() naming the library, the
 * failing call or the missing device, prefixed by @who; -EINVAL when
 * NVSWAP_GPU holds no on/off value (nvs__env_switch()).
 */
int nvs__gpu_load(const char *who);

/* The loaders' states (an atomic_int each): not tried, loaded, failed. */
enum { NVS_GPU_UNTRIED = 0, NVS_GPU_READY, NVS_GPU_FAILED };

/*
 * Run @load under @lock once, while *@state is NVS_GPU_UNTRIED (it sets
 * READY or FAILED with a release store); the state after. The acquire load
 * pairs with that store: what @load wrote is visible once READY is seen.
 */
int nvs__gpu_once(atomic_int *state, pthread_mutex_t *lock, void (*load)(void));

/* Devices found by nvs__gpu_load(); 0 before or without it. */
int nvs__gpu_count(void);

/* The loader's sentence: why the driver is absent, or "" (info). */
const char *nvs__gpu_status(void);

/*
 * What nvs_gpu_pointer() does, plus the allocation's context (NULL when
 * the driver gives none: then the device's primary context is used).
 */
int nvs__gpu_ptr(const void *p, int *device, void **ctx);

/*
 * Make the context of memory on @device current on the calling thread:
 * @ctx when not NULL, else the device's primary context (retained once,
 * for the life of the process). With @saved, the thread's current context
 * is stored there first, for nvs__gpu_leave(): calls on a caller's thread
 * put it back, as a library must. 0 or -EIO/-ENODEV with the error set.
 */
int nvs__gpu_enter(void *ctx, int device, const char *who, void **saved);
void nvs__gpu_leave(void *saved);

/*
 * The error for CUresult @rc of driver call @call: -ENOMEM for out of
 * memory, -ENODEV for no device, else -EIO, with the sentence
 * "<who>: <call> failed: <name> (<description>)" set.
 */
int nvs__cu_fail(int rc, const char *who, const char *call);
/*
 * Would dlopen(@path) map past the end of the file (a 64-bit ELF file
 * cut inside a loadable segment: SIGBUS inside dlopen)? Then true, with
 * @why saying so. False for a name without '/' (the loader's search),
 * a file that cannot be read or is not such an ELF file: dlopen() refuses
 * those with its own sentence. elfcheck.c.
 */
bool nvs__lib_truncated(const char *path, char *why, size_t len);

/* Format the same sentence into @buf (errors raised on a worker). */
void nvs__cu_describe(char *buf, size_t len, int rc, const char *call);

#endif
