// SPDX-License-Identifier: MIT
/*
 * The fault backend, for tests: any real backend underneath (io_uring,
 * libaio or psync), with the attempts named by a fault plan failing (-EIO,
 * -ENOSPC, -EAGAIN, -EINTR) without reaching it, or moving fewer bytes
 * than asked through it. It lets tests prove, on every backend, that each
 * failure reaches the caller and that short transfers are finished.
 */
#include "aio/ops.h"
#include "internal/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

struct fault {
	struct nvs_fault_plan plan;
	unsigned long attempts; /* attempts seen, for the rules' nth */
	const struct nvs_engine_ops *base;
	void *be;
	/* Failed here, reaped first. The engine never has more than depth
	 * requests out, so it has room for every one of them. */
	struct nvs_reqq failed;
};

int nvs__fault_init(const struct nvs_engine_ops *base,
		    const struct nvs_engine_cfg *cfg, void **out)
{
	struct fault *f;
	int ret;

	f = nvs__calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->plan = *cfg->plan;
	f->base = base;
	if (nvs__reqq_init(&f->failed, cfg->depth) < 0) {
		nvs__free(f);
		return -ENOMEM;
	}
	ret = base->init(cfg, &f->be);
	if (ret < 0) {
		nvs__reqq_fini(&f->failed);
		nvs__free(f);
		return ret;
	}
	*out = f;
	return 0;
}

void *nvs__fault_base_be(void *be)
{
	return ((struct fault *)be)->be;
}

static void fault_fini(void *be)
{
	struct fault *f = be;

	f->base->fini(f->be);
	nvs__reqq_fini(&f->failed);
	nvs__free(f);
}

static const struct nvs_fault_rule *
match(const struct fault *f, const struct nvs_ioreq *r, unsigned long attempt)
{
	for (unsigned i = 0; i < f->plan.nrules; i++) {
		const struct nvs_fault_rule *ru = &f->plan.rules[i];
		if (ru->kind == NVS_FAULT_REFUSE) /* the handle's, at submit */
			continue;
		if (ru->opcode >= 0 && ru->opcode != r->opcode)
			continue;
		if (attempt < ru->nth)
			continue;
		if (ru->count && attempt >= ru->nth + ru->count)
			continue;
		return ru;
	}
	return NULL;
}

static void park(struct fault *f, struct nvs_ioreq *r, int err)
{
	r->res = err;
	nvs__reqq_push(&f->failed, r);
}

/* A short attempt moves at most short_bytes (default half of what is
 * left, whole blocks under O_DIRECT); below that it completes in full. */
static size_t short_cap(const struct nvs_fault_rule *ru,
			const struct nvs_ioreq *r)
{
	size_t left = r->len - r->done;
	size_t cap = ru->short_bytes ? ru->short_bytes : left / 2;

	if (fcntl(r->fd, F_GETFL) & O_DIRECT)
		cap -= cap % 4096;
	return cap == 0 || cap >= left ? 0 : cap;
}

static int fault_submit(void *be, struct nvs_ioreq **reqs, unsigned n)
{
	struct fault *f = be;
	unsigned i;

	/* One at a time, so that a rule's nth counts exactly. */
	for (i = 0; i < n; i++) {
		struct nvs_ioreq *r = reqs[i];
		const struct nvs_fault_rule *ru = match(f, r, f->attempts + 1);
		int acc;

		switch (ru ? ru->kind : 0) {
		case NVS_FAULT_EIO:
			park(f, r, -EIO); /* nothing is transferred */
			break;
		case NVS_FAULT_ENOSPC:
			park(f, r, -ENOSPC);
			break;
		case NVS_FAULT_EAGAIN:
			park(f, r, -EAGAIN);
			break;
		case NVS_FAULT_EINTR:
			park(f, r, -EINTR);
			break;
		case NVS_FAULT_SHORT:
			r->cap = short_cap(ru, r);
			__attribute__((fallthrough));
		default:
			acc = f->base->submit(f->be, &r, 1);
			if (acc == 0)
				return (int)i; /* backend full */
			if (acc < 0)
				park(f, r, acc);
			break;
		}
		f->attempts++;
	}
	return (int)i;
}

static int fault_reap(void *be, unsigned min, struct nvs_ioreq **out,
		      unsigned max)
{
	struct fault *f = be;
	unsigned n = nvs__reqq_drain(&f->failed, out, 0, max);
	int ret;

	if (n == max || (n > 0 && n >= min))
		return (int)n;
	ret = f->base->reap(f->be, min > n ? min - n : 0, out + n, max - n);
	if (ret < 0)
		return n > 0 ? (int)n : ret;
	for (int i = 0; i < ret; i++)
		out[n + (unsigned)i]->cap = 0;
	return (int)n + ret;
}

const struct nvs_engine_ops nvs__fault_ops = {
	.submit = fault_submit,
	.reap = fault_reap,
	.fini = fault_fini,
	.name = "fault",
};
