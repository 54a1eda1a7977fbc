// SPDX-License-Identifier: MIT
/*
 * A stand-in for cuFile (libcufile.so.0) beside tests/fakes/fake_cuda.c,
 * for the use_gds plumbing on machines without a GPU: handle and buffer
 * registration with cuFile's rules (a descriptor registered twice is
 * CU_FILE_HANDLE_ALREADY_REGISTERED, I/O on an unregistered handle fails)
 * and reads and writes that move the stand-in driver's device memory with
 * POSIX I/O, as cuFile's compatibility mode does. FAKE_CUFILE_FAIL_IO=N
 * fails the Nth read or write with CU_FILE_CUDA_DRIVER_ERROR;
 * FAKE_CUFILE_FAIL_REGISTER refuses handles as the H200 VM's cuFile did
 * without a udev database (CU_FILE_HANDLE_NOT_REGISTERED). The real
 * proof is the gpu suite on a GPU.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define E_INVALID_VALUE 5022
#define E_CUDA_DRIVER_ERROR 5011
#define E_HANDLE_NOT_REGISTERED 5027
#define E_HANDLE_ALREADY_REGISTERED 5028

struct err {
	int err;
	int cu_err;
};

struct descr {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fds[256]; /* registered descriptors + 1; 0 = free */
static unsigned long ios;
static int max_live;

struct err cuFileDriverOpen(void);
struct err cuFileHandleRegister(void **fh, struct descr *d);
void cuFileHandleDeregister(void *fh);
struct err cuFileBufRegister(const void *p, size_t n, int flags);
struct err cuFileBufDeregister(const void *p);
ssize_t cuFileRead(void *fh, void *base, size_t n, off_t foff, off_t boff);
ssize_t cuFileWrite(void *fh, const void *base, size_t n, off_t foff,
		    off_t boff);
int fake_cufile_live_handles(void);
int fake_cufile_max_live_handles(void);

struct err cuFileDriverOpen(void)
{
	return (struct err){0, 0};
}

struct err cuFileHandleRegister(void **fh, struct descr *d)
{
	int slot = -1, live = 0;

	if (!fh || !d || d->type != 1 || d->handle.fd < 0)
		return (struct err){E_INVALID_VALUE, 0};
	if (getenv("FAKE_CUFILE_FAIL_REGISTER"))
		return (struct err){E_HANDLE_NOT_REGISTERED, 0};
	pthread_mutex_lock(&lock);
	for (int i = 0; i < 256; i++) {
		if (fds[i] == d->handle.fd + 1) {
			pthread_mutex_unlock(&lock);
			return (struct err){E_HANDLE_ALREADY_REGISTERED, 0};
		}
		if (!fds[i] && slot < 0)
			slot = i;
		live += fds[i] != 0;
	}
	if (slot >= 0) {
		fds[slot] = d->handle.fd + 1;
		if (live + 1 > max_live)
			max_live = live + 1;
	}
	pthread_mutex_unlock(&lock);
	if (slot < 0)
		return (struct err){E_INVALID_VALUE, 0};
	*fh = &fds[slot];
	return (struct err){0, 0};
}

void cuFileHandleDeregister(void *fh)
{
	pthread_mutex_lock(&lock);
	*(int *)fh = 0;
	pthread_mutex_unlock(&lock);
}

struct err cuFileBufRegister(const void *p, size_t n, int flags)
{
	(void)p;
	(void)n;
	(void)flags;
	return (struct err){0, 0};
}

struct err cuFileBufDeregister(const void *p)
{
	(void)p;
	return (struct err){0, 0};
}

/* The stand-in driver's host memory behind a device range. */
static char *backing(uint64_t p, size_t n)
{
	static char *(*fn)(uint64_t, size_t);
	const char *path = getenv("NVSWAP_LIBCUDA");

	if (!fn && path) {
		void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
		void *s = lib ? dlsym(lib, "fake_cuda_backing") : NULL;
		memcpy(&fn, &s, sizeof(s));
	}
	return fn ? fn(p, n) : NULL;
}

static ssize_t io(void *fh, char *dev, size_t n, off_t foff, bool write)
{
	const char *fail = getenv("FAKE_CUFILE_FAIL_IO");
	char path[64], *host;
	int fd, pfd;
	ssize_t r;
	unsigned long nth;

	pthread_mutex_lock(&lock);
	fd = *(int *)fh - 1;
	nth = ++ios;
	pthread_mutex_unlock(&lock);
	if (fd < 0)
		return -E_HANDLE_NOT_REGISTERED;
	if (fail && strtoul(fail, NULL, 10) == nth)
		return -E_CUDA_DRIVER_ERROR;
	host = backing((uint64_t)(uintptr_t)dev, n);
	if (!host)
		return -E_INVALID_VALUE; /* not device memory */
	/* POSIX I/O without O_DIRECT's alignment rules, as cuFile's own
	 * bounce buffers would allow. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	pfd = open(path, write ? O_WRONLY : O_RDONLY);
	if (pfd < 0)
		return -1;
	r = write ? pwrite(pfd, host, n, foff) : pread(pfd, host, n, foff);
	close(pfd);
	return r;
}

ssize_t cuFileRead(void *fh, void *base, size_t n, off_t foff, off_t boff)
{
	return io(fh, (char *)base + boff, n, foff, false);
}

ssize_t cuFileWrite(void *fh, const void *base, size_t n, off_t foff,
		    off_t boff)
{
	char *p;

	memcpy(&p, &base, sizeof(p)); /* the const goes: io() reads it */
	return io(fh, p + boff, n, foff, true);
}

int fake_cufile_live_handles(void)
{
	int n = 0;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < 256; i++)
		n += fds[i] != 0;
	pthread_mutex_unlock(&lock);
	return n;
}

int fake_cufile_max_live_handles(void)
{
	int n;

	pthread_mutex_lock(&lock);
	n = max_live;
	pthread_mutex_unlock(&lock);
	return n;
}
