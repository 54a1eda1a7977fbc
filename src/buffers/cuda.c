// SPDX-License-Identifier: MIT
/*
 * The CUDA runtime, found at run time with dlopen (see cuda.h). Only three
 * entry points are used, through their C ABI: cudaHostRegister,
 * cudaHostUnregister and cudaGetErrorString (cudaError_t is an int enum).
 */
#include "buffers/cuda.h"
#include "internal/errors.h"
#include "internal/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_HOST_REGISTER_PORTABLE 0x01u

typedef int (*register_fn)(void *, size_t, unsigned);
typedef int (*unregister_fn)(void *);
typedef const char *(*errstr_fn)(int);

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Set inside once, read-only after it. */
static register_fn cuda_register;
static unregister_fn cuda_unregister;
static errstr_fn cuda_errstr;
static char init_msg[512];
static int init_err; /* -EINVAL: NVSWAP_CUDA holds no on/off value */
/* Written once, by the first failed registration, before the state moves
 * to FAILED (release); readers load the state with acquire first. */
static char fail_msg[512];
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
/* An enum nvs_cuda_state. */
static atomic_int state;

static const char *const names[] = {
	"libcudart.so",
	"libcudart.so.13",
	"libcudart.so.12",
	"libcudart.so.11.0",
};

static void *open_runtime(const char **which)
{
	const char *env = getenv("NVSWAP_CUDART");
	void *lib;

	if (env && *env) {
		*which = env;
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	}
	/* A runtime the application already loaded (PyTorch's) comes first:
	 * registering with another copy would not be seen by its streams. */
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		if (lib) {
			*which = names[i];
			return lib;
		}
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (lib) {
			*which = names[i];
			return lib;
		}
	}
	*which = names[0];
	return NULL;
}

/* A function pointer from dlsym: ISO C cannot cast void * to one. */
#define LOAD_SYM(fnp, lib, name)                                               \
	do {                                                                   \
		void *sym_ = dlsym((lib), (name));                             \
		memcpy((fnp), &sym_, sizeof(sym_));                            \
	} while (0)

static void init_once(void)
{
	const char *which = NULL;
	bool on;
	void *lib;

	init_err = nvs__env_switch("NVSWAP_CUDA", true, &on, init_msg,
				   sizeof(init_msg));
	if (init_err || !on) {
		/* A bad value registers nothing either: nvs__cuda_env()
		 * refuses every pinned allocation, naming it. */
		if (!init_err)
			snprintf(init_msg, sizeof(init_msg),
				 "CUDA registration off (NVSWAP_CUDA=%s)",
				 getenv("NVSWAP_CUDA"));
		atomic_store_explicit(&state, NVS_CUDA_OFF,
				      memory_order_release);
		return;
	}
	lib = open_runtime(&which);
	if (!lib) {
		snprintf(init_msg, sizeof(init_msg),
			 "no CUDA runtime found (%s: %s); pinned memory is "
			 "not registered with CUDA",
			 which, dlerror());
		atomic_store_explicit(&state, NVS_CUDA_ABSENT,
				      memory_order_release);
		return;
	}
	LOAD_SYM(&cuda_register, lib, "cudaHostRegister");
	LOAD_SYM(&cuda_unregister, lib, "cudaHostUnregister");
	LOAD_SYM(&cuda_errstr, lib, "cudaGetErrorString");
	if (!cuda_register || !cuda_unregister) {
		snprintf(init_msg, sizeof(init_msg),
			 "%s has no cudaHostRegister/cudaHostUnregister; "
			 "pinned memory is not registered with CUDA",
			 which);
		atomic_store_explicit(&state, NVS_CUDA_ABSENT,
				      memory_order_release);
		return;
	}
	/* The library stays loaded for the life of the process. */
	snprintf(init_msg, sizeof(init_msg),
		 "pinned memory is registered with CUDA through %s", which);
	atomic_store_explicit(&state, NVS_CUDA_ACTIVE, memory_order_release);
}

void nvs__cuda_init(void)
{
	pthread_once(&once, init_once);
}

int nvs__cuda_env(const char *call)
{
	pthread_once(&once, init_once);
	return init_err ? nvs__err(init_err, "%s: %s", call, init_msg) : 0;
}

enum nvs_cuda_state nvs__cuda_state(void)
{
	return (enum nvs_cuda_state)atomic_load_explicit(&state,
							 memory_order_acquire);
}

const char *nvs__cuda_status(void)
{
	switch (nvs__cuda_state()) {
	case NVS_CUDA_UNKNOWN:
		return "CUDA not looked for yet (no pinned memory allocated)";
	case NVS_CUDA_FAILED:
		return fail_msg;
	default:
		return init_msg;
	}
}

bool nvs__cuda_register(void *p, size_t n)
{
	int rc;

	nvs__cuda_init();
	if (nvs__cuda_state() != NVS_CUDA_ACTIVE)
		return false;
	rc = cuda_register(p, n, CUDA_HOST_REGISTER_PORTABLE);
	if (rc == 0)
		return true;
	pthread_mutex_lock(&fail_lock);
	if (nvs__cuda_state() == NVS_CUDA_ACTIVE) {
		snprintf(fail_msg, sizeof(fail_msg),
			 "cudaHostRegister of %zu bytes failed with error %d "
			 "(%s); CUDA registration is off for this process "
			 "(no GPU or driver?)",
			 n, rc, cuda_errstr ? cuda_errstr(rc) : "?");
		atomic_store_explicit(&state, NVS_CUDA_FAILED,
				      memory_order_release);
	}
	pthread_mutex_unlock(&fail_lock);
	return false;
}

void nvs__cuda_unregister(void *p)
{
	if (cuda_unregister)
		cuda_unregister(p);
}
