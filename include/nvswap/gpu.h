/* SPDX-License-Identifier: MIT */
/*
 * GPU memory: the CUDA driver and cuFile, found at run time. nvswap is
 * built without CUDA; it loads the driver library (libcuda.so.1) and
 * cuFile (libcufile.so.0) with dlopen at first use and resolves only the
 * entry points it needs. Without them every call here fails with -ENODEV
 * and nvs_last_error() names the library or device that was not found.
 *
 * Device memory reaches the aio handle's ordinary calls: nvs_aio_pread()
 * into, or nvs_aio_pwrite() from, device memory is recognised (the
 * driver's pointer attributes) and staged through the handle's pinned
 * bounce slots, block by block, with the disk I/O of one block overlapping
 * the device copy of the one before (the copies run on a CUDA stream per
 * worker). A handle made with nvs_aio_opts.use_gds moves device memory
 * with cuFile instead (GPUDirect Storage; its POSIX compatibility mode
 * where the nvidia-fs driver is absent). Host memory is never affected.
 * The copies run on streams of nvswap's own, which the driver orders
 * after work on the legacy default stream (PyTorch's default stream,
 * cuMemset...) but not after work on other streams: synchronise a stream
 * of your own that writes a buffer before writing it to a file, and those
 * that use one before reading into it (the Python binding synchronises
 * the tensor's current stream).
 *
 * Pointers are recognised without loading anything: while the process has
 * not loaded the CUDA driver, no device memory can exist in it, and every
 * pointer is host memory. The driver library is looked for as
 * NVSWAP_LIBCUDA (a path) when set, else libcuda.so.1; cuFile as
 * NVSWAP_CUFILE, else libcufile.so.0. NVSWAP_GPU=off turns the GPU support
 * off (every pointer is host memory, every call here -ENODEV).
 *
 * Threading: every call is safe from any thread. Calls that need a CUDA
 * context make the device's primary context current on the calling thread
 * (as the CUDA runtime does); they never create another one.
 */
#ifndef NVSWAP_GPU_H
#define NVSWAP_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * nvs_gpu_open() - load the CUDA driver and initialise it (once).
 *
 * Return: the number of devices (at least 1); -ENODEV when the driver
 * library is missing, NVSWAP_GPU=off, the driver fails to initialise or
 * finds no device (nvs_last_error() says which); -EINVAL when
 * NVSWAP_GPU holds no on/off value (README: "On/off variables"; then
 * every call that needs the driver, nvs_gpu_pointer() and every aio op
 * included, is -EINVAL naming it).
 */
NVS_API int nvs_gpu_open(void);

/**
 * nvs_gpu_pointer() - whether @p is device memory.
 * @p:      any address.
 * @device: NULL, or receives the device ordinal of device memory.
 *
 * Host memory, pinned or not, and CUDA managed memory (which the host can
 * read and write) are host memory. Never loads the driver (see above).
 *
 * Return: 1 device memory, 0 host memory, -EIO when the driver's pointer
 * query failed with an unexpected error, -EINVAL when NVSWAP_GPU holds
 * no on/off value.
 */
NVS_API int nvs_gpu_pointer(const void *p, int *device);

/**
 * nvs_gpu_malloc() - @nbytes of device memory on @device (cuMemAlloc in
 * the device's primary context), for callers without a CUDA runtime of
 * their own (tools, tests, C users).
 * @out: receives the pointer; NULL on failure.
 *
 * Return: 0; -ENODEV (no driver or no such device), -EINVAL (@nbytes 0 or
 * @out NULL), -ENOMEM (the device is out of memory), -EIO (another error).
 */
NVS_API int nvs_gpu_malloc(int device, size_t nbytes, void **out);

/**
 * nvs_gpu_free() - free memory from nvs_gpu_malloc(). NULL is a no-op.
 *
 * Return: 0; -EINVAL when @p is not device memory; -EIO.
 */
NVS_API int nvs_gpu_free(void *p);

/**
 * nvs_gpu_memcpy() - copy @nbytes between any two of host and device
 * memory (cuMemcpy, synchronous). For checks and tools, not for I/O.
 *
 * Return: 0; -ENODEV; -EIO with the driver's error in nvs_last_error().
 */
NVS_API int nvs_gpu_memcpy(void *dst, const void *src, size_t nbytes);

/**
 * nvs_gpu_memset() - set @nbytes of device memory at @dst to @byte and
 * wait until the device is written.
 *
 * Return: 0; -ENODEV; -EINVAL when @dst is not device memory; -EIO.
 */
NVS_API int nvs_gpu_memset(void *dst, int byte, size_t nbytes);

/**
 * struct nvs_gpu_info - the GPU environment, for nvs_gpu_info() and
 * nvswap-report. Strings are empty when unknown.
 */
struct nvs_gpu_info {
	int device_count;	/* 0 when none or no driver */
	int driver_version;	/* cuDriverGetVersion(), e.g. 13000; 0 */
	char driver_lib[160];	/* the driver library loaded, or "" */
	char device0[128];	/* name of device 0 */
	uint64_t device0_bytes; /* its memory */
	int device0_pcie_gen;	/* current PCIe link: generation, width */
	int device0_pcie_width; /* (0 unknown) */
	bool cufile;		/* cuFile loaded and its driver opened */
	bool nvfs;		/* the nvidia-fs kernel module is loaded:
				   true GPUDirect Storage is possible */
	char cufile_lib[160];	/* the cuFile library loaded, or "" */
	char cufile_mode[64];	/* "GDS (nvidia-fs)", "compatibility
				   (POSIX, no nvidia-fs)", or "" */
	char status[256];	/* one sentence: what works, or why not */
	char cufile_status[256];
	uint64_t reserved[8];
};

/**
 * nvs_gpu_info() - fill @info. Loads the driver and cuFile to answer
 * (never fails for their absence: that is what @info reports).
 *
 * Return: 0; -EINVAL for NULL.
 */
NVS_API int nvs_gpu_info(struct nvs_gpu_info *info);

/* ------------------------------------------------------------ cuFile */

/**
 * nvs_gds_open() - load cuFile and open its driver (once; cuFileDriverOpen).
 *
 * Return: 0; -ENODEV when there is no CUDA driver, no device, no cuFile
 * library, or cuFileDriverOpen() fails (nvs_last_error() gives cuFile's
 * error: with no nvidia-fs driver and compatibility mode disabled in
 * cufile.json, for instance).
 */
NVS_API int nvs_gds_open(void);

/**
 * nvs_gds_register() - register device memory with cuFile
 * (cuFileBufRegister): later cuFile I/O on any part of it skips cuFile's
 * own bounce buffers. DeepNVMe's gds_handle.pin_device_tensor.
 * @p:      device memory, borrowed until nvs_gds_deregister(@p).
 * @nbytes: its length.
 *
 * Return: 0; -ENODEV (as nvs_gds_open()); -EINVAL (@p is not device
 * memory, @nbytes is 0, or @p overlaps a registered range); -EIO (cuFile
 * refused; nvs_last_error() has its error).
 */
NVS_API int nvs_gds_register(void *p, size_t nbytes);

/**
 * nvs_gds_deregister() - undo nvs_gds_register(@p); @p is the address
 * registered. No I/O on it may be in flight.
 *
 * Return: 0; -ENOENT when @p was not registered; -EIO.
 */
NVS_API int nvs_gds_deregister(void *p);

/**
 * nvs_gds_registered() - whether [@p, @p + @nbytes) lies inside one
 * registered range.
 */
NVS_API bool nvs_gds_registered(const void *p, size_t nbytes);

#ifdef __cplusplus
}
#endif

#endif
