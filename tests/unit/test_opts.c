// SPDX-License-Identifier: MIT
/*
 * Handle options, getters, backend choice, errors and version: creation
 * accepts exactly the documented ranges, reports the backend it chose,
 * and fails cleanly (-ENOMEM, *out NULL) when any allocation fails.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "internal/alloc.h"
#include "nvswap/nvswap.h"

Test(opts, defaults_match_deepnvme)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	memset(&o, 0x5a, sizeof(o));
	nvs_aio_opts_init(&o);
	cr_assert_eq(o.size, sizeof(o));
	cr_assert_eq(o.block_size, 1u << 20);
	cr_assert_eq(o.queue_depth, 128);
	cr_assert_eq(o.single_submit, false);
	cr_assert_eq(o.overlap_events, false);
	cr_assert_eq(o.intra_op_parallelism, 1);
	cr_assert_eq(o.backend, NVS_BACKEND_AUTO);
	cr_assert_eq(o.direct, NVS_DIRECT_AUTO);
	cr_assert_eq(o.reserved[4], 0);
	cr_assert_eq(o.use_gds, false);
	cr_assert_eq(o.uring_flags, 0);
	cr_assert_eq(o.open_files, 0, "0 means the default cache size");
	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_eq(nvs_aio_get_block_size(h), 1u << 20);
	cr_assert_eq(nvs_aio_get_queue_depth(h), 128);
	cr_assert_eq(nvs_aio_get_intra_op_parallelism(h), 1);
	cr_assert_eq(nvs_aio_get_alignment(h) % 4096, 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(opts, getters_return_what_was_set)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.block_size = 8192;
	o.queue_depth = 3;
	o.single_submit = true;
	o.overlap_events = true;
	o.intra_op_parallelism = 5;
	o.backend = NVS_BACKEND_PSYNC;
	cr_assert_eq(nvs_aio_create(&o, &h), 0);
	cr_assert_eq(nvs_aio_get_block_size(h), 8192);
	cr_assert_eq(nvs_aio_get_queue_depth(h), 3);
	cr_assert_eq(nvs_aio_get_single_submit(h), true);
	cr_assert_eq(nvs_aio_get_overlap_events(h), true);
	cr_assert_eq(nvs_aio_get_intra_op_parallelism(h), 5);
	cr_assert_str_eq(nvs_aio_backend_name(h), "psync");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

static int try_create(void (*tweak)(struct nvs_aio_opts *))
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = (struct nvs_aio *)&o; /* must come back NULL */
	int ret;

	nvs_aio_opts_init(&o);
	tweak(&o);
	ret = nvs_aio_create(&o, &h);
	if (ret == 0)
		nvs_aio_destroy(h);
	else
		cr_assert_null(h, "a failed create leaves *out NULL");
	return ret;
}

static void bs0(struct nvs_aio_opts *o)
{
	o->block_size = 0;
}
static void bs511(struct nvs_aio_opts *o)
{
	o->block_size = 511;
}
static void bs513(struct nvs_aio_opts *o)
{
	o->block_size = 513;
}
static void bs_huge(struct nvs_aio_opts *o)
{
	o->block_size = NVS_AIO_MAX_BLOCK_SIZE + 512;
}
static void bs512(struct nvs_aio_opts *o)
{
	o->block_size = 512;
}
static void qd0(struct nvs_aio_opts *o)
{
	o->queue_depth = 0;
}
static void qd_huge(struct nvs_aio_opts *o)
{
	o->queue_depth = NVS_AIO_MAX_QUEUE_DEPTH + 1;
}
static void par0(struct nvs_aio_opts *o)
{
	o->intra_op_parallelism = 0;
}
static void par_huge(struct nvs_aio_opts *o)
{
	o->intra_op_parallelism = NVS_AIO_MAX_PARALLELISM + 1;
}
static void bad_backend(struct nvs_aio_opts *o)
{
	o->backend = (enum nvs_backend)42;
}
static void bad_direct(struct nvs_aio_opts *o)
{
	o->direct = (enum nvs_direct)42;
}
static void bad_size(struct nvs_aio_opts *o)
{
	o->size = 3;
}
static void bad_uring_flags(struct nvs_aio_opts *o)
{
	o->uring_flags = 1u << 7;
}

Test(opts, out_of_range_options_are_einval)
{
	cr_assert_eq(try_create(bs0), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "block_size 0"), "%s",
		  nvs_last_error());
	cr_assert_eq(try_create(bs511), -EINVAL);
	cr_assert_eq(try_create(bs513), -EINVAL);
	cr_assert_eq(try_create(bs_huge), -EINVAL);
	cr_assert_eq(try_create(bs512), 0);
	cr_assert_eq(try_create(qd0), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "queue_depth"));
	cr_assert_eq(try_create(qd_huge), -EINVAL);
	cr_assert_eq(try_create(par0), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "intra_op_parallelism"));
	cr_assert_eq(try_create(par_huge), -EINVAL);
	cr_assert_eq(try_create(bad_backend), -EINVAL);
	cr_assert_eq(try_create(bad_direct), -EINVAL);
	cr_assert_eq(try_create(bad_size), -EINVAL);
	cr_assert_eq(nvs_aio_create(NULL, NULL), -EINVAL);
}

Test(opts, libaio_queue_depth_above_kernel_limit_is_einval)
{
	FILE *f = fopen("/proc/sys/fs/aio-max-nr", "r");
	unsigned long max = 0;
	struct nvs_aio_opts o;
	struct nvs_aio *h;

	cr_assert_not_null(f);
	cr_assert_eq(fscanf(f, "%lu", &max), 1);
	fclose(f);
	if (max >= NVS_AIO_MAX_QUEUE_DEPTH)
		cr_skip_test("fs.aio-max-nr is %lu, above the largest queue "
			     "depth %u: only the fixed limit applies here",
			     max, NVS_AIO_MAX_QUEUE_DEPTH);
	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_LIBAIO;
	o.queue_depth = (uint32_t)max + 1;
	cr_assert_eq(nvs_aio_create(&o, &h), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "aio-max-nr"), "%s",
		  nvs_last_error());
}

Test(opts, unknown_uring_flags_are_einval)
{
	cr_assert_eq(try_create(bad_uring_flags), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "uring_flags"), "%s",
		  nvs_last_error());
}

Test(opts, environment_overrides_the_backend)
{
	struct nvs_aio *h;

	setenv("NVSWAP_BACKEND", "psync", 1);
	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_str_eq(nvs_aio_backend_name(h), "psync");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	setenv("NVSWAP_BACKEND", "libaio", 1);
	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_str_eq(nvs_aio_backend_name(h), "libaio");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	setenv("NVSWAP_BACKEND", "floppy", 1);
	cr_assert_eq(nvs_aio_create(NULL, &h), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "floppy"));
	unsetenv("NVSWAP_BACKEND");
}

Test(opts, an_explicit_backend_wins_over_NVSWAP_BACKEND)
{
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_PSYNC;
	setenv("NVSWAP_BACKEND", "libaio", 1);
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_str_eq(nvs_aio_backend_name(h), "psync");
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.backend, NVS_BACKEND_PSYNC);
	cr_assert_eq(st.backend_reason, NVS_BACKEND_BY_OPTS);
	cr_assert_str_eq(nvs_backend_reason_name(st.backend_reason),
			 "explicit");
	cr_assert(strstr(st.backend_notes, "psync: chosen (explicit)"), "%s",
		  st.backend_notes);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	/* Not even a value that names no backend gets in the way. */
	setenv("NVSWAP_BACKEND", "floppy", 1);
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_str_eq(nvs_aio_backend_name(h), "psync");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	unsetenv("NVSWAP_BACKEND");
}

Test(opts, NVSWAP_BACKEND_steers_auto_and_the_stats_say_so)
{
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	nvs_aio_opts_init(&o);
	setenv("NVSWAP_BACKEND", "psync", 1);
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_str_eq(nvs_aio_backend_name(h), "psync");
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.backend_reason, NVS_BACKEND_BY_ENV);
	cr_assert_str_eq(nvs_backend_reason_name(st.backend_reason),
			 "NVSWAP_BACKEND");
	cr_assert(strstr(st.backend_notes, "psync: chosen (NVSWAP_BACKEND)"),
		  "%s", st.backend_notes);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	setenv("NVSWAP_BACKEND", "auto", 1);
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_eq(st.backend_reason, NVS_BACKEND_BY_PROBE);
	cr_assert_str_eq(nvs_backend_reason_name(st.backend_reason), "probe");
	cr_assert_eq(nvs_aio_destroy(h), 0);
	unsetenv("NVSWAP_BACKEND");
}

Test(opts, auto_picks_the_first_backend_this_kernel_allows)
{
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	cr_assert_eq(nvs_aio_create(NULL, &h), 0);
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_log_info("backend: %s (%s)", nvs_aio_backend_name(h),
		    st.backend_notes);
	if (st.backend != NVS_BACKEND_IO_URING) {
		/* Then the notes must say why io_uring was passed over. */
		cr_assert(strstr(st.backend_notes, "io_uring: "), "%s",
			  st.backend_notes);
		cr_assert_null(strstr(st.backend_notes, "io_uring: chosen"));
	} else {
		cr_assert_str_eq(nvs_aio_backend_name(h), "io_uring");
		cr_assert_str_eq(st.backend_notes, "io_uring: chosen");
	}
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(opts, destroy_null_is_a_noop_and_getters_do_not_crash)
{
	cr_assert_eq(nvs_aio_destroy(NULL), 0);
	cr_assert_eq(nvs_aio_get_block_size(NULL), 0);
	cr_assert_eq(nvs_aio_get_queue_depth(NULL), 0);
	cr_assert_eq(nvs_aio_get_single_submit(NULL), false);
	cr_assert_eq(nvs_aio_get_overlap_events(NULL), false);
	cr_assert_eq(nvs_aio_get_intra_op_parallelism(NULL), 0);
	cr_assert_str_eq(nvs_aio_backend_name(NULL), "");
	struct nvs_aio_stats st;
	cr_assert_eq(nvs_aio_get_stats(NULL, &st), -EINVAL);
}

Test(opts, every_failed_allocation_in_create_is_enomem)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned failures = 0;

	nvs_aio_opts_init(&o);
	o.intra_op_parallelism = 2;
	o.backend = NVS_BACKEND_PSYNC;
	/* Fail each allocation create makes, in turn, until the injected
	 * failure lies past the last one. The process-wide pinned tables
	 * grow lazily (their own failures are tested in the pinned suite),
	 * so a later create may need fewer allocations than an earlier. */
	for (unsigned long i = 1;; i++) {
		nvs__alloc_fail_at(i);
		h = (struct nvs_aio *)&o;
		int ret = nvs_aio_create(&o, &h);
		unsigned long used = nvs__alloc_fail_at(0);
		if (ret == 0) {
			cr_assert_eq(nvs_aio_destroy(h), 0);
			if (used < i)
				break;
			continue;
		}
		cr_assert_eq(ret, -ENOMEM, "allocation %lu", i);
		cr_assert_null(h);
		failures++;
		cr_assert_lt(i, 200);
	}
	cr_assert_gt(failures, 5);
}

Test(errors, strerror_and_last_error)
{
	cr_assert_str_eq(nvs_strerror(-ENOENT), "No such file or directory");
	cr_assert_str_eq(nvs_strerror(ENOSPC), "No space left on device");
	cr_assert_str_eq(nvs_strerror(-EBADMSG),
			 "data read back differs from data written");
	cr_assert_str_eq(nvs_strerror(0), "success");
	cr_assert_not_null(nvs_strerror(99999));
	cr_assert_str_eq(nvs_last_error(), "");
	cr_assert_eq(nvs_aio_wait(NULL), -EINVAL);
	cr_assert_str_eq(nvs_last_error(), "nvs_aio_wait: handle is NULL");
}

Test(version, runtime_matches_headers_and_build)
{
	cr_assert_str_eq(nvs_version(), NVS_VERSION_STRING);
	cr_assert_str_eq(nvs_version(), NVS_VERSION_MESON);
}

Test(version, build_features_name_what_the_build_used)
{
	const char *f = nvs_build_features();

	cr_assert(strstr(f, "liburing " NVS_BUILD_LIBURING), "%s", f);
	cr_assert(strstr(f, "jemalloc " NVS_BUILD_JEMALLOC), "%s", f);
	cr_assert(strstr(f, HAVE_STATX_DIOALIGN ? "statx DIO alignment: yes"
						: "statx DIO alignment: no"),
		  "%s", f);
	cr_assert(strstr(f, "build " NVS_BUILD_TYPE), "%s", f);
	cr_assert(strstr(f, "sanitizers " NVS_BUILD_SANITIZE), "%s", f);
}

Test(size, parse_size_takes_binary_suffixes_and_refuses_the_rest)
{
	uint64_t v = 7;

	cr_assert_eq(nvs_parse_size("4096", &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(nvs_parse_size("64K", &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(nvs_parse_size("100m", &v), 0);
	cr_assert_eq(v, 100ull << 20);
	cr_assert_eq(nvs_parse_size("2GiB", &v), 0);
	cr_assert_eq(v, 2ull << 30);
	cr_assert_eq(nvs_parse_size("3GB", &v), 0);
	cr_assert_eq(v, 3000000000ull);
	cr_assert_eq(nvs_parse_size("1T", &v), 0);
	cr_assert_eq(v, 1ull << 40);
	cr_assert_eq(nvs_parse_size("0", &v), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(nvs_parse_size("18446744073709551615", &v), 0);
	cr_assert_eq(v, UINT64_MAX);
	v = 7;
	cr_assert_eq(nvs_parse_size("18446744073709551616", &v), -ERANGE);
	cr_assert_eq(nvs_parse_size("16777216T", &v), -ERANGE);
	cr_assert_eq(nvs_parse_size("", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("-1", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size(" 1", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1 K", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1KK", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1X", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("K", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1.5G", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size(NULL, &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1", NULL), -EINVAL);
	cr_assert_eq(v, 7, "unchanged on failure");
}

/* Hostile input 16, then round 4: one rule for every size keyword,
 * transformers' (KB..TB decimal, KiB..TiB binary), the bare letters
 * binary as fio reads them, either case for the unit's letter, and a
 * lowercase b after it refused (a bit to some tools, a byte to most
 * other tools). */
Test(size, parse_size_reads_kb_as_decimal_kib_as_binary_and_refuses_b)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} ok[] = {
		{"1k", 1024},
		{"1K", 1024},
		{"1kiB", 1024},
		{"1KiB", 1024},
		{"1KIB", 1024},
		{"1kIB", 1024},
		{"1kB", 1000},
		{"1KB", 1000},
		{"3miB", 3ull << 20},
		{"3MB", 3000000},
		{"2gB", 2000000000},
		{"2G", 2ull << 30},
		{"5tIB", 5ull << 40},
		{"5TB", 5000000000000ull},
		{"18446744TB", 18446744000000000000ull},
	};
	static const char *const ambiguous[] = {"1kb", "1Kb", "100mb", "1Gb",
						"1gb", "1Tb", "1Kib",  "1kib"};
	uint64_t v;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 0;
		cr_assert_eq(nvs_parse_size(ok[i].text, &v), 0, "%s: %s",
			     ok[i].text, nvs_last_error());
		cr_assert_eq(v, ok[i].bytes, "%s: %" PRIu64, ok[i].text, v);
	}
	v = 7;
	for (size_t i = 0; i < sizeof(ambiguous) / sizeof(ambiguous[0]); i++) {
		cr_assert_eq(nvs_parse_size(ambiguous[i], &v), -EINVAL, "%s",
			     ambiguous[i]);
		cr_assert(strstr(nvs_last_error(), "ambiguous: a lowercase b"),
			  "%s: %s", ambiguous[i], nvs_last_error());
	}
	cr_assert_eq(nvs_parse_size("1Gb", &v), -EINVAL);
	cr_assert(
		strstr(nvs_last_error(),
		       "nvs_parse_size: '1Gb': ambiguous: a lowercase b is "
		       "a bit to some tools and a byte to others (Gb is a "
		       "gigabit to transformers, Gib a GiB): write GB or GiB; "
		       "a size is a whole number of bytes"),
		"%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "KB, MB, GB, TB decimal"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_parse_size("16777216TiB", &v), -ERANGE);
	cr_assert_eq(nvs_parse_size("18446745TB", &v), -ERANGE);
	cr_assert(strstr(nvs_last_error(), "larger than 2^64 - 1 bytes; a size "
					   "is a whole number"),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_parse_size("1kibb", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1ki", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1b", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1B", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1 ", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1.5GB", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("1e-20GB", &v), -EINVAL);
	cr_assert_eq(nvs_parse_size("infGB", &v), -EINVAL);
	cr_assert(strstr(nvs_last_error(), "'infGB': not a size"), "%s",
		  nvs_last_error());
	cr_assert_eq(v, 7, "unchanged on failure");
}

Test(opts, backend_names_are_the_ones_nvswap_backend_takes)
{
	cr_assert_str_eq(nvs_backend_name(NVS_BACKEND_IO_URING), "io_uring");
	cr_assert_str_eq(nvs_backend_name(NVS_BACKEND_LIBAIO), "libaio");
	cr_assert_str_eq(nvs_backend_name(NVS_BACKEND_PSYNC), "psync");
	cr_assert_str_eq(nvs_backend_name(NVS_BACKEND_AUTO), "auto");
	cr_assert_str_eq(nvs_backend_name((enum nvs_backend)99), "auto");
}
