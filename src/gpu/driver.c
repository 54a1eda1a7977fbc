// SPDX-License-Identifier: MIT
/*
 * The CUDA driver, found at run time (driver.h), and the public calls on
 * device memory: nvs_gpu_open, nvs_gpu_pointer, nvs_gpu_malloc/free,
 * nvs_gpu_memcpy/memset.
 */
#include "gpu/driver.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIBCUDA "libcuda.so.1"
#define MAX_DEVICES 64

/* CUpointer_attribute values. */
#define ATTR_CONTEXT 1
#define ATTR_MEMORY_TYPE 2
#define ATTR_IS_MANAGED 8
#define ATTR_DEVICE_ORDINAL 9
#define MEMORYTYPE_DEVICE 2

enum {
	UNTRIED = NVS_GPU_UNTRIED,
	READY = NVS_GPU_READY,
	FAILED = NVS_GPU_FAILED
};

struct nvs_cu nvs__cu;

/* lock serialises loading and the primary-context table; state pairs
 * (release) with the loads of nvs__cu's members after an acquire. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int state;
static int load_err;
static char load_msg[NVS_ERRMSG_MAX];
static int ndevices;
static void *primary[MAX_DEVICES]; /* retained primary contexts */

static const char *lib_name(void)
{
	const char *env = getenv("NVSWAP_LIBCUDA");

	return env && *env ? env : LIBCUDA;
}

/* NVSWAP_GPU, read once (env_once orders these writes before every
 * read): on unless it says off; env_err -EINVAL with env_msg when it
 * holds no on/off value. */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool env_on;
static int env_err;
static char env_msg[NVS_ERRMSG_MAX / 2];

static void read_env(void)
{
	env_err = nvs__env_switch("NVSWAP_GPU", true, &env_on, env_msg,
				  sizeof(env_msg));
}

/* 1 when NVSWAP_GPU turns GPU support off, 0 when not, -EINVAL when it
 * holds no on/off value (env_msg says so). */
static int gpu_off(void)
{
	pthread_once(&env_once, read_env);
	return env_err ? env_err : !env_on;
}

/* A function pointer from dlsym: ISO C cannot cast void * to one. */
static bool sym(void *lib, void *fnp, const char *name, const char **missing)
{
	void *p = dlsym(lib, name);

	memcpy(fnp, &p, sizeof(p));
	if (!p && !*missing)
		*missing = name;
	return p != NULL;
}

static bool resolve(void *lib, const char **missing)
{
	struct nvs_cu *c = &nvs__cu;

	sym(lib, &c->Init, "cuInit", missing);
	sym(lib, &c->DriverGetVersion, "cuDriverGetVersion", missing);
	sym(lib, &c->DeviceGetCount, "cuDeviceGetCount", missing);
	sym(lib, &c->DeviceGet, "cuDeviceGet", missing);
	sym(lib, &c->DeviceGetName, "cuDeviceGetName", missing);
	sym(lib, &c->DeviceTotalMem, "cuDeviceTotalMem_v2", missing);
	sym(lib, &c->DeviceGetAttribute, "cuDeviceGetAttribute", missing);
	sym(lib, &c->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",
	    missing);
	sym(lib, &c->CtxSetCurrent, "cuCtxSetCurrent", missing);
	sym(lib, &c->CtxGetCurrent, "cuCtxGetCurrent", missing);
	sym(lib, &c->PointerGetAttributes, "cuPointerGetAttributes", missing);
	sym(lib, &c->MemAlloc, "cuMemAlloc_v2", missing);
	sym(lib, &c->MemFree, "cuMemFree_v2", missing);
	sym(lib, &c->Memcpy, "cuMemcpy", missing);
	sym(lib, &c->MemcpyAsync, "cuMemcpyAsync", missing);
	sym(lib, &c->MemsetD8, "cuMemsetD8_v2", missing);
	sym(lib, &c->StreamCreate, "cuStreamCreate", missing);
	sym(lib, &c->StreamDestroy, "cuStreamDestroy_v2", missing);
	sym(lib, &c->StreamSynchronize, "cuStreamSynchronize", missing);
	sym(lib, &c->MemHostRegister, "cuMemHostRegister_v2", missing);
	sym(lib, &c->MemHostUnregister, "cuMemHostUnregister", missing);
	sym(lib, &c->GetErrorString, "cuGetErrorString", missing);
	sym(lib, &c->GetErrorName, "cuGetErrorName", missing);
	return *missing == NULL;
}

void nvs__cu_describe(char *buf, size_t len, int rc, const char *call)
{
	const char *name = NULL, *text = NULL;

	if (nvs__cu.GetErrorName)
		nvs__cu.GetErrorName(rc, &name);
	if (nvs__cu.GetErrorString)
		nvs__cu.GetErrorString(rc, &text);
	snprintf(buf, len, "%s failed: %s (%s, CUresult %d)", call,
		 name ? name : "?", text ? text : "no description", rc);
}

int nvs__cu_fail(int rc, const char *who, const char *call)
{
	char cause[NVS_ERRMSG_MAX / 2];
	int err = -EIO;

	nvs__cu_describe(cause, sizeof(cause), rc, call);
	if (rc == NVS_CU_ERROR_OUT_OF_MEMORY)
		err = -ENOMEM;
	else if (rc == NVS_CU_ERROR_NO_DEVICE ||
		 rc == NVS_CU_ERROR_INVALID_DEVICE)
		err = -ENODEV;
	return nvs__err(err, "%s: %s", who, cause);
}

/* Under lock. Leaves state READY or FAILED with load_msg. */
static void load_locked(void)
{
	const char *name = lib_name(), *missing = NULL;
	char cause[NVS_ERRMSG_MAX / 2];
	void *lib;
	int rc, n = 0, off = gpu_off();

	load_err = -ENODEV;
	if (off < 0) {
		load_err = off; /* a value to fix, not a missing driver */
		snprintf(load_msg, sizeof(load_msg), "%s", env_msg);
		goto fail;
	}
	if (off) {
		snprintf(load_msg, sizeof(load_msg),
			 "GPU support is off (NVSWAP_GPU=%s)",
			 getenv("NVSWAP_GPU"));
		goto fail;
	}
	if (nvs__lib_truncated(name, cause, sizeof(cause))) {
		snprintf(load_msg, sizeof(load_msg),
			 "no CUDA driver: %s could not be loaded (%s)", name,
			 cause);
		goto fail;
	}
	lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		snprintf(load_msg, sizeof(load_msg),
			 "no CUDA driver: %s could not be loaded (%s); set "
			 "NVSWAP_LIBCUDA to its path if it is installed",
			 name, dlerror());
		goto fail;
	}
	if (!resolve(lib, &missing)) {
		snprintf(load_msg, sizeof(load_msg),
			 "the CUDA driver %s lacks %s (too old a driver?)",
			 name, missing);
		goto fail; /* the library stays loaded: harmless */
	}
	rc = nvs__cu.Init(0);
	if (rc == 0)
		rc = nvs__cu.DeviceGetCount(&n);
	if (rc != 0 || n <= 0) {
		if (rc != 0)
			nvs__cu_describe(cause, sizeof(cause), rc, "cuInit");
		snprintf(load_msg, sizeof(load_msg),
			 "the CUDA driver %s found no GPU: %s", name,
			 rc ? cause : "cuDeviceGetCount says 0 devices");
		goto fail;
	}
	ndevices = n < MAX_DEVICES ? n : MAX_DEVICES;
	atomic_store_explicit(&state, READY, memory_order_release);
	return;
fail:
	atomic_store_explicit(&state, FAILED, memory_order_release);
}

int nvs__gpu_once(atomic_int *st, pthread_mutex_t *mu, void (*load)(void))
{
	int s = atomic_load_explicit(st, memory_order_acquire);

	if (s == NVS_GPU_UNTRIED) {
		pthread_mutex_lock(mu);
		if (atomic_load_explicit(st, memory_order_relaxed) ==
		    NVS_GPU_UNTRIED)
			load();
		pthread_mutex_unlock(mu);
		s = atomic_load_explicit(st, memory_order_acquire);
	}
	return s;
}

int nvs__gpu_load(const char *who)
{
	if (nvs__gpu_once(&state, &lock, load_locked) == READY)
		return 0;
	return nvs__err(load_err, "%s: %s", who, load_msg);
}

/* dl_iterate_phdr callbacks: the load count, and a loaded driver. */
static int adds_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	*(unsigned long long *)data = info->dlpi_adds;
	return 1; /* the first object is enough */
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *want = data, *name = info->dlpi_name;
	const char *base = strrchr(name, '/');

	(void)size;
	base = base ? base + 1 : name;
	/* "libcuda.so.1" (or NVSWAP_LIBCUDA's file name) as loaded */
	return strcmp(base, want) == 0 || strcmp(name, want) == 0;
}

/*
 * Whether the driver is usable without loading it for the caller: loaded
 * already, or loaded by the process (then device memory may exist, and we
 * load and initialise our view of it). A process that never loaded the
 * driver has no device memory: every pointer is host memory. This runs
 * on every op: the loaded objects are looked through only when the
 * process loaded something since the last look (dlpi_adds), which costs
 * one call that stops at the first object (dlopen with RTLD_NOLOAD of a
 * name not loaded took 10 us here).
 */
static atomic_ullong adds_seen;

static int driver_present(void)
{
	int s = atomic_load_explicit(&state, memory_order_acquire);
	unsigned long long adds = 0;
	const char *want, *slash;
	int off;

	/* load_err is written before the release store of FAILED; -EINVAL
	 * is NVSWAP_GPU's bad value, refused on every call, not taken for
	 * "no driver". */
	if (s != UNTRIED)
		return s == READY	     ? 1
		       : load_err == -EINVAL ? nvs__gpu_load("nvswap")
					     : 0;
	off = gpu_off();
	if (off < 0)
		return nvs__gpu_load("nvswap");
	dl_iterate_phdr(adds_cb, &adds);
	if (adds == atomic_load_explicit(&adds_seen, memory_order_relaxed))
		return 0;
	atomic_store_explicit(&adds_seen, adds, memory_order_relaxed);
	if (off)
		return 0;
	want = lib_name();
	slash = strrchr(want, '/');
	if (!dl_iterate_phdr(find_cb,
			     (void *)(uintptr_t)(slash ? slash + 1 : want)))
		return 0;
	return nvs__gpu_load("nvswap") == 0;
}

int nvs__gpu_ptr(const void *p, int *device, void **ctx)
{
	int attrs[4] = {ATTR_MEMORY_TYPE, ATTR_IS_MANAGED, ATTR_DEVICE_ORDINAL,
			ATTR_CONTEXT};
	unsigned type = 0, managed = 0;
	int ordinal = -1, rc;
	void *c = NULL;
	void *data[4] = {&type, &managed, &ordinal, &c};

	if (!p)
		return 0;
	rc = driver_present();
	if (rc <= 0)
		return rc;
	rc = nvs__cu.PointerGetAttributes(4, attrs, data, (nvs_cuptr)p);
	if (rc != 0)
		return nvs__cu_fail(rc, "nvs_gpu_pointer",
				    "cuPointerGetAttributes");
	if (type != MEMORYTYPE_DEVICE || managed)
		return 0;
	if (device)
		*device = ordinal;
	if (ctx)
		*ctx = c;
	return 1;
}

int nvs_gpu_pointer(const void *p, int *device)
{
	return nvs__gpu_ptr(p, device, NULL);
}

int nvs__gpu_enter(void *ctx, int device, const char *who, void **saved)
{
	int rc;

	if (saved && (rc = nvs__cu.CtxGetCurrent(saved)) != 0)
		return nvs__cu_fail(rc, who, "cuCtxGetCurrent");
	if (!ctx) {
		if (device < 0 || device >= ndevices)
			return nvs__err(-ENODEV,
					"%s: no CUDA device %d (%d present)",
					who, device, ndevices);
		pthread_mutex_lock(&lock);
		rc = 0;
		if (!primary[device]) {
			int dev;
			rc = nvs__cu.DeviceGet(&dev, device);
			if (rc == 0)
				rc = nvs__cu.DevicePrimaryCtxRetain(
					&primary[device], dev);
		}
		ctx = primary[device];
		pthread_mutex_unlock(&lock);
		if (rc != 0)
			return nvs__cu_fail(rc, who,
					    "cuDevicePrimaryCtxRetain");
	}
	rc = nvs__cu.CtxSetCurrent(ctx);
	return rc ? nvs__cu_fail(rc, who, "cuCtxSetCurrent") : 0;
}

void nvs__gpu_leave(void *saved)
{
	nvs__cu.CtxSetCurrent(saved);
}

int nvs__gpu_count(void)
{
	return atomic_load_explicit(&state, memory_order_acquire) == READY
		       ? ndevices
		       : 0;
}

int nvs_gpu_open(void)
{
	int ret = nvs__gpu_load("nvs_gpu_open");

	return ret < 0 ? ret : ndevices;
}

int nvs_gpu_malloc(int device, size_t nbytes, void **out)
{
	nvs_cuptr d = 0;
	void *saved = NULL;
	int ret, rc;

	if (out)
		*out = NULL;
	if (!out || nbytes == 0)
		return nvs__err(-EINVAL, "nvs_gpu_malloc: %s",
				out ? "nbytes is 0" : "out is NULL");
	ret = nvs__gpu_load("nvs_gpu_malloc");
	if (ret == 0)
		ret = nvs__gpu_enter(NULL, device, "nvs_gpu_malloc", &saved);
	if (ret < 0)
		return ret;
	rc = nvs__cu.MemAlloc(&d, nbytes);
	nvs__gpu_leave(saved);
	if (rc != 0)
		return nvs__cu_fail(rc, "nvs_gpu_malloc", "cuMemAlloc");
	*out = (void *)(uintptr_t)d;
	return 0;
}

/* The context of device memory @p made current, for one call (the
 * caller's own is kept in @saved for nvs__gpu_leave()). */
static int enter_for(const void *p, const char *who, void **saved)
{
	void *ctx = NULL;
	int dev = -1;
	int ret = nvs__gpu_load(who);

	if (ret < 0)
		return ret;
	ret = nvs__gpu_ptr(p, &dev, &ctx);
	if (ret < 0)
		return ret;
	if (ret == 0)
		return nvs__err(-EINVAL, "%s: %p is not device memory", who, p);
	return nvs__gpu_enter(ctx, dev, who, saved);
}

int nvs_gpu_free(void *p)
{
	void *saved = NULL;
	int ret, rc;

	if (!p)
		return 0;
	ret = enter_for(p, "nvs_gpu_free", &saved);
	if (ret < 0)
		return ret;
	rc = nvs__cu.MemFree((nvs_cuptr)(uintptr_t)p);
	nvs__gpu_leave(saved);
	return rc ? nvs__cu_fail(rc, "nvs_gpu_free", "cuMemFree") : 0;
}

/* After a call on the legacy stream (@rc its result): wait for the
 * device, as cuMemcpy of device memory and cuMemsetD8 return before it is
 * done, put the caller's context back, and report. */
static int settle(int rc, void *saved, const char *who, const char *call)
{
	if (rc == 0 && (rc = nvs__cu.StreamSynchronize(NULL)) != 0)
		call = "cuStreamSynchronize";
	nvs__gpu_leave(saved);
	return rc ? nvs__cu_fail(rc, who, call) : 0;
}

int nvs_gpu_memcpy(void *dst, const void *src, size_t nbytes)
{
	void *saved = NULL, *ctx = NULL;
	int ret, dev = 0;

	if (nbytes == 0)
		return 0;
	if (!dst || !src)
		return nvs__err(-EINVAL, "nvs_gpu_memcpy: NULL %s",
				dst ? "src" : "dst");
	ret = nvs__gpu_load("nvs_gpu_memcpy");
	if (ret < 0)
		return ret;
	/* Either side's context will do (any context reaches all memory
	 * under unified addressing); between host buffers, device 0's. */
	if (nvs__gpu_ptr(dst, &dev, &ctx) != 1)
		nvs__gpu_ptr(src, &dev, &ctx);
	ret = nvs__gpu_enter(ctx, dev, "nvs_gpu_memcpy", &saved);
	if (ret < 0)
		return ret;
	return settle(nvs__cu.Memcpy((nvs_cuptr)(uintptr_t)dst,
				     (nvs_cuptr)(uintptr_t)src, nbytes),
		      saved, "nvs_gpu_memcpy", "cuMemcpy");
}

int nvs_gpu_memset(void *dst, int byte, size_t nbytes)
{
	void *saved = NULL;
	int ret;

	if (nbytes == 0)
		return 0;
	ret = enter_for(dst, "nvs_gpu_memset", &saved);
	if (ret < 0)
		return ret;
	return settle(nvs__cu.MemsetD8((nvs_cuptr)(uintptr_t)dst,
				       (unsigned char)byte, nbytes),
		      saved, "nvs_gpu_memset", "cuMemsetD8");
}

const char *nvs__gpu_status(void)
{
	return atomic_load_explicit(&state, memory_order_acquire) == FAILED
		       ? load_msg
		       : "";
}
