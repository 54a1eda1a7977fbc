/* SPDX-License-Identifier: MIT */
/*
 * Device copies for staged I/O: a lane belongs to one aio worker and
 * copies between its pinned bounce memory and device memory on a CUDA
 * stream of its own per context, so workers never wait on each other's
 * copies or on the application's streams.
 * Threading: a lane is used by one thread at a time (its worker).
 */
#ifndef NVS_GPU_STAGE_H
#define NVS_GPU_STAGE_H

#include <stdbool.h>
#include <stddef.h>

struct nvs_gpu_lane;

/* Where a device op's memory lives: from nvs__gpu_ptr() at submit. */
struct nvs_gpu_mem {
	int device; /* -1: host memory (no staging) */
	void *ctx;  /* its context, or NULL for the primary one */
};

/*
 * Copy @n bytes between the lane's host memory and device memory, either
 * way (unified addressing: the pointers say which), and wait for it. The lane is
 * made at first use in *@lp; @host/@host_len is the bounce memory it
 * copies through, registered with the driver (page-locked for DMA) at
 * first use if nothing registered it before. 0, or a -errno with a
 * sentence in @err (the driver's error: the op's message).
 */
int nvs__gpu_lane_copy(struct nvs_gpu_lane **lp, const struct nvs_gpu_mem *m,
		       void *dst, const void *src, size_t n, void *host,
		       size_t host_len, char *err, size_t errlen);

/* Free the lane's streams and its registration; NULL is a no-op. */
void nvs__gpu_lane_destroy(struct nvs_gpu_lane *l);

#endif
