// SPDX-License-Identifier: MIT
/*
 * The psync backend: each attempt is a pread/pwrite on the submitting
 * thread, its result parked in a ring until reaped. Always available; the
 * last link of the fallback chain.
 */
#include "aio/ops.h"
#include "internal/alloc.h"

#include <errno.h>
#include <unistd.h>

struct psync {
	struct nvs_reqq done; /* finished attempts */
};

static void attempt(struct nvs_ioreq *r)
{
	size_t len = nvs__ioreq_span(r);
	ssize_t n;

	if (r->opcode == NVS_IOREQ_WRITE)
		n = pwrite(r->fd, r->buf + r->done, len,
			   (off_t)(r->off + (int64_t)r->done));
	else
		n = pread(r->fd, r->buf + r->done, len,
			  (off_t)(r->off + (int64_t)r->done));
	r->res = n < 0 ? -errno : n;
}

static int psync_init(const struct nvs_engine_cfg *cfg, void **be)
{
	struct psync *p;

	p = nvs__calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (nvs__reqq_init(&p->done, cfg->depth) < 0) {
		nvs__free(p);
		return -ENOMEM;
	}
	*be = p;
	return 0;
}

static void psync_fini(void *be)
{
	struct psync *p = be;

	nvs__reqq_fini(&p->done);
	nvs__free(p);
}

static int psync_submit(void *be, struct nvs_ioreq **reqs, unsigned n)
{
	struct psync *p = be;
	unsigned i;

	for (i = 0; i < n && p->done.n < p->done.cap; i++) {
		attempt(reqs[i]);
		nvs__reqq_push(&p->done, reqs[i]);
	}
	return (int)i;
}

static int psync_reap(void *be, unsigned min, struct nvs_ioreq **out,
		      unsigned max)
{
	struct psync *p = be;

	(void)min; /* everything submitted has already finished */
	return (int)nvs__reqq_drain(&p->done, out, 0, max);
}

const struct nvs_engine_ops nvs__psync_ops = {
	.submit = psync_submit,
	.reap = psync_reap,
	.init = psync_init,
	.fini = psync_fini,
	.name = "psync",
};
