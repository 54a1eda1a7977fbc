// SPDX-License-Identifier: MIT
/*
 * A stand-in for the CUDA driver (libcuda.so.1) with the entry points
 * nvswap resolves, for tests on machines without a GPU. It exists to
 * inject faults (a copy or an initialisation that fails, through the
 * environment) and to let the staged-I/O paths run under ASan and TSan
 * here; the real proof of those paths is the gpu suite on a real GPU.
 *
 * Its "device memory" behaves as a GPU's does for the host: the addresses
 * it hands out are reserved with PROT_NONE, so any host access to them
 * crashes the test; copies translate them to a hidden backing mapping.
 * Async copies run only at cuStreamSynchronize, so a caller that uses
 * data before synchronising sees stale bytes. cuMemsetD8 is queued on the
 * legacy default stream, which runs when something waits for it: a
 * synchronous cuMemcpy, cuStreamSynchronize(NULL), or an async copy on a
 * blocking stream (created without CU_STREAM_NON_BLOCKING), which the real
 * driver orders after the legacy stream; a non-blocking stream overtakes
 * it, as on a GPU. Contexts must be current for the calls that need one,
 * as with the real driver.
 *
 * Environment: FAKE_CUDA_DEVICES (default 1), FAKE_CUDA_INIT_FAIL (a
 * CUresult for cuInit), FAKE_CUDA_FAIL_COPY=N (the Nth async copy fails
 * with CUDA_ERROR_ILLEGAL_ADDRESS).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_ALLOCS 256
#define MAX_STREAMS 64
#define MAX_PENDING 64
#define MAX_DEVICES 4

#define E_INVALID_VALUE 1
#define E_OUT_OF_MEMORY 2
#define E_NOT_INITIALIZED 3
#define E_INVALID_DEVICE 101
#define E_INVALID_CONTEXT 201
#define E_INVALID_HANDLE 400
#define E_ILLEGAL_ADDRESS 700
#define E_ALREADY_REGISTERED 712
#define E_NOT_REGISTERED 713

struct alloc {
	uintptr_t dev; /* PROT_NONE reservation: the "device address" */
	char *backing;
	size_t len;
	int device;
	int live;
};

struct pending {
	uintptr_t dst, src;
	size_t n;
};

struct stream {
	int live;
	int device;
	unsigned flags; /* 1: CU_STREAM_NON_BLOCKING */
	unsigned npending;
	struct pending p[MAX_PENDING];
};

struct ctx {
	int device;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static struct stream streams[MAX_STREAMS];
static struct ctx ctxs[MAX_DEVICES];
static int inited;
static unsigned long copies;
static unsigned long host_registered;
static _Thread_local struct ctx *current;
/* Memsets queued on the legacy default stream: dst, byte (in src), n. */
static struct pending legacy[MAX_PENDING];
static unsigned nlegacy;

/* The driver's prototypes (no header: the real one is not installed). */
int cuInit(unsigned flags);
int cuDriverGetVersion(int *v);
int cuDeviceGetCount(int *n);
int cuDeviceGet(int *d, int ordinal);
int cuDeviceGetName(char *name, int len, int d);
int cuDeviceTotalMem_v2(size_t *bytes, int d);
int cuDeviceGetAttribute(int *v, int attr, int d);
int cuDevicePrimaryCtxRetain(void **c, int d);
int cuCtxSetCurrent(void *c);
int cuCtxGetCurrent(void **c);
int cuPointerGetAttributes(unsigned n, int *attrs, void **data, uint64_t p);
int cuMemAlloc_v2(uint64_t *p, size_t n);
int cuMemFree_v2(uint64_t p);
int cuMemcpy(uint64_t dst, uint64_t src, size_t n);
int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t n, void *s);
int cuMemsetD8_v2(uint64_t dst, unsigned char v, size_t n);
int cuStreamCreate(void **s, unsigned flags);
int cuStreamDestroy_v2(void *s);
int cuStreamSynchronize(void *s);
int cuMemHostRegister_v2(void *p, size_t n, unsigned flags);
int cuMemHostUnregister(void *p);
int cuGetErrorString(int e, const char **s);
int cuGetErrorName(int e, const char **s);
unsigned long fake_cuda_copies(void);
int fake_cuda_live_streams(void);
int fake_cuda_live_allocs(void);
unsigned long fake_cuda_host_registered(void);
char *fake_cuda_backing(uint64_t p, size_t n);

static int ndevices(void)
{
	const char *e = getenv("FAKE_CUDA_DEVICES");
	int n = e ? atoi(e) : 1;

	return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

int cuInit(unsigned flags)
{
	const char *e = getenv("FAKE_CUDA_INIT_FAIL");

	(void)flags;
	if (e && atoi(e))
		return atoi(e);
	inited = 1;
	return 0;
}

int cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}

int cuDeviceGetCount(int *n)
{
	if (!inited)
		return E_NOT_INITIALIZED;
	*n = ndevices();
	return 0;
}

int cuDeviceGet(int *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= ndevices())
		return E_INVALID_DEVICE;
	*d = ordinal;
	return 0;
}

int cuDeviceGetName(char *name, int len, int d)
{
	(void)d;
	strncpy(name, "Fake GPU (tests/fakes/fake_cuda.c)", (size_t)len - 1);
	name[len - 1] = 0;
	return 0;
}

int cuDeviceTotalMem_v2(size_t *bytes, int d)
{
	(void)d;
	*bytes = (size_t)1 << 30;
	return 0;
}

int cuDeviceGetAttribute(int *v, int attr, int d)
{
	(void)v;
	(void)attr;
	(void)d;
	return E_INVALID_VALUE; /* no PCI identity for a fake */
}

int cuDevicePrimaryCtxRetain(void **c, int d)
{
	if (d < 0 || d >= ndevices())
		return E_INVALID_DEVICE;
	ctxs[d].device = d;
	*c = &ctxs[d];
	return 0;
}

int cuCtxSetCurrent(void *c)
{
	current = c;
	return 0;
}

int cuCtxGetCurrent(void **c)
{
	*c = current;
	return 0;
}

/* Under lock: the allocation holding [p, p + n), or NULL. */
static struct alloc *find(uintptr_t p, size_t n)
{
	for (int i = 0; i < MAX_ALLOCS; i++) {
		struct alloc *a = &allocs[i];
		if (a->live && p >= a->dev && p - a->dev <= a->len &&
		    n <= a->len - (p - a->dev))
			return a;
	}
	return NULL;
}

/* Under lock: host memory for @p: device addresses translated. */
static char *host_of(uintptr_t p, size_t n, int *err)
{
	struct alloc *a = find(p, n);

	*err = 0;
	if (a)
		return a->backing + (p - a->dev);
	/* A device address that is not wholly inside one allocation. */
	for (int i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].live && p < allocs[i].dev + allocs[i].len &&
		    allocs[i].dev < p + n)
			*err = E_ILLEGAL_ADDRESS;
	return (char *)p;
}

int cuPointerGetAttributes(unsigned n, int *attrs, void **data, uint64_t p)
{
	struct alloc *a;

	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p, 1);
	for (unsigned i = 0; i < n; i++) {
		switch (attrs[i]) {
		case 1: /* context */
			*(void **)data[i] = a ? &ctxs[a->device] : NULL;
			break;
		case 2: /* memory type: device, else unknown */
			*(unsigned *)data[i] = a ? 2 : 0;
			break;
		case 8: /* managed */
			*(unsigned *)data[i] = 0;
			break;
		case 9: /* ordinal */
			*(int *)data[i] = a ? a->device : -2;
			break;
		default:
			pthread_mutex_unlock(&lock);
			return E_INVALID_VALUE;
		}
	}
	pthread_mutex_unlock(&lock);
	return 0;
}

int cuMemAlloc_v2(uint64_t *p, size_t n)
{
	void *dev, *backing;
	int ret = E_OUT_OF_MEMORY;

	if (!current)
		return E_INVALID_CONTEXT;
	dev = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	backing = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pthread_mutex_lock(&lock);
	for (int i = 0;
	     i < MAX_ALLOCS && dev != MAP_FAILED && backing != MAP_FAILED;
	     i++) {
		if (allocs[i].live)
			continue;
		allocs[i] = (struct alloc){(uintptr_t)dev, backing, n,
					   current->device, 1};
		*p = (uint64_t)(uintptr_t)dev;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&lock);
	if (ret) {
		if (dev != MAP_FAILED)
			munmap(dev, n);
		if (backing != MAP_FAILED)
			munmap(backing, n);
	}
	return ret;
}

int cuMemFree_v2(uint64_t p)
{
	struct alloc *a, copy;

	if (!current)
		return E_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p, 1);
	if (!a || a->dev != (uintptr_t)p) {
		pthread_mutex_unlock(&lock);
		return E_INVALID_VALUE;
	}
	copy = *a;
	a->live = 0;
	pthread_mutex_unlock(&lock);
	munmap((void *)copy.dev, copy.len);
	munmap(copy.backing, copy.len);
	return 0;
}

/* Under lock. */
static int do_copy(uintptr_t dst, uintptr_t src, size_t n)
{
	int e1, e2;
	char *d = host_of(dst, n, &e1), *s = host_of(src, n, &e2);

	if (e1 || e2)
		return E_ILLEGAL_ADDRESS;
	memmove(d, s, n);
	return 0;
}

/* Under lock: run what the legacy stream holds (memsets). */
static void flush_legacy(void)
{
	for (unsigned i = 0; i < nlegacy; i++) {
		int err;
		char *d = host_of(legacy[i].dst, legacy[i].n, &err);
		if (!err)
			memset(d, (int)legacy[i].src, legacy[i].n);
	}
	nlegacy = 0;
}

int cuMemcpy(uint64_t dst, uint64_t src, size_t n)
{
	int ret;

	if (!current)
		return E_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	flush_legacy();
	ret = do_copy((uintptr_t)dst, (uintptr_t)src, n);
	pthread_mutex_unlock(&lock);
	return ret;
}

int cuMemcpyAsync(uint64_t dst, uint64_t src, size_t n, void *sp)
{
	struct stream *s = sp;
	const char *fail = getenv("FAKE_CUDA_FAIL_COPY");
	int ret = 0;

	if (!current)
		return E_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	copies++;
	if (!s || s < streams || s >= streams + MAX_STREAMS || !s->live)
		ret = E_INVALID_HANDLE;
	else if (s->device != current->device)
		ret = E_INVALID_CONTEXT; /* a stream of another context */
	else if (fail && strtoul(fail, NULL, 10) == copies)
		ret = E_ILLEGAL_ADDRESS;
	if (ret == 0) {
		if (!(s->flags & 1))
			flush_legacy(); /* blocking: after the legacy stream */
		if (s->npending == MAX_PENDING)
			ret = do_copy((uintptr_t)dst, (uintptr_t)src, n);
		else
			s->p[s->npending++] = (struct pending){dst, src, n};
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

int cuMemsetD8_v2(uint64_t dst, unsigned char v, size_t n)
{
	int err;
	char *d;

	if (!current)
		return E_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	d = host_of((uintptr_t)dst, n, &err);
	if (!err && d == (char *)(uintptr_t)dst)
		err = E_INVALID_VALUE; /* host memory */
	if (!err && nlegacy == MAX_PENDING)
		flush_legacy();
	if (!err) /* asynchronous, on the legacy stream */
		legacy[nlegacy++] = (struct pending){dst, v, n};
	pthread_mutex_unlock(&lock);
	return err;
}

int cuStreamCreate(void **sp, unsigned flags)
{
	if (!current)
		return E_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_STREAMS; i++) {
		if (streams[i].live)
			continue;
		streams[i].live = 1;
		streams[i].flags = flags;
		streams[i].device = current->device;
		streams[i].npending = 0;
		*sp = &streams[i];
		pthread_mutex_unlock(&lock);
		return 0;
	}
	pthread_mutex_unlock(&lock);
	return E_OUT_OF_MEMORY;
}

int cuStreamSynchronize(void *sp)
{
	struct stream *s = sp;
	int ret = 0;

	if (!s) { /* the legacy stream */
		if (!current)
			return E_INVALID_CONTEXT;
		pthread_mutex_lock(&lock);
		flush_legacy();
		pthread_mutex_unlock(&lock);
		return 0;
	}
	pthread_mutex_lock(&lock);
	if (!s->live)
		ret = E_INVALID_HANDLE;
	for (unsigned i = 0; !ret && i < s->npending; i++)
		ret = do_copy(s->p[i].dst, s->p[i].src, s->p[i].n);
	s->npending = 0;
	pthread_mutex_unlock(&lock);
	return ret;
}

int cuStreamDestroy_v2(void *sp)
{
	struct stream *s = sp;

	pthread_mutex_lock(&lock);
	s->live = 0;
	pthread_mutex_unlock(&lock);
	return 0;
}

int cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	(void)p;
	(void)n;
	(void)flags;
	pthread_mutex_lock(&lock);
	host_registered++;
	pthread_mutex_unlock(&lock);
	return 0;
}

int cuMemHostUnregister(void *p)
{
	int ret = 0;

	(void)p;
	pthread_mutex_lock(&lock);
	if (host_registered == 0)
		ret = E_NOT_REGISTERED;
	else
		host_registered--;
	pthread_mutex_unlock(&lock);
	return ret;
}

int cuGetErrorString(int e, const char **s)
{
	*s = e == E_ILLEGAL_ADDRESS ? "an illegal memory access (fake)"
	     : e == 100		    ? "no CUDA-capable device (fake)"
				    : "fake error";
	return 0;
}

int cuGetErrorName(int e, const char **s)
{
	*s = e == E_ILLEGAL_ADDRESS   ? "CUDA_ERROR_ILLEGAL_ADDRESS"
	     : e == 100		      ? "CUDA_ERROR_NO_DEVICE"
	     : e == E_INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT"
				      : "CUDA_ERROR_FAKE";
	return 0;
}

unsigned long fake_cuda_copies(void)
{
	unsigned long n;

	pthread_mutex_lock(&lock);
	n = copies;
	pthread_mutex_unlock(&lock);
	return n;
}

int fake_cuda_live_streams(void)
{
	int n = 0;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_STREAMS; i++)
		n += streams[i].live;
	pthread_mutex_unlock(&lock);
	return n;
}

int fake_cuda_live_allocs(void)
{
	int n = 0;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_ALLOCS; i++)
		n += allocs[i].live;
	pthread_mutex_unlock(&lock);
	return n;
}

unsigned long fake_cuda_host_registered(void)
{
	unsigned long n;

	pthread_mutex_lock(&lock);
	n = host_registered;
	pthread_mutex_unlock(&lock);
	return n;
}

/* For the stand-in cuFile: the host memory behind device range [p, p+n),
 * or NULL when it is not inside one allocation. */
char *fake_cuda_backing(uint64_t p, size_t n)
{
	struct alloc *a;
	char *h = NULL;

	pthread_mutex_lock(&lock);
	a = find((uintptr_t)p, n);
	if (a)
		h = a->backing + ((uintptr_t)p - a->dev);
	pthread_mutex_unlock(&lock);
	return h;
}
