// SPDX-License-Identifier: MIT
/*
 * The aio handle and pinned memory: bounce memory is pinned once per
 * worker at create and never per op; unpinned and misaligned buffers read
 * and write correctly; the staging modes decide which buffers bounce; and
 * DeepNVMe's new/free_cpu_locked_tensor and is_pinned share one registry
 * across handles.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "nvswap/aio.h"
#include "nvswap/buffers.h"
#include "testutil.h"

static struct nvs_aio *mk(enum nvs_staging staging, unsigned par)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.block_size = 64 << 10;
	o.queue_depth = 8;
	o.intra_op_parallelism = par;
	o.staging = staging;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	return h;
}

static struct nvs_pinned_stats pstats(void)
{
	struct nvs_pinned_stats st;

	nvs_pinned_stats(&st);
	return st;
}

static uint64_t bounced(const struct nvs_aio *h)
{
	struct nvs_aio_stats st;

	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	return st.bounced_requests;
}

/* Write @src then read into @dst (both @n bytes) at @off; check. */
static void roundtrip(struct nvs_aio *h, const char *name, unsigned char *src,
		      unsigned char *dst, size_t n, int64_t off)
{
	const char *p = tu_path(name);

	tu_fill(src, n, (uint64_t)n ^ (uint64_t)off);
	memset(dst, 0, n);
	cr_assert_eq(nvs_aio_sync_pwrite(h, src, n, p, off), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pread(h, dst, n, p, off), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(src, dst, n) == 0, "%s: %zu bytes at %lld", name, n,
		  (long long)off);
}

TestSuite(staging, .fini = tu_cleanup);

Test(staging, bounce_memory_is_pinned_once_at_create)
{
	struct nvs_pinned_stats a = pstats(), b;
	struct nvs_aio_stats st;
	struct nvs_aio *h = mk(NVS_STAGE_AUTO, 3);

	b = pstats();
	cr_assert_eq(b.allocs - a.allocs, 3, "one bounce area per worker");
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(b.bytes_in_use - a.bytes_in_use, st.bounce_bytes_total);
	if (b.memlock_limit == UINT64_MAX)
		cr_assert(st.bounce_locked);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	b = pstats();
	cr_assert_eq(b.bytes_in_use, a.bytes_in_use, "given back");
	cr_assert_eq(b.live_allocations, a.live_allocations);
}

Test(staging, unpinned_and_misaligned_buffers_need_no_pinned_memory_per_op)
{
	static const size_t sizes[] = {1, 4095, 65536, (1 << 20) + 333,
				       (3 << 20) + 1};
	static const int64_t offs[] = {0, 1, 4096, 70001};
	struct nvs_aio *h[2] = {mk(NVS_STAGE_AUTO, 2),
				mk(NVS_STAGE_UNPINNED, 2)};
	struct nvs_pinned_stats before = pstats(), after;

	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			for (size_t j = 0; j < sizeof(offs) / sizeof(offs[0]);
			     j++) {
				size_t n = sizes[i];
				unsigned char *s = tu_alloc(n, 1 + j),
					      *d = tu_alloc(n, 3 * j);
				roundtrip(h[k], "unpinned", s, d, n, offs[j]);
				cr_assert(tu_guards_ok(s, n));
				cr_assert(tu_guards_ok(d, n));
				tu_free(s);
				tu_free(d);
			}
	after = pstats();
	cr_assert_eq(after.allocs, before.allocs,
		     "no pinned allocation for any op");
	cr_assert_eq(after.bytes_locked, before.bytes_locked);
	cr_assert_gt(bounced(h[0]), 0, "misaligned buffers bounced");
	cr_assert_eq(nvs_aio_destroy(h[0]), 0);
	cr_assert_eq(nvs_aio_destroy(h[1]), 0);
}

Test(staging, aligned_unpinned_buffers_go_direct_unless_asked_to_stage)
{
	size_t n = 1 << 20;
	unsigned char *s = tu_alloc(n, 0), *d = tu_alloc(n, 0);
	unsigned char *ps = nvs_pinned_alloc(n, NULL),
		      *pd = nvs_pinned_alloc(n, NULL);
	struct nvs_aio *dflt = mk(NVS_STAGE_AUTO, 1),
		       *misal = mk(NVS_STAGE_MISALIGNED, 1),
		       *stage = mk(NVS_STAGE_UNPINNED, 1);

	roundtrip(dflt, "a", s, d, n, 0);
	cr_assert_eq(bounced(dflt), 0, "AUTO: aligned memory goes direct");
	roundtrip(misal, "a", s, d, n, 0);
	cr_assert_eq(bounced(misal), 0);
	roundtrip(stage, "a", s, d, n, 0);
	cr_assert_eq(bounced(stage), 2 * 16, "UNPINNED: every request");
	roundtrip(stage, "b", ps, pd, n, 0);
	cr_assert_eq(bounced(stage), 2 * 16, "pinned memory never bounces");
	roundtrip(stage, "c", ps + 4096, pd + 8192, n - 8192, 0);
	cr_assert_eq(bounced(stage), 2 * 16, "nor does a pinned view");
	cr_assert_eq(nvs_aio_destroy(dflt), 0);
	cr_assert_eq(nvs_aio_destroy(misal), 0);
	cr_assert_eq(nvs_aio_destroy(stage), 0);
	nvs_pinned_free(ps);
	nvs_pinned_free(pd);
	tu_free(s);
	tu_free(d);
}

Test(staging, unknown_staging_mode_is_einval)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = (struct nvs_aio *)&o;

	nvs_aio_opts_init(&o);
	o.staging = (enum nvs_staging)7;
	cr_assert_eq(nvs_aio_create(&o, &h), -EINVAL);
	cr_assert_null(h);
	cr_assert(strstr(nvs_last_error(), "staging"), "%s", nvs_last_error());
}

Test(staging, locked_buffers_are_shared_across_handles)
{
	struct nvs_aio *a = mk(NVS_STAGE_AUTO, 1), *b = mk(NVS_STAGE_AUTO, 1);
	size_t n = (2 << 20) + 100;
	unsigned char *buf = nvs_aio_new_cpu_locked_buffer(a, n);
	unsigned char *back = nvs_aio_new_cpu_locked_buffer(b, n);

	cr_assert_not_null(buf, "%s", nvs_last_error());
	cr_assert_not_null(back);
	cr_assert_eq((uintptr_t)buf % NVS_PINNED_ALIGN, 0);
	cr_assert(nvs_aio_is_pinned(a, buf, n));
	cr_assert(nvs_aio_is_pinned(b, buf + 100, 1000),
		  "a view, other handle");
	cr_assert_not(nvs_aio_is_pinned(b, buf, n + 1));
	cr_assert_not(nvs_aio_is_pinned(NULL, buf, n));
	cr_assert(nvs_pinned_contains(buf, n), "one registry");
	roundtrip(a, "locked", buf, back, n, 0);
	cr_assert_eq(bounced(a), 0, "locked buffers go straight to disk");
	cr_assert_eq(nvs_aio_free_cpu_locked_buffer(b, buf), 0,
		     "freed through the other handle");
	cr_assert_not(nvs_aio_is_pinned(a, buf, 1));
	cr_assert_eq(nvs_aio_free_cpu_locked_buffer(a, buf), -EINVAL,
		     "a second free");
	cr_assert(strstr(nvs_last_error(), "not a live pinned allocation"));
	cr_assert_eq(nvs_aio_free_cpu_locked_buffer(a, NULL), -EINVAL);
	cr_assert_eq(nvs_aio_free_cpu_locked_buffer(NULL, back), -EINVAL);
	nvs_pinned_free(back);
	errno = 0;
	cr_assert_null(nvs_aio_new_cpu_locked_buffer(NULL, 4096));
	cr_assert_eq(errno, EINVAL);
	errno = 0;
	cr_assert_null(nvs_aio_new_cpu_locked_buffer(a, 0));
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(nvs_aio_destroy(a), 0);
	cr_assert_eq(nvs_aio_destroy(b), 0);
}

/* queue/max_segments of the disk under the scratch directory, or 0. */
static unsigned scratch_max_segments(void)
{
	struct stat st;
	char path[128];
	unsigned v = 0;
	FILE *f;

	cr_assert_eq(stat(tu_dir(), &st), 0);
	for (int up = 0; up < 2 && !v; up++) {
		snprintf(path, sizeof(path),
			 "/sys/dev/block/%u:%u/%squeue/"
			 "max_segments",
			 major(st.st_dev), minor(st.st_dev), up ? "../" : "");
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%u", &v) != 1)
				v = 0;
			fclose(f);
		}
	}
	return v;
}

static struct nvs_aio *mk_bs(uint32_t bs)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.block_size = bs;
	o.queue_depth = 8;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	return h;
}

Test(staging, auto_stages_unpinned_memory_where_the_disk_would_split_it)
{
	unsigned segs = scratch_max_segments();
	size_t n = 4 << 20;
	unsigned char *s = tu_alloc(n, 0), *d = tu_alloc(n, 0);
	struct nvs_aio *fits, *splits;
	struct nvs_aio_stats st;

	if (segs == 0 || segs > 16384)
		cr_skip_test("the scratch directory's disk reports no useful "
			     "queue/max_segments (%u)",
			     segs);
	/* A request of 4 KiB pages fits the queue up to segs pages. */
	fits = mk_bs(segs * 4096u);
	splits = mk_bs((segs + 1) * 4096u);
	roundtrip(fits, "f", s, d, n, 0);
	nvs_aio_get_stats(fits, &st);
	cr_assert_eq(st.bounced_requests, 0, "fits in %u segments", segs);
	roundtrip(splits, "s", s, d, n, 0);
	nvs_aio_get_stats(splits, &st);
	cr_assert_gt(st.requests, 0);
	cr_assert_eq(st.bounced_requests, st.requests,
		     "every request of scattered pages is staged");
	cr_assert_eq(nvs_aio_destroy(fits), 0);
	cr_assert_eq(nvs_aio_destroy(splits), 0);
	tu_free(s);
	tu_free(d);
}

/*
 * A sliding window refills a staged read's slot while the rest of the
 * reap's completions still wait to be processed. With psync every request
 * of a batch completes at once, so each reap hands back a full queue; when
 * the staged op has cut its last request and a direct op behind it is
 * being issued (no slots needed, queue deeper than the 8 slots), request
 * structs run out below the queue depth. The refill must stop at the free
 * request structs, not at the queue depth (it used to run past them and
 * crash: found by make stress).
 */
Test(staging, staged_reads_refilled_mid_reap_never_outrun_the_requests)
{
	static const enum nvs_backend backends[] = {
		NVS_BACKEND_PSYNC, NVS_BACKEND_LIBAIO, NVS_BACKEND_AUTO};
	size_t n = 4 << 20;
	unsigned char *src = tu_alloc(2 * n, 0);
	unsigned char *direct = tu_alloc(n, 0), *staged = tu_alloc(n, 5);

	tu_fill(src, 2 * n, 11);
	tu_write_file(tu_path("m"), src, 2 * n);
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		struct nvs_aio_opts o;
		struct nvs_aio *h;

		nvs_aio_opts_init(&o);
		o.backend = backends[i];
		o.block_size = 64 << 10;
		o.queue_depth = 16; /* more than the 8 bounce slots */
		o.overlap_events = true;
		cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
		memset(direct, 0, n);
		memset(staged, 0, n);
		cr_assert_eq(nvs_aio_async_pread(h, staged, n, tu_path("m"),
						 (int64_t)n),
			     0);
		cr_assert_eq(nvs_aio_async_pread(h, direct, n, tu_path("m"), 0),
			     0);
		cr_assert_eq(nvs_aio_wait(h), 2, "%s", nvs_last_error());
		cr_assert(memcmp(direct, src, n) == 0);
		cr_assert(memcmp(staged, src + n, n) == 0);
		cr_assert_gt(bounced(h), 0);
		cr_assert_eq(nvs_aio_destroy(h), 0);
	}
	tu_free(src);
	tu_free(direct);
	tu_free(staged);
}
