// SPDX-License-Identifier: MIT
/*
 * The aio workers' device copies (stage.h): one stream per context a
 * worker meets, and the bounce memory registered with the driver.
 */
#include "gpu/stage.h"
#include "gpu/driver.h"
#include "internal/alloc.h"
#include "internal/errors.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#define MAX_STREAMS 8

struct nvs_gpu_lane {
	struct {
		void *ctx;
		int device;
		void *stream;
	} s[MAX_STREAMS];
	unsigned ns;
	bool host_tried; /* the bounce memory's registration was tried */
	void *host_ours; /* registered by this lane (to unregister), or NULL */
};

static int fail(char *err, size_t errlen, int rc, const char *call)
{
	nvs__cu_describe(err, errlen, rc, call);
	return rc == NVS_CU_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* The stream for @m's context, made current on this thread. */
static int lane_stream(struct nvs_gpu_lane *l, const struct nvs_gpu_mem *m,
		       void **stream, char *err, size_t errlen)
{
	unsigned i;
	int ret, rc;

	for (i = 0; i < l->ns; i++)
		if (l->s[i].ctx == m->ctx && l->s[i].device == m->device)
			break;
	ret = nvs__gpu_enter(m->ctx, m->device, "staged copy", NULL);
	if (ret < 0) {
		snprintf(err, errlen, "%s", nvs_last_error());
		return ret;
	}
	if (i == l->ns) {
		if (l->ns == MAX_STREAMS) {
			snprintf(err, errlen,
				 "staged copy: one worker met more than %d "
				 "CUDA contexts",
				 MAX_STREAMS);
			return -EINVAL;
		}
		/* A blocking stream: ordered after work the application put
		 * on the legacy default stream (PyTorch's default, cuMemset,
		 * cuMemcpy of device memory), which a non-blocking one would
		 * overtake: on the H200 a device buffer memset just before a
		 * staged read was overwritten by the memset landing after
		 * the read's copies. */
		rc = nvs__cu.StreamCreate(&l->s[i].stream, 0);
		if (rc != 0)
			return fail(err, errlen, rc, "cuStreamCreate");
		l->s[i].ctx = m->ctx;
		l->s[i].device = m->device;
		l->ns++;
	}
	*stream = l->s[i].stream;
	return 0;
}

int nvs__gpu_lane_copy(struct nvs_gpu_lane **lp, const struct nvs_gpu_mem *m,
		       void *dst, const void *src, size_t n, void *host,
		       size_t host_len, char *err, size_t errlen)
{
	struct nvs_gpu_lane *l = *lp;
	void *stream = NULL;
	int ret, rc;

	if (!l) {
		l = nvs__calloc(1, sizeof(*l));
		if (!l) {
			snprintf(err, errlen, "staged copy: out of memory");
			return -ENOMEM;
		}
		*lp = l;
	}
	ret = lane_stream(l, m, &stream, err, errlen);
	if (ret < 0)
		return ret;
	if (host && !l->host_tried) {
		/* Page-locked for the driver, so the copy is one DMA. The
		 * pinned arena may have registered it through the runtime
		 * already; failing to register only costs speed. */
		rc = nvs__cu.MemHostRegister(host, host_len,
					     NVS_CU_MEMHOSTREGISTER_PORTABLE);
		l->host_tried = true;
		l->host_ours = rc == 0 ? host : NULL;
	}
	rc = nvs__cu.MemcpyAsync((nvs_cuptr)(uintptr_t)dst,
				 (nvs_cuptr)(uintptr_t)src, n, stream);
	if (rc != 0)
		return fail(err, errlen, rc, "cuMemcpyAsync");
	rc = nvs__cu.StreamSynchronize(stream);
	if (rc != 0)
		return fail(err, errlen, rc, "cuStreamSynchronize");
	return 0;
}

void nvs__gpu_lane_destroy(struct nvs_gpu_lane *l)
{
	void *saved = NULL;

	if (!l)
		return;
	/* On the destroying caller's thread: its context is put back. */
	if (l->ns && nvs__cu.CtxGetCurrent(&saved) != 0)
		saved = NULL;
	for (unsigned i = 0; i < l->ns; i++) {
		if (nvs__gpu_enter(l->s[i].ctx, l->s[i].device, "lane", NULL) ==
		    0)
			nvs__cu.StreamDestroy(l->s[i].stream);
	}
	if (l->host_ours)
		nvs__cu.MemHostUnregister(l->host_ours);
	if (l->ns)
		nvs__gpu_leave(saved);
	nvs__free(l);
}
