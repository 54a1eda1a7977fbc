// SPDX-License-Identifier: MIT
/*
 * cuFile, found at run time (gds.h), and the public nvs_gds_* calls. The
 * few types of cufile.h nvswap needs are declared here from their
 * documented C layout: CUfileError_t is two ints returned by value, a
 * CUfileDescr_t a handle type, a union of fd and pointer, and an fs-ops
 * pointer.
 */
#include "gpu/gds.h"
#include "gpu/driver.h"
#include "internal/errors.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REGISTERED 1024
#define CU_FILE_HANDLE_TYPE_OPAQUE_FD 1

struct cufile_err {
	int err;    /* CUfileOpError: 0 success, 5000 + n cuFile errors */
	int cu_err; /* CUresult behind it, if any */
};

struct cufile_descr {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};

static struct {
	struct cufile_err (*DriverOpen)(void);
	struct cufile_err (*HandleRegister)(void **, struct cufile_descr *);
	void (*HandleDeregister)(void *);
	struct cufile_err (*BufRegister)(const void *, size_t, int);
	struct cufile_err (*BufDeregister)(const void *);
	ssize_t (*Read)(void *, void *, size_t, off_t, off_t);
	ssize_t (*Write)(void *, const void *, size_t, off_t, off_t);
} cf;

enum {
	UNTRIED = NVS_GPU_UNTRIED,
	READY = NVS_GPU_READY,
	FAILED = NVS_GPU_FAILED
};

/* lock serialises loading and the registry; state pairs (release) with
 * the reads of cf after an acquire load. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int state;
static char load_msg[NVS_ERRMSG_MAX];
static char lib_used[160];
static struct {
	uintptr_t base;
	size_t len;
} reg[MAX_REGISTERED];
static unsigned nreg;

static const char *const names[] = {
	"libcufile.so.0",
	"libcufile.so",
	"/usr/local/cuda/lib64/libcufile.so.0",
};

static void *open_lib(char *which, size_t len)
{
	const char *env = getenv("NVSWAP_CUFILE");
	void *lib;

	if (env && *env) {
		snprintf(which, len, "%s", env);
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (lib) {
			snprintf(which, len, "%s", names[i]);
			return lib;
		}
	}
	snprintf(which, len, "%s", names[0]);
	return NULL;
}

#define SYM(field, name)                                                       \
	do {                                                                   \
		void *p_ = dlsym(lib, (name));                                 \
		memcpy(&cf.field, &p_, sizeof(p_));                            \
		if (!p_ && !missing)                                           \
			missing = (name);                                      \
	} while (0)

/* cuFile's CUfileOpError values from 5001 on, as cufile.h names them. */
static const char *const op_names[] = {
	"DRIVER_NOT_INITIALIZED",
	"DRIVER_INVALID_PROPS",
	"DRIVER_UNSUPPORTED_LIMIT",
	"DRIVER_VERSION_MISMATCH",
	"DRIVER_VERSION_READ_ERROR",
	"DRIVER_CLOSING",
	"PLATFORM_NOT_SUPPORTED",
	"IO_NOT_SUPPORTED",
	"DEVICE_NOT_SUPPORTED",
	"NVFS_DRIVER_ERROR",
	"CUDA_DRIVER_ERROR",
	"CUDA_POINTER_INVALID",
	"CUDA_MEMORY_TYPE_INVALID",
	"CUDA_POINTER_RANGE_ERROR",
	"CUDA_CONTEXT_MISMATCH",
	"INVALID_MAPPING_SIZE",
	"INVALID_MAPPING_RANGE",
	"INVALID_FILE_TYPE",
	"INVALID_FILE_OPEN_FLAG",
	"DIO_NOT_SET",
	"?",
	"INVALID_VALUE",
	"MEMORY_ALREADY_REGISTERED",
	"MEMORY_NOT_REGISTERED",
	"PERMISSION_DENIED",
	"DRIVER_ALREADY_OPEN",
	"HANDLE_NOT_REGISTERED",
	"HANDLE_ALREADY_REGISTERED",
	"DEVICE_NOT_FOUND",
};

static const char *op_name(int err)
{
	unsigned i = (unsigned)(err - 5001);

	return i < sizeof(op_names) / sizeof(op_names[0]) ? op_names[i] : "?";
}

static void describe_err(char *buf, size_t len, struct cufile_err e,
			 const char *call)
{
	char cu[160] = "";

	if (e.cu_err)
		nvs__cu_describe(cu, sizeof(cu), e.cu_err, "the CUDA call");
	snprintf(buf, len, "%s failed: cuFile error %d (CU_FILE_%s)%s%s", call,
		 e.err, op_name(e.err), e.cu_err ? "; " : "", cu);
}

static bool nvfs_loaded(void)
{
	return access("/proc/driver/nvidia-fs/version", F_OK) == 0 ||
	       access("/sys/module/nvidia_fs", F_OK) == 0;
}

/* Under lock. */
static void load_locked(void)
{
	const char *missing = NULL, *env;
	char cut[NVS_ERRMSG_MAX / 2];
	struct cufile_err e;
	void *lib, *saved = NULL;

	if (nvs__gpu_load("cuFile") < 0) {
		snprintf(load_msg, sizeof(load_msg), "%s", nvs_last_error());
		goto fail;
	}
	env = getenv("NVSWAP_CUFILE");
	if (env && *env && nvs__lib_truncated(env, cut, sizeof(cut))) {
		snprintf(load_msg, sizeof(load_msg),
			 "no cuFile: %s could not be loaded (%s)", env, cut);
		goto fail;
	}
	lib = open_lib(lib_used, sizeof(lib_used));
	if (!lib) {
		snprintf(load_msg, sizeof(load_msg),
			 "no cuFile: %s could not be loaded (%s); install "
			 "GPUDirect Storage (cuda-toolkit's libcufile) or set "
			 "NVSWAP_CUFILE to its path",
			 lib_used, dlerror());
		goto fail;
	}
	SYM(DriverOpen, "cuFileDriverOpen");
	SYM(HandleRegister, "cuFileHandleRegister");
	SYM(HandleDeregister, "cuFileHandleDeregister");
	SYM(BufRegister, "cuFileBufRegister");
	SYM(BufDeregister, "cuFileBufDeregister");
	SYM(Read, "cuFileRead");
	SYM(Write, "cuFileWrite");
	if (missing) {
		snprintf(load_msg, sizeof(load_msg), "cuFile %s lacks %s",
			 lib_used, missing);
		goto fail;
	}
	/* cuFile works in the application's CUDA context: device 0's
	 * primary one here, as the runtime would make it. */
	if (nvs__gpu_enter(NULL, 0, "cuFile", &saved) < 0) {
		snprintf(load_msg, sizeof(load_msg), "%s", nvs_last_error());
		goto fail;
	}
	e = cf.DriverOpen();
	nvs__gpu_leave(saved);
	if (e.err != 0) {
		char cause[NVS_ERRMSG_MAX / 2];
		describe_err(cause, sizeof(cause), e, "cuFileDriverOpen");
		snprintf(load_msg, sizeof(load_msg),
			 "%s (%s); without the nvidia-fs driver cuFile needs "
			 "\"allow_compat_mode\": true in its cufile.json",
			 cause,
			 nvfs_loaded() ? "nvidia-fs is loaded"
				       : "nvidia-fs is not loaded");
		goto fail;
	}
	atomic_store_explicit(&state, READY, memory_order_release);
	return;
fail:
	atomic_store_explicit(&state, FAILED, memory_order_release);
}

int nvs__gds_load(const char *who)
{
	if (nvs__gpu_once(&state, &lock, load_locked) == READY)
		return 0;
	return nvs__err(-ENODEV, "%s: %s", who, load_msg);
}

int nvs_gds_open(void)
{
	return nvs__gds_load("nvs_gds_open");
}

void nvs__gds_describe(bool *open, bool *nvfs, char *lib, size_t liblen,
		       char *mode, size_t modelen, char *status,
		       size_t statuslen)
{
	*open = nvs__gds_load("cuFile") == 0;
	*nvfs = nvfs_loaded();
	snprintf(lib, liblen, "%s", *open ? lib_used : "");
	snprintf(mode, modelen, "%s",
		 !*open	 ? ""
		 : *nvfs ? "GDS (nvidia-fs)"
			 : "compatibility (POSIX, no nvidia-fs)");
	snprintf(status, statuslen, "%s",
		 *open ? "cuFile driver open" : load_msg);
}

int nvs_gds_register(void *p, size_t nbytes)
{
	struct cufile_err e;
	uintptr_t a = (uintptr_t)p;
	void *saved = NULL, *ctx = NULL;
	int ret, dev = -1;

	ret = nvs__gds_load("nvs_gds_register");
	if (ret < 0)
		return ret;
	ret = nvs__gpu_ptr(p, &dev, &ctx);
	if (ret <= 0 || nbytes == 0)
		return ret < 0 ? ret
			       : nvs__err(-EINVAL, "nvs_gds_register: %s",
					  nbytes ? "not device memory"
						 : "nbytes is 0");
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nreg; i++) {
		if (a < reg[i].base + reg[i].len && reg[i].base < a + nbytes) {
			pthread_mutex_unlock(&lock);
			return nvs__err(-EINVAL,
					"nvs_gds_register: %p (%zu bytes) "
					"overlaps a registered range",
					p, nbytes);
		}
	}
	if (nreg == MAX_REGISTERED) {
		pthread_mutex_unlock(&lock);
		return nvs__err(-ENOSPC,
				"nvs_gds_register: %d ranges are registered "
				"already",
				MAX_REGISTERED);
	}
	ret = nvs__gpu_enter(ctx, dev, "nvs_gds_register", &saved);
	if (ret == 0) {
		e = cf.BufRegister(p, nbytes, 0);
		nvs__gpu_leave(saved);
		if (e.err == 0) {
			reg[nreg].base = a;
			reg[nreg].len = nbytes;
			nreg++;
		} else {
			char cause[NVS_ERRMSG_MAX / 2];
			describe_err(cause, sizeof(cause), e,
				     "cuFileBufRegister");
			ret = nvs__err(-EIO, "nvs_gds_register: %s", cause);
		}
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

int nvs_gds_deregister(void *p)
{
	struct cufile_err e;
	char cause[NVS_ERRMSG_MAX / 2];
	int ret;

	ret = nvs__gds_load("nvs_gds_deregister");
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nreg; i++) {
		if (reg[i].base != (uintptr_t)p)
			continue;
		e = cf.BufDeregister(p);
		reg[i] = reg[--nreg];
		pthread_mutex_unlock(&lock);
		if (e.err == 0)
			return 0;
		describe_err(cause, sizeof(cause), e, "cuFileBufDeregister");
		return nvs__err(-EIO, "nvs_gds_deregister: %s", cause);
	}
	pthread_mutex_unlock(&lock);
	return nvs__err(-ENOENT, "nvs_gds_deregister: %p is not registered", p);
}

/* The registered range holding [p, p + n), or 0 with *base = p. */
static bool find_registered(uintptr_t p, size_t n, uintptr_t *base)
{
	bool found = false;

	*base = p;
	if (atomic_load_explicit(&state, memory_order_acquire) != READY)
		return false;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nreg && !found; i++) {
		if (p >= reg[i].base && p + n <= reg[i].base + reg[i].len) {
			*base = reg[i].base;
			found = true;
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

bool nvs_gds_registered(const void *p, size_t nbytes)
{
	uintptr_t base;

	return find_registered((uintptr_t)p, nbytes, &base);
}

/*
 * cuFile handles by descriptor, counted: ops in flight on one cached
 * descriptor share its handle (cuFile refuses to register a descriptor
 * twice), and the last op to end deregisters it, before the descriptor
 * can be closed and its number reused. Under lock.
 */
static struct {
	int fd;
	unsigned refs;
	void *fh;
} fhs[256];

int nvs__gds_handle_open(int fd, void **fh, const char *who)
{
	struct cufile_descr d;
	struct cufile_err e;
	char cause[NVS_ERRMSG_MAX / 2];
	unsigned i, fr = 256;

	pthread_mutex_lock(&lock);
	for (i = 0; i < 256; i++) {
		if (fhs[i].refs && fhs[i].fd == fd) {
			fhs[i].refs++;
			*fh = fhs[i].fh;
			pthread_mutex_unlock(&lock);
			return 0;
		}
		if (!fhs[i].refs && fr == 256)
			fr = i;
	}
	if (fr == 256) {
		pthread_mutex_unlock(&lock);
		*fh = NULL;
		return nvs__err(-EAGAIN,
				"%s: 256 files have cuFile ops in flight", who);
	}
	memset(&d, 0, sizeof(d));
	d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
	d.handle.fd = fd;
	e = cf.HandleRegister(fh, &d);
	if (e.err == 0) {
		fhs[fr].fd = fd;
		fhs[fr].refs = 1;
		fhs[fr].fh = *fh;
	}
	pthread_mutex_unlock(&lock);
	if (e.err == 0)
		return 0;
	*fh = NULL;
	describe_err(cause, sizeof(cause), e, "cuFileHandleRegister");
	return nvs__err(-EIO, "%s: %s", who, cause);
}

void nvs__gds_handle_close(void *fh)
{
	if (!fh)
		return;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < 256; i++) {
		if (fhs[i].refs && fhs[i].fh == fh) {
			if (--fhs[i].refs == 0)
				cf.HandleDeregister(fh);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
}

int nvs__gds_io(void *fh, const struct nvs_gpu_mem *m, void *dev, size_t n,
		int64_t off, bool write, char *err, size_t errlen)
{
	uintptr_t base;
	size_t done = 0;
	int ret;

	ret = nvs__gpu_enter(m->ctx, m->device, "cuFile", NULL);
	if (ret < 0) {
		snprintf(err, errlen, "%s", nvs_last_error());
		return ret;
	}
	find_registered((uintptr_t)dev, n, &base);
	while (done < n) {
		off_t boff = (off_t)((uintptr_t)dev + done - base);
		ssize_t r = write ? cf.Write(fh, (const void *)base, n - done,
					     (off_t)off + (off_t)done, boff)
				  : cf.Read(fh, (void *)base, n - done,
					    (off_t)off + (off_t)done, boff);
		if (r > 0) {
			done += (size_t)r;
			continue;
		}
		if (r == 0) {
			snprintf(err, errlen,
				 "cuFile%s: %s after %zu of %zu bytes",
				 write ? "Write" : "Read",
				 write ? "wrote nothing" : "file ended early",
				 done, n);
			return write ? -ENOSPC : -EIO;
		}
		if (r == -1) {
			int e = errno;
			snprintf(err, errlen, "cuFile%s: %s",
				 write ? "Write" : "Read",
				 nvs_strerror(e ? -e : -EIO));
			return e ? -e : -EIO;
		}
		snprintf(err, errlen, "cuFile%s: cuFile error %zd (CU_FILE_%s)",
			 write ? "Write" : "Read", -r, op_name((int)-r));
		return -EIO;
	}
	return 0;
}
