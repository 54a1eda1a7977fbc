// SPDX-License-Identifier: MIT
/*
 * The fault sweep: one complete swapper workload (register with data,
 * prefetch, acquire/modify/release, automatic and explicit eviction, over
 * two striped paths with checksums on) run once per I/O request index
 * k = 1..N for each injected fault: -EIO, -ENOSPC, a short transfer,
 * -EAGAIN and -EINTR at request k. Every run checks that
 *   - a hard fault (EIO, ENOSPC) fails exactly one call, with that -errno,
 *     and a soft one (short, EAGAIN, EINTR) fails none;
 *   - no tensor's bytes in memory are lost or changed by the failure;
 *   - the failed call, retried once the fault has passed, succeeds;
 *   - every tensor's final bytes equal a reference model.
 * docs/reliability.md reports N and the number of runs.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aio/engine.h"
#include "nvswap/aio.h"
#include "nvswap/swapper.h"
#include "swapper/swapper.h"
#include "testutil.h"

enum { BUFSZ = 256 << 10, BLOCK = 64 << 10, NT = 4 };

/* Tensor sizes: multi-extent (striped in 64 KiB units over the two
 * paths), one block, and an odd size. */
static const size_t size_of[NT] = {BUFSZ, 3 * BLOCK + 4096, BLOCK,
				   100 * 1024 + 4096};

static void fini(void)
{
	tu_cleanup();
}

TestSuite(fault_sweep, .fini = fini);

/* The reference model: what each tensor must read as. */
struct model {
	unsigned char *ref[NT];
	bool registered[NT];
};

/* One run's bookkeeping. */
struct run {
	struct nvs_swapper *s;
	struct model m;
	int want;	   /* the -errno a hard fault must return, else 0 */
	unsigned failures; /* calls that failed (each then retried) */
	char where[256];   /* what failed, for the messages */
};

static struct nvs_swapper *make(const struct nvs_fault_plan *plan)
{
	static char p0[4096], p1[4096];
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	snprintf(p0, sizeof(p0), "%s/a", tu_dir());
	snprintf(p1, sizeof(p1), "%s/b", tu_dir());
	mkdir(p0, 0755);
	mkdir(p1, 0755);
	nvs_swapper_opts_init(&o);
	o.npaths = 2;
	o.nvme_paths[0] = p0;
	o.nvme_paths[1] = p1;
	o.buffer_size = BUFSZ;
	o.buffer_count = 2;
	o.stripe_size = BLOCK;
	o.checksum = true;
	o.auto_evict = true;
	o.aio.block_size = BLOCK;
	o.aio.queue_depth = 4;
	o.aio.intra_op_parallelism = 1; /* one engine: one request count */
	cr_assert_eq(nvs__swapper_create_fault(&o, plan, &s), 0, "%s",
		     nvs_last_error());
	return s;
}

/* Every resident, unacquired tensor still holds its model's bytes: a
 * failure changed nothing in memory. Checked through the swapper's own
 * buffers (an acquire of a resident tensor does no I/O). */
static void resident_intact(struct run *r)
{
	for (int id = 0; id < NT; id++) {
		struct nvs_tensor_info i;
		void *p;

		if (!r->m.registered[id])
			continue;
		cr_assert_eq(nvs_swapper_info(r->s, (uint64_t)id, &i), 0);
		if (i.state != NVS_TENSOR_RESIDENT)
			continue;
		cr_assert_eq(nvs_swapper_acquire(r->s, (uint64_t)id, &p), 0,
			     "%s: %s", r->where, nvs_last_error());
		cr_assert(!memcmp(p, r->m.ref[id], size_of[id]),
			  "%s: resident tensor %d changed", r->where, id);
		cr_assert_eq(nvs_swapper_release(r->s, (uint64_t)id, false), 0);
	}
}

/* A step's result: 0 goes on; a failure must be the injected -errno,
 * the first of the run, with nothing in memory changed. */
static bool failed(struct run *r, int ret, const char *what)
{
	if (ret == 0)
		return false;
	snprintf(r->where, sizeof(r->where), "%s: %d (%s)", what, ret,
		 nvs_last_error());
	cr_assert_neq(r->want, 0, "a soft fault failed a call: %s", r->where);
	cr_assert_eq(ret, r->want, "%s", r->where);
	cr_assert_eq(r->failures, 0, "a second failure: %s", r->where);
	r->failures++;
	resident_intact(r);
	return true;
}

static void reg(struct run *r, int id, bool with_data, uint64_t seed)
{
	unsigned char *init = NULL;

	if (with_data)
		tu_fill(r->m.ref[id], size_of[id], seed);
	else
		memset(r->m.ref[id], 0, size_of[id]);
	init = with_data ? r->m.ref[id] : NULL;
	while (failed(
		r, nvs_swapper_register(r->s, (uint64_t)id, size_of[id], init),
		"register"))
		;
	r->m.registered[id] = true;
}

/* Acquire, check the bytes, overwrite them with pattern @seed, release
 * dirty. A failed acquire changes nothing; it is retried. */
static void modify(struct run *r, int id, uint64_t seed)
{
	void *p = NULL;

	while (failed(r, nvs_swapper_acquire(r->s, (uint64_t)id, &p),
		      "acquire"))
		;
	cr_assert(!memcmp(p, r->m.ref[id], size_of[id]),
		  "tensor %d read back wrong", id);
	tu_fill(r->m.ref[id], size_of[id], seed);
	memcpy(p, r->m.ref[id], size_of[id]);
	cr_assert_eq(nvs_swapper_release(r->s, (uint64_t)id, true), 0);
}

static void check(struct run *r, int id)
{
	void *p = NULL;

	while (failed(r, nvs_swapper_acquire(r->s, (uint64_t)id, &p),
		      "acquire to check"))
		;
	cr_assert(!memcmp(p, r->m.ref[id], size_of[id]),
		  "tensor %d differs from the reference", id);
	cr_assert_eq(nvs_swapper_release(r->s, (uint64_t)id, false), 0);
}

/* Evict and wait: a failed write-back leaves the tensor resident and
 * dirty, and evicting again retries it. */
static void write_back(struct run *r, int id)
{
	for (;;) {
		int ret = nvs_swapper_evict(r->s, (uint64_t)id);

		if (ret == 0)
			ret = nvs_swapper_wait(r->s, (uint64_t)id);
		if (!failed(r, ret, "evict"))
			return;
	}
}

/* The workload; returns the requests it issued. */
static uint64_t workload(const struct nvs_fault_plan *plan, int want,
			 unsigned *failures)
{
	struct run r = {.want = want};
	struct nvs_aio_stats st;

	for (int i = 0; i < NT; i++)
		cr_assert_not_null(r.m.ref[i] = malloc(size_of[i]));
	r.s = make(plan);
	reg(&r, 0, true, 1);
	reg(&r, 1, true, 2);
	reg(&r, 2, false, 0);
	reg(&r, 3, true, 4);
	while (failed(&r, nvs_swapper_prefetch(r.s, 0), "prefetch"))
		;
	modify(&r, 0, 10);
	modify(&r, 1, 11);
	modify(&r, 2, 12); /* the pool is full: tensor 0 is written back */
	write_back(&r, 1);
	check(&r, 3); /* tensor 2 (dirty) makes room */
	modify(&r, 3, 13);
	modify(&r, 0, 14); /* read back what was written for it */
	write_back(&r, 0);
	write_back(&r, 3);
	while (failed(&r, nvs_swapper_wait_all(r.s), "wait_all"))
		;
	for (int i = 0; i < NT; i++)
		check(&r, i);
	cr_assert_eq(nvs_aio_get_stats(nvs__swapper_aio(r.s), &st), 0);
	cr_assert_eq(nvs_swapper_destroy(r.s), 0, "%s", nvs_last_error());
	for (int i = 0; i < NT; i++)
		free(r.m.ref[i]);
	*failures = r.failures;
	return st.requests;
}

static const struct {
	enum nvs_fault_kind kind;
	int err; /* what the failing call returns; 0 = none fails */
	const char *name;
} faults[] = {
	{NVS_FAULT_EIO, -EIO, "EIO"},
	{NVS_FAULT_ENOSPC, -ENOSPC, "ENOSPC"},
	{NVS_FAULT_SHORT, 0, "short transfer"},
	{NVS_FAULT_EAGAIN, 0, "EAGAIN"},
	{NVS_FAULT_EINTR, 0, "EINTR"},
};

Test(fault_sweep, every_request_failing_in_turn_loses_nothing_and_recovers)
{
	struct nvs_fault_plan none = {.nrules = 0};
	unsigned failures, runs = 0;
	uint64_t n;

	alarm(500); /* a hang fails the test (no .timeout: its runner
		    * leaks under LeakSanitizer when it fires) */
	n = workload(&none, 0, &failures);
	cr_assert_gt(n, 20, "the workload issues %llu requests",
		     (unsigned long long)n);
	cr_assert_eq(failures, 0);
	for (size_t f = 0; f < sizeof(faults) / sizeof(*faults); f++) {
		for (uint64_t k = 1; k <= n; k++) {
			struct nvs_fault_plan plan = {.nrules = 1};

			plan.rules[0] = (struct nvs_fault_rule){
				.kind = faults[f].kind,
				.nth = (unsigned long)k,
				.count = 1,
				.opcode = -1,
			};
			workload(&plan, faults[f].err, &failures);
			/* A hard fault at a request the run issues is seen,
			 * exactly once. */
			cr_assert_eq(failures, faults[f].err ? 1u : 0u,
				     "%s at request %llu: %u failed calls",
				     faults[f].name, (unsigned long long)k,
				     failures);
			runs++;
		}
	}
	cr_log_info("fault sweep: N = %llu requests, %u runs (%zu faults)",
		    (unsigned long long)n, runs,
		    sizeof(faults) / sizeof(*faults));
}
