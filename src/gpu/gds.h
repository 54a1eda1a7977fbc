/* SPDX-License-Identifier: MIT */
/*
 * cuFile (GPUDirect Storage), dlopen()ed at first use: the driver, the
 * registered device buffers (nvs_gds_register) and the per-op calls the
 * aio workers make for a use_gds handle.
 * Threading: every call is safe from any thread.
 */
#ifndef NVS_GPU_GDS_H
#define NVS_GPU_GDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/stage.h"

/* Open cuFile's driver (once): 0 or -ENODEV with the error set (@who). */
int nvs__gds_load(const char *who);

/*
 * A cuFile handle for descriptor @fd: 0 or -errno with the error set.
 * Ops in flight on one descriptor share one handle (counted); the last
 * nvs__gds_handle_close() deregisters it.
 */
int nvs__gds_handle_open(int fd, void **fh, const char *who);
void nvs__gds_handle_close(void *fh);

/*
 * Move @n bytes between device memory @dev (in @m) and file offset @off
 * through cuFile, synchronously, finishing short transfers. 0, or -errno
 * with a sentence in @err.
 */
int nvs__gds_io(void *fh, const struct nvs_gpu_mem *m, void *dev, size_t n,
		int64_t off, bool write, char *err, size_t errlen);

/* For nvs_gpu_info(): cuFile's state, loading it to find out. */
void nvs__gds_describe(bool *open, bool *nvfs, char *lib, size_t liblen,
		       char *mode, size_t modelen, char *status,
		       size_t statuslen);

#endif
