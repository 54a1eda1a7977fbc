// SPDX-License-Identifier: MIT
/*
 * The fault backend, for tests: psync underneath, with the attempts named
 * by a fault plan failing (-EIO, -ENOSPC, -EAGAIN, -EINTR) or moving fewer
 * bytes than asked. It lets tests prove that every failure reaches the
 * caller and that short transfers are finished.
 */
#include "aio/ops.h"
#include "internal/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

struct fault {
	struct nvs_fault_plan plan;
	unsigned long attempts; /* attempts seen, for the rules' nth */
	void *psync;
};

static int fault_init(unsigned depth, const struct nvs_fault_plan *plan,
		      void **be)
{
	struct fault *f;
	int ret;

	f = nvs__calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	if (plan)
		f->plan = *plan;
	ret = nvs__psync_ops.init(depth, NULL, &f->psync);
	if (ret < 0) {
		nvs__free(f);
		return ret;
	}
	*be = f;
	return 0;
}

static void fault_fini(void *be)
{
	struct fault *f = be;

	nvs__psync_ops.fini(f->psync);
	nvs__free(f);
}

static const struct nvs_fault_rule *
match(const struct fault *f, const struct nvs_ioreq *r, unsigned long attempt)
{
	for (unsigned i = 0; i < f->plan.nrules; i++) {
		const struct nvs_fault_rule *ru = &f->plan.rules[i];
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

static int fault_submit(void *be, struct nvs_ioreq **reqs, unsigned n)
{
	struct fault *f = be;
	unsigned i;

	for (i = 0; i < n; i++) {
		struct nvs_ioreq *r = reqs[i];
		const struct nvs_fault_rule *ru = match(f, r, f->attempts + 1);
		size_t left = r->len - r->done;
		size_t cap = (size_t)-1;

		switch (ru ? ru->kind : 0) {
		case NVS_FAULT_EIO:
			r->res = -EIO; /* nothing is transferred */
			break;
		case NVS_FAULT_ENOSPC:
			r->res = -ENOSPC;
			break;
		case NVS_FAULT_EAGAIN:
			r->res = -EAGAIN;
			break;
		case NVS_FAULT_EINTR:
			r->res = -EINTR;
			break;
		case NVS_FAULT_SHORT:
			/* At most short_bytes (default half); what is left
			 * below that completes in full. */
			cap = ru->short_bytes ? ru->short_bytes : left / 2;
			/* O_DIRECT transfers stop at block boundaries. */
			if (fcntl(r->fd, F_GETFL) & O_DIRECT)
				cap -= cap % 4096;
			if (cap == 0)
				cap = left;
			/* fall through */
		default:
			nvs__psync_attempt(r, cap);
			break;
		}
		if (!nvs__psync_park(f->psync, r))
			break;
		f->attempts++;
	}
	return (int)i;
}

static int fault_reap(void *be, unsigned min, struct nvs_ioreq **out,
		      unsigned max)
{
	struct fault *f = be;

	return nvs__psync_ops.reap(f->psync, min, out, max);
}

const struct nvs_engine_ops nvs__fault_ops = {
	.submit = fault_submit,
	.reap = fault_reap,
	.init = fault_init,
	.fini = fault_fini,
	.name = "fault(psync)",
};
