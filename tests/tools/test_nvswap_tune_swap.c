// SPDX-License-Identifier: MIT
/*
 * nvswap-tune --workload swap as users run it, on tiny layers: the keys
 * it chooses (offload_param buffer_count and buffer_size, nvswap
 * lookahead, the aio section) land in the right sections of the config
 * it writes, load back with nvs_config_load() and run the parameter
 * swapper for the tensors tuned for; swap is the default with --config
 * and seq without; bad input (a bad --workload, no layer sizes, layers no
 * pool within the pinned budget can hold, flags of the other workload)
 * is refused with its reason and exit status before any walk; Ctrl-C
 * removes the swap files.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <nvswap/nvswap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuneutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nvswap_tune_swap, .fini = fini);

static json_t *obj(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);

	return b ? json_object_get(v, b) : v;
}

/* Nothing of the swapper's is left under tu_dir() either. */
static void no_swap_files(void)
{
	char p[4200];

	snprintf(p, sizeof(p), "%s/nvswap", tu_dir());
	cr_assert_neq(access(p, F_OK), 0, "%s was left behind", p);
	tt_no_leftovers(tu_dir());
}

/* The parameter swapper made from @path's config serves @layers layers
 * of @bytes: the tuned config is usable for what it was tuned for. */
static void serves(const char *path, unsigned layers, size_t bytes,
		   unsigned lookahead)
{
	struct nvs_param_swapper_opts po;
	struct nvs_param_swapper *ps;
	struct nvs_swapper_opts o;
	struct nvs_nvswap_config nv;
	struct nvs_config *cfg;
	struct nvs_swapper *s;
	void *ptr;

	cr_assert_eq(nvs_config_load(path, &cfg), 0, "%s", nvs_last_error());
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(cfg, NVS_OFFLOAD_PARAM, 0, &o), 0,
		     "%s", nvs_last_error());
	cr_assert_eq(nvs_config_nvswap(cfg, &nv), 0);
	cr_assert_eq(nv.lookahead, lookahead);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	nvs_param_swapper_opts_init(&po);
	po.lookahead = nv.lookahead;
	cr_assert_eq(nvs_param_swapper_create(s, &po, &ps), 0);
	for (unsigned l = 0; l < layers; l++)
		cr_assert_eq(nvs_param_add_layer(ps, l, 1, &bytes, NULL), 0,
			     "%s", nvs_last_error());
	for (unsigned l = 0; l < layers; l++) {
		cr_assert_eq(nvs_param_acquire_layer(ps, l, &ptr), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_param_release_layer(ps, l, true), 0);
		cr_assert_eq(nvs_param_evict_layer(ps, l), 0);
	}
	cr_assert_eq(nvs_param_swapper_destroy(ps), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	nvs_config_free(cfg);
}

Test(nvswap_tune_swap, every_chosen_key_is_written_where_the_loader_reads_it)
{
	/* 3 buffers of 3 Mi elements: 18 MiB of pinned memory allowed */
	const char *cfg = tt_ds_config("ds.json", 3, 3u << 20);
	const char *out = tt_keep("tuned.json");
	struct nvs_offload_config off;
	struct nvs_config *c;
	json_t *r, *best, *file, *op, *p;
	size_t i;
	unsigned pool = 0, aio = 0, fin = 0, base = 0;

	r = tt_tune_json("--config %s --layers 4 --tensor-size 1M "
			 "--sweep-config %s --loops 2 --json --write-config %s",
			 cfg, tt_small_sweep(), out);
	cr_assert_str_eq(json_string_value(obj(r, "workload", NULL)), "swap");
	cr_assert_eq(tt_int(r, "layers"), 4);
	cr_assert_eq(tt_int(r, "tensor_size"), 1 << 20);
	cr_assert_eq(tt_int(r, "buffer_size"), 1 << 19); /* 2-byte elements */
	cr_assert_eq(tt_int(r, "max_pinned"), 3 * (3 << 20) * 2);
	cr_assert_eq(tt_int(r, "skipped"), 0);
	/* Pool shapes: buffer_count 2..5 (4 layers + 1) x lookahead (1,
	 * half, buffers - 2, buffers - 1; at most layers - 1): 2:1 3:1,2
	 * 4:1,2,3 5:1,2,3 */
	json_array_foreach(obj(r, "results", NULL), i, p)
	{
		json_int_t b = tt_int(p, "buffer_count");
		json_int_t l = tt_int(p, "lookahead");
		if (obj(p, "pool", NULL)) {
			pool++;
			cr_assert(b >= 2 && b <= 5 && l >= 1 && l < b);
			cr_assert_eq(tt_int(obj(p, "pool", NULL), "steps"), 2);
		}
		aio += obj(p, "aio", NULL) != NULL;
		if (obj(p, "final", NULL)) {
			fin++;
			cr_assert_eq(tt_int(obj(p, "final", NULL), "steps"), 2);
		}
		if (json_is_true(obj(p, "baseline", NULL))) {
			base++;
			cr_assert_eq(b, 3);
			cr_assert_eq(l, 1);
			cr_assert_eq(tt_int(p, "queue_depth"), 8);
			cr_assert_eq(tt_int(p, "intra_op_parallelism"), 4);
			cr_assert_not_null(obj(p, "final", NULL));
		}
	}
	cr_assert_eq(pool, 9);
	/* 8 io_uring points, 4 psync ones, and the best shape with the
	 * config's own aio settings. */
	cr_assert_eq(aio, 13);
	cr_assert(fin >= 2 && fin <= 3 * 3 + 1, "%u finalists", fin);
	cr_assert_eq(base, 1);
	best = obj(r, "best", NULL);
	cr_assert_leq(tt_int(best, "buffer_count") << 20, 3 * (3 << 20) * 2);
	cr_assert_gt(json_real_value(obj(best, "step_seconds", NULL)), 0);
	cr_assert_not_null(obj(r, "vs_baseline", NULL));

	/* The file: the config, the chosen keys in their sections, the old
	 * aio spelling gone, the rest as it was. */
	tt_config_is(out, best);
	cr_assert_eq(nvs_config_load(out, &c), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_config_offload(c, NVS_OFFLOAD_PARAM, &off), 0);
	cr_assert_eq(off.device, NVS_DEVICE_NVME);
	cr_assert_str_eq(off.nvme_path, tu_dir());
	cr_assert_eq(off.buffer_count, (uint64_t)tt_int(best, "buffer_count"));
	cr_assert_eq(off.buffer_size, 1u << 19);
	nvs_config_free(c);
	file = json_load_file(out, 0, NULL);
	cr_assert_not_null(file);
	cr_assert_eq(tt_int(file, "train_batch_size"), 8);
	cr_assert_eq(tt_int(obj(file, "zero_optimization", NULL), "stage"), 3);
	cr_assert_null(obj(file, "aio", "thread_count"));
	/* The snippet names only what was chosen: the config swaps to
	 * NVMe already, so no device or path. */
	op = obj(obj(r, "config", "zero_optimization"), "offload_param", NULL);
	cr_assert_eq(json_object_size(op), 2);
	cr_assert_eq(tt_int(op, "buffer_count"), tt_int(best, "buffer_count"));
	cr_assert_eq(tt_int(obj(r, "config", "nvswap"), "lookahead"),
		     tt_int(best, "lookahead"));
	serves(out, 4, 1 << 20, (unsigned)tt_int(best, "lookahead"));
	json_decref(file);
	json_decref(r);
	no_swap_files();
}

Test(nvswap_tune_swap, swap_is_the_default_with_a_config_and_seq_without)
{
	const char *cfg = tt_ds_config("ds.json", 3, 3u << 20);
	const char *out = tt_keep("seq.json"), *fresh = tt_keep("fresh.json");
	char real[4096];
	json_t *r, *p, *file;
	unsigned once = 0, twice = 0;
	struct tu_out o;
	size_t i;

	/* --quick: one step per point, one more for the faster half, down
	 * to 3; the full count in the final round. 3 layers: shapes 2:1
	 * 3:1,2 4:1,2 (lookahead at most 2), so 5 points timed once, the
	 * best 3 of them twice. */
	r = tt_tune_json("--config %s --layers 3 --tensor-size 512K "
			 "--sweep-config %s --loops 3 --quick --json",
			 cfg, tt_small_sweep());
	cr_assert_str_eq(json_string_value(obj(r, "workload", NULL)), "swap");
	cr_assert(json_is_true(obj(r, "quick", NULL)));
	json_array_foreach(obj(r, "results", NULL), i, p)
	{
		json_t *st = obj(p, "pool", "steps");
		once += st && json_integer_value(st) == 1;
		twice += st && json_integer_value(st) == 2;
		if (obj(p, "final", NULL))
			cr_assert_eq(tt_int(obj(p, "final", NULL), "steps"), 3);
	}
	cr_assert_eq(once, 2);
	cr_assert_eq(twice, 3);
	json_decref(r);

	/* --workload seq with the config: only the aio keys change in what
	 * it writes; the pool stays as the config had it. */
	r = tt_tune_json("--config %s --workload seq --sweep-config %s "
			 "--io-size 1M --loops 1 --json --write-config %s",
			 cfg, tt_small_sweep(), out);
	cr_assert_str_eq(json_string_value(obj(r, "workload", NULL)), "seq");
	tt_config_is(out, obj(r, "best", "combined"));
	file = json_load_file(out, 0, NULL);
	cr_assert_eq(tt_int(obj(obj(file, "zero_optimization", NULL),
				"offload_param", NULL),
			    "buffer_count"),
		     3);
	cr_assert_null(obj(file, "nvswap", "lookahead"));
	json_decref(file);
	json_decref(r);

	/* No config: DeepSpeed's budget, and a whole offload_param section
	 * (device, path) in a new file. */
	r = tt_tune_json("--nvme-path %s --workload swap --layers 2 "
			 "--tensor-size 256K --sweep-config %s --loops 1 "
			 "--quick --json --write-config %s",
			 tu_dir(), tt_small_sweep(), fresh);
	cr_assert_eq(tt_int(r, "max_pinned"), 5 * 100000000ll * 2);
	file = json_load_file(fresh, 0, NULL);
	cr_assert(json_equal(file, obj(r, "config", NULL)));
	p = obj(obj(file, "zero_optimization", NULL), "offload_param", NULL);
	cr_assert_not_null(realpath(tu_dir(), real));
	cr_assert_str_eq(json_string_value(obj(p, "device", NULL)), "nvme");
	cr_assert_str_eq(json_string_value(obj(p, "nvme_path", NULL)), real);
	cr_assert_eq(tt_int(p, "buffer_size"), 128 << 10);
	serves(fresh, 2, 256 << 10,
	       (unsigned)tt_int(obj(r, "best", NULL), "lookahead"));
	json_decref(file);
	json_decref(r);

	/* And the human form says where it went. */
	o = tt_tune(NULL,
		    "--config %s --layers 2 --tensor-size 256K --sweep-config "
		    "%s --loops 1 --quick --write-config %s",
		    cfg, tt_small_sweep(), out);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	cr_assert(strstr(o.out, "swap workload: 2 layers x 256K"), "%s", o.out);
	cr_assert(strstr(o.out, "tuned vs your config"), "%s", o.out);
	cr_assert(strstr(o.out, "with the chosen keys"), "%s", o.out);
	tu_out_free(&o);
	no_swap_files();
}

/* ------------------------------------------------------ bad input */

Test(nvswap_tune_swap, bad_input_is_refused_with_the_reason)
{
	const char *cfg = tt_ds_config("ds.json", 3, 1000000);
	const char *cpu = tt_keep("cpu.json");
	char want[8192];
	struct tu_out o;

	tt_refused(tt_tune(NULL, "--nvme-path %s --workload fast", tu_dir()), 2,
		   "--workload: 'fast' is not one of seq, swap");
	tt_refused(tt_tune(NULL, "--config %s", cfg), 2,
		   "the swap workload (the default with --config) needs the "
		   "model's layers, which a DeepSpeed config does not hold: "
		   "give --layers N and --tensor-size SIZE");
	tt_refused(tt_tune(NULL, "--nvme-path %s --workload swap --layers 4",
			   tu_dir()),
		   2,
		   "the swap workload needs the model's layers, which were "
		   "not given");
	tt_refused(
		tt_tune(NULL, "--config %s --layers 1 --tensor-size 1M", cfg),
		2, "--layers: '1' is out of range (from 2 to 1048576)");
	/* 3 x 1e6 elements x 2 bytes: not two 8 MiB layers. */
	snprintf(want, sizeof(want),
		 "--tensor-size 8M: no pool fits: the walk needs at least 2 "
		 "buffers of a layer (8.0 MiB), and the pinned memory allowed "
		 "is 5.7 MiB (offload_param.buffer_count 3 x buffer_size "
		 "1000000 x 2 bytes, %s); raise it with --max-pinned (at "
		 "least 16M) or give smaller layers",
		 cfg);
	tt_refused(
		tt_tune(NULL, "--config %s --layers 4 --tensor-size 8M", cfg),
		2, want);
	tt_refused(tt_tune(NULL,
			   "--nvme-path %s --workload swap --layers 4 "
			   "--tensor-size 1M --max-pinned 1M",
			   tu_dir()),
		   2, "is 1.0 MiB (--max-pinned 1M)");
	tt_refused(tt_tune(NULL,
			   "--config %s --layers 4 --tensor-size 1M --io-size "
			   "1M",
			   cfg),
		   2, "belong to the sequential sweep (--workload seq)");
	tt_refused(tt_tune(NULL, "--nvme-path %s --layers 4", tu_dir()), 2,
		   "--layers, --tensor-size and --max-pinned describe the "
		   "swap workload");
	tt_write_text(cpu, "{\"zero_optimization\": {\"offload_param\": "
			   "{\"device\": \"cpu\"}}}\n");
	tt_refused(
		tt_tune(NULL, "--config %s --layers 2 --tensor-size 1M", cpu),
		2,
		"--nvme-path is required: a directory on the disk to "
		"tune (the --config names none)");
	tt_refused(tt_tune(NULL,
			   "--config %s --nvme-path %s --layers 2 "
			   "--tensor-size 1M",
			   cpu, tu_dir()),
		   2,
		   "zero_optimization.offload_param.device is \"cpu\", not "
		   "\"nvme\"");
	tt_refused(tt_tune(NULL, "--config /nonexistent.json"), 1,
		   "nvswap-tune: --config: /nonexistent.json: No such file");
	tt_write_text(cpu, "{\"aio\": {\"blocksize\": 4096}}\n");
	tt_refused(tt_tune(NULL, "--config %s --nvme-path %s", cpu, tu_dir()),
		   2, "cpu.json:1:10: aio.blocksize: unknown key");
	/* An unwritable --write-config: refused before any walk. */
	o = tt_tune(NULL,
		    "--config %s --layers 2 --tensor-size 1M --max-pinned 8M "
		    "--write-config /nonexistent/dir/out",
		    cfg);
	cr_assert_eq(o.status, 1, "%s%s", o.out, o.err);
	cr_assert(strstr(o.err, "cannot create files in /nonexistent/dir"),
		  "%s", o.err);
	cr_assert_null(strstr(o.out, "pool:"), "no walk ran: %s", o.out);
	tu_out_free(&o);
	no_swap_files();
}

Test(nvswap_tune_swap, ctrl_c_removes_the_swap_files)
{
	char a0[] = "nvswap-tune", a1[] = "--nvme-path", a2[4096],
	     a3[] = "--workload", a4[] = "swap", a5[] = "--layers", a6[] = "8",
	     a7[] = "--tensor-size", a8[] = "8M", a9[] = "--loops",
	     a10[] = "20", a11[] = "--json";
	char *argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, NULL};

	snprintf(a2, sizeof(a2), "%s", tu_dir());
	/* "nvswap": the swapper's directory, made by the first walk */
	tt_interrupt(argv, "nvswap");
	no_swap_files();
}
