// SPDX-License-Identifier: MIT
/*
 * The DeepSpeed-style config: defaults, every key of the checked sections,
 * a DeepSpeed config with other sections, and each error with the key and
 * its line and column.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(config, .fini = fini);

static struct nvs_config *load(const char *json)
{
	struct nvs_config *c = NULL;
	int ret = nvs_config_load_string(json, "t.json", &c);

	cr_assert_eq(ret, 0, "%s", nvs_last_error());
	return c;
}

/* Loading @json fails with @err and a message containing @msg. */
static void fails(const char *json, int err, const char *msg)
{
	struct nvs_config *c = (struct nvs_config *)&c;

	cr_assert_eq(nvs_config_load_string(json, "t.json", &c), err,
		     "%s -> %s", json, nvs_last_error());
	cr_assert_null(c);
	cr_assert(strstr(nvs_last_error(), msg), "wanted '%s' in '%s'", msg,
		  nvs_last_error());
}

Test(config, an_empty_config_has_deepspeeds_defaults)
{
	struct nvs_config *c = load("{}");
	struct nvs_offload_config p, o;
	struct nvs_aio_opts a;
	struct nvs_nvswap_config n;

	cr_assert_eq(nvs_config_offload(c, NVS_OFFLOAD_PARAM, &p), 0);
	cr_assert_eq(nvs_config_offload(c, NVS_OFFLOAD_OPTIMIZER, &o), 0);
	cr_assert_not(p.present);
	cr_assert_eq(p.device, NVS_DEVICE_NONE);
	cr_assert_null(p.nvme_path);
	cr_assert_eq(p.buffer_count, 5);
	cr_assert_eq(o.buffer_count, 4);
	cr_assert_eq(p.buffer_size, 100000000u);
	cr_assert_eq(p.max_in_cpu, 1000000000u);
	cr_assert(p.pin_memory);
	cr_assert_not(o.pipeline_read);
	cr_assert_not(o.pipeline_write);
	cr_assert_eq(nvs_config_aio_opts(c, &a), 0);
	cr_assert_eq(a.block_size, 1048576);
	cr_assert_eq(a.queue_depth, 8);
	cr_assert_eq(a.intra_op_parallelism, 1);
	cr_assert_not(a.single_submit);
	cr_assert(a.overlap_events);
	cr_assert_eq(a.backend, NVS_BACKEND_AUTO);
	cr_assert_not(nvs_config_use_gds(c));
	cr_assert_eq(nvs_config_nvswap(c, &n), 0);
	cr_assert_eq(n.stripe_size, 1 << 20);
	cr_assert_eq(n.npaths, 0);
	cr_assert_not(n.checksum);
	cr_assert_not(n.page_cache);
	cr_assert_null(nvs_config_warning(c, 0));
	nvs_config_free(c);
}

Test(config, a_deepspeed_config_with_other_sections_loads_every_key)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_offload_config p, o;
	struct nvs_aio_opts a;

	snprintf(json, sizeof(json),
		 "{\n"
		 "  \"train_batch_size\": 16,\n"
		 "  \"fp16\": {\"enabled\": true, \"loss_scale\": 0},\n"
		 "  \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": "
		 "0.001}},\n"
		 "  \"zero_optimization\": {\n"
		 "    \"stage\": 3,\n"
		 "    \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
		 "\"%s\", \"buffer_count\": 6, \"buffer_size\": 1e8, "
		 "\"max_in_cpu\": 0, \"pin_memory\": false},\n"
		 "    \"offload_optimizer\": {\"device\": \"nvme\", "
		 "\"nvme_path\": \"%s\", \"buffer_count\": 8, "
		 "\"buffer_size\": 2e7, \"pipeline_read\": true, "
		 "\"pipeline_write\": true, \"fast_init\": false, \"ratio\": "
		 "0.3}\n"
		 "  },\n"
		 "  \"aio\": {\"block_size\": 262144, \"queue_depth\": 32, "
		 "\"intra_op_parallelism\": 2, \"single_submit\": true, "
		 "\"overlap_events\": false, \"use_gds\": true}\n"
		 "}\n",
		 tu_dir(), tu_dir());
	c = load(json);
	nvs_config_offload(c, NVS_OFFLOAD_PARAM, &p);
	nvs_config_offload(c, NVS_OFFLOAD_OPTIMIZER, &o);
	cr_assert(p.present);
	cr_assert_eq(p.device, NVS_DEVICE_NVME);
	cr_assert_str_eq(p.nvme_path, tu_dir());
	cr_assert_eq(p.buffer_count, 6);
	cr_assert_eq(p.buffer_size, 100000000u, "1e8 is a count");
	cr_assert_eq(p.max_in_cpu, 0);
	cr_assert_not(p.pin_memory);
	cr_assert_eq(o.buffer_count, 8);
	cr_assert_eq(o.buffer_size, 20000000u);
	cr_assert(o.pipeline_read);
	cr_assert(o.pipeline_write);
	nvs_config_aio_opts(c, &a);
	cr_assert_eq(a.block_size, 262144);
	cr_assert_eq(a.queue_depth, 32);
	cr_assert_eq(a.intra_op_parallelism, 2);
	cr_assert(a.single_submit);
	cr_assert_not(a.overlap_events);
	cr_assert(nvs_config_use_gds(c));
	/* The DeepSpeed keys nvswap does not use, with where they are: line
	 * 8, at the key's opening quote. */
	const char *l8 = json;
	char want[256];
	for (int i = 1; i < 8; i++)
		l8 = strchr(l8, '\n') + 1;
	snprintf(want, sizeof(want),
		 "t.json:8:%d: zero_optimization.offload_optimizer.fast_init: "
		 "accepted, unused by nvswap",
		 (int)(strstr(l8, "\"fast_init\"") - l8) + 1);
	cr_assert_str_eq(nvs_config_warning(c, 0), want);
	cr_assert(strstr(nvs_config_warning(c, 1), "offload_optimizer.ratio"));
	/* use_gds true is read, and said not to be acted on by the
	 * swappers (their buffers are host memory). */
	cr_assert(strstr(nvs_config_warning(c, 2), "t.json:10:"), "%s",
		  nvs_config_warning(c, 2));
	cr_assert(strstr(nvs_config_warning(c, 2),
			 "aio.use_gds: true, but the swap manager's buffers "
			 "are pinned host memory"),
		  "%s", nvs_config_warning(c, 2));
	cr_assert_null(nvs_config_warning(c, 3));
	nvs_config_free(c);
}

Test(config, older_thread_count_spellings_work_with_a_warning)
{
	struct nvs_config *c = load("{\"aio\": {\"thread_count\": 3}}");
	struct nvs_aio_opts a;

	nvs_config_aio_opts(c, &a);
	cr_assert_eq(a.intra_op_parallelism, 3);
	cr_assert(strstr(nvs_config_warning(c, 0),
			 "aio.thread_count: deprecated spelling of "
			 "aio.intra_op_parallelism"),
		  "%s", nvs_config_warning(c, 0));
	nvs_config_free(c);
	c = load("{\"aio\": {\"num_threads\": 4}}");
	nvs_config_aio_opts(c, &a);
	cr_assert_eq(a.intra_op_parallelism, 4);
	nvs_config_free(c);
}

Test(config, the_nvswap_section_reads_our_keys)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_nvswap_config n;
	struct nvs_aio_opts a;

	mkdir(tu_path("a"), 0755);
	mkdir(tu_path("b"), 0755);
	snprintf(json, sizeof(json),
		 "{\"nvswap\": {\"backend\": \"libaio\", \"stripe_size\": "
		 "4194304, \"checksum\": true, \"auto_evict\": true, "
		 "\"nvme_paths\": [\"%s\", \"%s\"]}}",
		 tu_path("a"), tu_path("b"));
	c = load(json);
	nvs_config_nvswap(c, &n);
	cr_assert_eq(n.backend, NVS_BACKEND_LIBAIO);
	cr_assert_eq(n.stripe_size, 4 << 20);
	cr_assert(n.checksum);
	cr_assert(n.auto_evict);
	cr_assert_eq(n.npaths, 2);
	cr_assert_str_eq(n.nvme_paths[0], tu_path("a"));
	cr_assert_str_eq(n.nvme_paths[1], tu_path("b"));
	nvs_config_aio_opts(c, &a);
	cr_assert_eq(a.backend, NVS_BACKEND_LIBAIO, "the handle gets it");
	nvs_config_free(c);
}

Test(config, unknown_keys_say_where_and_what_was_meant)
{
	fails("{\n  \"aio\": {\n    \"queue_dept\": 8\n  }\n}", -EINVAL,
	      "t.json:3:5: aio.queue_dept: unknown key (did you mean "
	      "'queue_depth'?)");
	fails("{\"zero_optimization\": {\"offload_param\": {\"bufer_count\": "
	      "3}}}",
	      -EINVAL,
	      "t.json:1:42: zero_optimization.offload_param.bufer_count: "
	      "unknown key (did you mean 'buffer_count'?)");
	fails("{\"nvswap\": {\"flux_capacitor\": 1}}", -EINVAL,
	      "nvswap.flux_capacitor: unknown key");
}

Test(config, wrong_types_and_bad_values_are_errors_naming_the_key)
{
	fails("{\"aio\": {\"queue_depth\": \"8\"}}", -EINVAL,
	      "t.json:1:10: aio.queue_depth: must be a number");
	fails("{\"aio\": {\"single_submit\": 1}}", -EINVAL,
	      "aio.single_submit: must be true or false");
	fails("{\"aio\": {\"queue_depth\": 0}}", -EINVAL,
	      "aio.queue_depth: must be a whole number of at least 1 (got 0)");
	fails("{\"aio\": {\"queue_depth\": -4}}", -EINVAL, "(got -4)");
	fails("{\"aio\": {\"queue_depth\": 1.5}}", -EINVAL, "(got 1.5)");
	fails("{\"aio\": {\"block_size\": 1000}}", -EINVAL,
	      "aio.block_size: must be a multiple of 512");
	fails("{\"aio\": {\"queue_depth\": 1e9}}", -EINVAL,
	      "aio.queue_depth: at most 32768");
	fails("{\"zero_optimization\": {\"offload_param\": {\"buffer_size\": "
	      "0}}}",
	      -EINVAL, "offload_param.buffer_size: must be a whole number");
	fails("{\"zero_optimization\": {\"offload_param\": {\"device\": "
	      "\"gpu\"}}}",
	      -EINVAL, "must be \"none\", \"cpu\" or \"nvme\"");
	fails("{\"zero_optimization\": {\"offload_param\": 3}}", -EINVAL,
	      "zero_optimization.offload_param: must be an object");
	fails("{\"nvswap\": {\"backend\": \"floppy\"}}", -EINVAL,
	      "nvswap.backend: must be \"auto\"");
	fails("{\"nvswap\": {\"nvme_paths\": []}}", -EINVAL,
	      "nvswap.nvme_paths: must be a list of 1 to 16");
	fails("{\"nvswap\": {\"nvme_paths\": [7]}}", -EINVAL,
	      "entry 0 is not a non-empty string");
	fails("[1, 2]", -EINVAL, "the top level must be an object");
}

/* Hostile input 15: a stripe size nvs_swapper_create would refuse is
 * refused at load, at its position, by the same rule; a section that is
 * not an object is an error whichever section it is. */
Test(config, a_bad_stripe_size_or_a_non_object_section_is_refused_at_load)
{
	struct nvs_config *c;
	struct nvs_nvswap_config nv;

	fails("{\"nvswap\": {\"stripe_size\": 1}}", -EINVAL,
	      "t.json:1:13: nvswap.stripe_size: must be a positive multiple "
	      "of 4096 (got 1)");
	fails("{\"nvswap\": {\"stripe_size\": 6144}}", -EINVAL,
	      "nvswap.stripe_size: must be a positive multiple of 4096");
	fails("{\"nvswap\": {\"stripe_size\": 0}}", -EINVAL,
	      "nvswap.stripe_size: must be a whole number of at least 1");
	c = load("{\"nvswap\": {\"stripe_size\": 8192}}");
	cr_assert_eq(nvs_config_nvswap(c, &nv), 0);
	cr_assert_eq(nv.stripe_size, 8192);
	nvs_config_free(c);
	fails("{\"zero_optimization\": null}", -EINVAL,
	      "t.json:1:2: zero_optimization: must be an object");
	fails("{\"zero_optimization\": []}", -EINVAL,
	      "t.json:1:2: zero_optimization: must be an object");
	fails("{\n  \"zero_optimization\": 3}", -EINVAL,
	      "t.json:2:3: zero_optimization: must be an object");
	fails("{\"aio\": null}", -EINVAL, "t.json:1:2: aio: must be an object");
	fails("{\"nvswap\": []}", -EINVAL, "nvswap: must be an object");
}

/* Hostile input 11: one directory twice in nvme_paths, spelled two ways,
 * is named at load, with both spellings, not later as "in use by process
 * <own pid>". */
Test(config, the_same_directory_twice_in_nvme_paths_is_refused_at_load)
{
	char json[16384], want[12288], a[4096];

	snprintf(a, sizeof(a), "%s", tu_path("a"));
	mkdir(a, 0755);
	mkdir(tu_path("b"), 0755);
	snprintf(json, sizeof(json),
		 "{\"nvswap\": {\"nvme_paths\": [\"%s\", \"%s\", "
		 "\"%s/\"]}}",
		 a, tu_path("b"), a);
	snprintf(want, sizeof(want),
		 "t.json:1:13: nvswap.nvme_paths: entries 0 ('%s') and 2 "
		 "('%s/') are the same directory",
		 a, a);
	fails(json, -EINVAL, want);
}

Test(config, malformed_json_and_duplicate_keys_give_line_and_column)
{
	fails("{\n  \"aio\": {\"queue_depth\": 8,}\n}", -EINVAL, "t.json:2:");
	fails("{\n  \"aio\": {\"queue_depth\": 8,}\n}", -EINVAL,
	      "malformed JSON");
	fails("{\"aio\": {}, \"aio\": {}}", -EINVAL, "duplicate");
}

Test(config, an_nvme_device_needs_a_directory_it_can_write)
{
	char json[4096], want[4096];

	fails("{\"zero_optimization\": {\"offload_param\": {\"device\": "
	      "\"nvme\"}}}",
	      -EINVAL, "device \"nvme\" needs an nvme_path");
	tu_write_file(tu_path("f"), "x", 1);
	/* A missing one is fine when it can be made (the swapper makes
	 * it); a file in the way is named. */
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}}",
		 tu_path("new/swap"));
	nvs_config_free(load(json));
	cr_assert_eq(access(tu_path("new"), F_OK), -1, "a load makes nothing");
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s/new/swap\"}}}",
		 tu_path("f"));
	snprintf(want, sizeof(want),
		 "offload_param.nvme_path: '%s/new/swap': "
		 "'%s' is not a directory",
		 tu_path("f"), tu_path("f"));
	fails(json, -ENOTDIR, want);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}}",
		 tu_path("f"));
	fails(json, -ENOTDIR, "is not a directory");
	/* A path is only checked when the device is nvme. */
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": "
		 "\"cpu\", \"nvme_path\": \"/nonexistent\"}}}");
	nvs_config_free(load(json));
}

Test(config, a_read_only_nvme_path_is_refused)
{
	char json[4096], want[4096];
	const char *d = tu_path("ro");

	if (!tu_mount_private(d, "tmpfs", MS_RDONLY, "size=1m"))
		cr_skip_test("cannot mount a read-only tmpfs here (%s): needs "
			     "root and mount namespaces",
			     strerror(errno));
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}}",
		 d);
	fails(json, -EROFS, "cannot create files there: Read-only file system");
	/* A level to be made there: named, refused at load. */
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s/a/b\"}}}",
		 d);
	snprintf(want, sizeof(want),
		 "'%s/a/b': cannot create '%s/a': Read-only file system", d, d);
	fails(json, -EROFS, want);
	umount2(d, MNT_DETACH);
}

Test(config, files_load_and_errors_name_the_file)
{
	struct nvs_config *c = (struct nvs_config *)&c;
	char want[4200];

	cr_assert_eq(nvs_config_load(tu_path("none.json"), &c), -ENOENT);
	cr_assert_null(c);
	cr_assert(strstr(nvs_last_error(), "none.json"));
	const char *ok = "{\"aio\": {\"queue_depth\": 4}}";
	tu_write_file(tu_path("ok.json"), ok, strlen(ok));
	cr_assert_eq(nvs_config_load(tu_path("ok.json"), &c), 0);
	nvs_config_free(c);
	tu_write_file(tu_path("bad.json"), "{\n\"aio\": 5}", 11);
	cr_assert_eq(nvs_config_load(tu_path("bad.json"), &c), -EINVAL);
	snprintf(want, sizeof(want), "%s:2:1: aio: must be an object",
		 tu_path("bad.json"));
	cr_assert_str_eq(nvs_last_error(), want);
}

Test(config, null_arguments_are_einval_and_free_null_is_a_noop)
{
	struct nvs_config *c;
	struct nvs_offload_config o;

	cr_assert_eq(nvs_config_load(NULL, &c), -EINVAL);
	cr_assert_eq(nvs_config_load("x", NULL), -EINVAL);
	cr_assert_eq(nvs_config_load_string(NULL, NULL, &c), -EINVAL);
	cr_assert_eq(nvs_config_offload(NULL, NVS_OFFLOAD_PARAM, &o), -EINVAL);
	c = load("{}");
	cr_assert_eq(nvs_config_offload(c, (enum nvs_offload_kind)7, &o),
		     -EINVAL);
	cr_assert_eq(nvs_config_aio_opts(c, NULL), -EINVAL);
	cr_assert_eq(nvs_config_nvswap(c, NULL), -EINVAL);
	cr_assert_null(nvs_config_warning(NULL, 0));
	cr_assert_not(nvs_config_use_gds(NULL));
	nvs_config_free(c);
	nvs_config_free(NULL);
}

Test(config, every_failed_allocation_is_enomem_and_leaks_nothing)
{
	const char *json = "{\"zero_optimization\": {\"offload_optimizer\": "
			   "{\"fast_init\": true}}, \"aio\": {\"num_threads\": "
			   "2}}";

	for (unsigned long i = 1;; i++) {
		struct nvs_config *c = (struct nvs_config *)&c;
		int ret;

		nvs__alloc_fail_at(i);
		ret = nvs_config_load_string(json, NULL, &c);
		nvs__alloc_fail_at(0);
		if (ret == 0) {
			/* Both warnings made it: none was dropped. */
			cr_assert_not_null(nvs_config_warning(c, 1));
			nvs_config_free(c);
			cr_assert_gt(i, 3, "the config, positions, warnings");
			break;
		}
		cr_assert_eq(ret, -ENOMEM, "allocation %lu: %s", i,
			     nvs_last_error());
		cr_assert_null(c);
	}
}

Test(config, auto_evict_is_on_unless_the_config_turns_it_off)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_swapper_opts o;

	/* No default that can hang (issue 16): as nvs_swapper_opts_init. */
	mkdir(tu_path("p"), 0755);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}}",
		 tu_path("p"));
	c = load(json);
	nvs_swapper_opts_init(&o);
	o.auto_evict = false;
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o), 0,
		     "%s", nvs_last_error());
	cr_assert(o.auto_evict);
	cr_assert_eq(o.wait_ms, NVS_SWAPPER_WAIT_MS_DEFAULT);
	nvs_config_free(c);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}, \"nvswap\": "
		 "{\"auto_evict\": false}}",
		 tu_path("p"));
	c = load(json);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o), 0,
		     "%s", nvs_last_error());
	cr_assert_not(o.auto_evict);
	nvs_config_free(c);
}

Test(config, wait_ms_is_read_and_judged_at_its_position)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_swapper_opts o;

	mkdir(tu_path("p"), 0755);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\"}}, \"nvswap\": "
		 "{\"auto_evict\": false, \"wait_ms\": 250}}",
		 tu_path("p"));
	c = load(json);
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o), 0,
		     "%s", nvs_last_error());
	cr_assert_eq(o.wait_ms, 250);
	nvs_config_free(c);
	/* 0 would mean the default; a config says what it means. */
	fails("{\"nvswap\": {\"wait_ms\": 0}}", -EINVAL,
	      "t.json:1:13: nvswap.wait_ms");
	fails("{\"nvswap\": {\"wait_ms\": 4294967295}}", -EINVAL,
	      "at most 4294967294");
	fails("{\"nvswap\": {\"wait_ms\": -5}}", -EINVAL, "nvswap.wait_ms");
}

Test(config, lookahead_is_read_and_judged_at_its_position)
{
	struct nvs_config *c;
	struct nvs_nvswap_config n;

	c = load("{}");
	cr_assert_eq(nvs_config_nvswap(c, &n), 0);
	cr_assert_eq(n.lookahead, 1, "as nvs_param_swapper_opts_init()");
	nvs_config_free(c);
	c = load("{\"nvswap\": {\"lookahead\": 0}}");
	nvs_config_nvswap(c, &n);
	cr_assert_eq(n.lookahead, 0, "0: no read-ahead");
	nvs_config_free(c);
	c = load("{\"nvswap\": {\"lookahead\": 1024}}");
	nvs_config_nvswap(c, &n);
	cr_assert_eq(n.lookahead, NVS_CONFIG_MAX_LOOKAHEAD);
	nvs_config_free(c);
	fails("{\"nvswap\": {\"lookahead\": 1025}}", -EINVAL,
	      "t.json:1:13: nvswap.lookahead: at most 1024");
	fails("{\"nvswap\": {\"lookahead\": -1}}", -EINVAL,
	      "nvswap.lookahead: must be a whole number of at least 0");
	fails("{\"nvswap\": {\"lookahead\": 1.5}}", -EINVAL,
	      "nvswap.lookahead");
	fails("{\"nvswap\": {\"lookahead\": \"2\"}}", -EINVAL,
	      "nvswap.lookahead");
	fails("{\"nvswap\": {\"look_ahead\": 2}}", -EINVAL,
	      "did you mean 'lookahead'?");
}

Test(config, persist_and_keep_generations_reach_the_swapper)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_nvswap_config n;
	struct nvs_swapper_opts o;

	c = load("{}");
	nvs_config_nvswap(c, &n);
	cr_assert_eq(n.persist, NVS_PERSIST_SCRATCH);
	cr_assert_eq(n.keep_generations, 2);
	nvs_config_free(c);
	mkdir(tu_path("p"), 0755);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_optimizer\": "
		 "{\"device\": \"nvme\", \"nvme_path\": \"%s\"}}, "
		 "\"nvswap\": {\"persist\": \"resume\", "
		 "\"keep_generations\": 5}}",
		 tu_path("p"));
	c = load(json);
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_OPTIMIZER, 0, &o),
		     0, "%s", nvs_last_error());
	cr_assert_eq(o.persist, NVS_PERSIST_RESUME);
	cr_assert_eq(o.keep_generations, 5);
	nvs_config_free(c);
	c = load("{\"nvswap\": {\"persist\": \"persistent\"}}");
	nvs_config_nvswap(c, &n);
	cr_assert_eq(n.persist, NVS_PERSIST_PERSISTENT);
	nvs_config_free(c);
	c = load("{\"nvswap\": {\"persist\": \"readonly\"}}");
	nvs_config_nvswap(c, &n);
	cr_assert_eq(n.persist, NVS_PERSIST_READONLY);
	nvs_config_free(c);
	fails("{\"nvswap\": {\"persist\": \"durable\"}}", -EINVAL,
	      "t.json:1:13: nvswap.persist: must be \"scratch\", "
	      "\"persistent\", \"resume\" or \"readonly\"");
	fails("{\"nvswap\": {\"persist\": true}}", -EINVAL, "nvswap.persist");
	fails("{\"nvswap\": {\"keep_generations\": 0}}", -EINVAL,
	      "nvswap.keep_generations");
	fails("{\"nvswap\": {\"keep_generations\": 65}}", -EINVAL,
	      "nvswap.keep_generations: at most 64");
}

Test(config, offload_sections_become_swapper_options)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_swapper_opts o;

	mkdir(tu_path("p"), 0755);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"nvme\", \"nvme_path\": \"%s\", \"buffer_count\": 6, "
		 "\"buffer_size\": 1e6, \"pin_memory\": false}, "
		 "\"offload_optimizer\": {\"device\": \"nvme\", "
		 "\"nvme_path\": \"%s\"}}, \"aio\": {\"block_size\": 262144, "
		 "\"queue_depth\": 16}, \"nvswap\": {\"stripe_size\": 2097152, "
		 "\"checksum\": true, \"auto_evict\": true, "
		 "\"page_cache\": true}}",
		 tu_path("p"), tu_path("p"));
	c = load(json);
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 3, &o), 0,
		     "%s", nvs_last_error());
	cr_assert_eq(o.npaths, 1);
	cr_assert_str_eq(o.nvme_paths[0], tu_path("p"));
	cr_assert_str_eq(o.name, "param");
	cr_assert_eq(o.rank, 3);
	cr_assert_eq(o.buffer_count, 6);
	cr_assert_eq(o.elem_size, 2, "fp16 parameters");
	cr_assert_eq(o.buffer_size, 2000000);
	cr_assert(!o.pin_memory);
	cr_assert_eq(o.stripe_size, 2 << 20);
	cr_assert(o.checksum);
	cr_assert(o.page_cache);
	cr_assert(o.auto_evict);
	cr_assert_eq(o.aio.block_size, 262144);
	cr_assert_eq(o.aio.queue_depth, 16);
	cr_assert(o.aio.overlap_events, "DeepSpeed's default");

	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_OPTIMIZER, 0, &o),
		     0);
	cr_assert_str_eq(o.name, "optimizer");
	cr_assert_eq(o.buffer_count, 4);
	cr_assert_eq(o.elem_size, 4, "fp32 optimizer state");
	cr_assert_eq(o.buffer_size, 400000000ull);
	cr_assert(o.pin_memory);

	nvs_swapper_opts_init(&o);
	o.elem_size = 4;
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o), 0);
	cr_assert_eq(o.buffer_size, 4000000, "the caller's element size");
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, -2, &o),
		     -EINVAL, "negative, and not NVS_RANK_AUTO (-1)");
	cr_assert_eq(
		nvs_config_swapper_opts(c, (enum nvs_offload_kind)7, 0, &o),
		-EINVAL);
	cr_assert_eq(nvs_config_swapper_opts(NULL, NVS_OFFLOAD_PARAM, 0, &o),
		     -EINVAL);
	o.size = 0;
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o),
		     -EINVAL, "opts not initialised");
	nvs_config_free(c);
}

Test(config, swapper_options_need_an_nvme_device_and_take_nvme_paths_first)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_swapper_opts o;

	c = load("{\"zero_optimization\": {\"offload_param\": {\"device\": "
		 "\"cpu\"}}}");
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o),
		     -EINVAL);
	cr_assert(strstr(nvs_last_error(),
			 "offload_param.device is \"cpu\", not \"nvme\""),
		  "%s", nvs_last_error());
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_OPTIMIZER, 0, &o),
		     -EINVAL, "absent section: device none");
	cr_assert(strstr(nvs_last_error(), "\"none\""), "%s", nvs_last_error());
	nvs_config_free(c);

	mkdir(tu_path("a"), 0755);
	mkdir(tu_path("b"), 0755);
	snprintf(json, sizeof(json),
		 "{\"zero_optimization\": {\"offload_optimizer\": "
		 "{\"device\": \"nvme\", \"nvme_path\": \"%s\"}}, "
		 "\"nvswap\": {\"nvme_paths\": [\"%s\", \"%s\"]}}",
		 tu_path("a"), tu_path("a"), tu_path("b"));
	c = load(json);
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_OPTIMIZER, 0, &o),
		     0);
	cr_assert_eq(o.npaths, 2);
	cr_assert_str_eq(o.nvme_paths[1], tu_path("b"));
	nvs_config_free(c);
}

/* The NVMe sample of the Hugging Face DeepSpeed guide: it puts "aio"
 * inside zero_optimization, where DeepSpeed never reads it. It loads, and
 * the misplaced section is named instead of silently dropped. */
Test(config, a_published_sample_with_aio_misplaced_loads_and_says_so)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_aio_opts a;
	const char *w;
	bool found = false;

	snprintf(
		json, sizeof(json),
		"{\n\"zero_optimization\": {\n  \"stage\": 3,\n"
		"  \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
		"\"%s\", \"pin_memory\": true, \"buffer_count\": 4, "
		"\"fast_init\": false},\n"
		"  \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
		"\"%s\", \"pin_memory\": true, \"buffer_count\": 5, "
		"\"buffer_size\": 1e8, \"max_in_cpu\": 1e9},\n"
		"  \"aio\": {\"block_size\": 262144, \"queue_depth\": 32, "
		"\"thread_count\": 1, \"single_submit\": false, "
		"\"overlap_events\": true},\n"
		"  \"overlap_comm\": true, \"contiguous_gradients\": true, "
		"\"sub_group_size\": 1e9, \"reduce_bucket_size\": \"auto\", "
		"\"stage3_max_live_parameters\": 1e9, "
		"\"stage3_gather_16bit_weights_on_model_save\": true\n}\n}",
		tu_dir(), tu_dir());
	c = load(json);
	for (unsigned i = 0; (w = nvs_config_warning(c, i)); i++)
		if (strstr(w, "t.json:6:3: zero_optimization.aio: ignored"))
			found = true;
	cr_assert(found, "the misplaced aio section is named");
	nvs_config_aio_opts(c, &a);
	cr_assert_eq(a.block_size, 1048576, "DeepSpeed's default, as there");
	cr_assert_eq(a.queue_depth, 8);
	nvs_config_free(c);
}

/* Found by fuzz_config: the position index kept escapes raw, so a key
 * written with one ("\u0061io", "queue\u005fdepth") was never found and
 * its error said 0:0. */
Test(config, a_key_written_with_escapes_is_reported_at_its_line_and_column)
{
	fails("{\n  \"\\u0061io\": {\n    \"queue\\u005fdepth\": 0\n  }\n}",
	      -EINVAL,
	      "t.json:3:5: aio.queue_depth: must be a whole number of at "
	      "least 1 (got 0)");
	fails("{\"aio\": {\"a\\\"b\\\\c\\/\\n\": 1}}", -EINVAL,
	      "t.json:1:10: aio.a\"b\\c/\n: unknown key");
	/* U+00E9 and U+1F600 (a surrogate pair), as jansson names them. */
	fails("{\"nvswap\": {\n\"caf\\u00e9\\ud83d\\ude00\": 1}}", -EINVAL,
	      "t.json:2:1: nvswap.caf\xc3\xa9\xf0\x9f\x98\x80: unknown key");
}
