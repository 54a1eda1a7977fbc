// SPDX-License-Identifier: MIT
/*
 * Every public function that can fail says so in nvs_last_error(), with a
 * sentence naming the call: an older sentence never survives a new
 * failure. The table lists each such function (NVS_API in
 * include/nvswap/ headers) with one way to make it fail; a test reads the
 * headers so that a new function without a row fails here.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/nvswap.h"

static struct nvs_pool *pool; /* one buffer, taken: empty */
static void *taken;

static int neg(const void *p)
{
	return p ? 0 : -1;
}

/* One way to make each function fail; returns the function's result
 * (negative on failure; pointer calls map NULL to -1). */
#define ROW(fn, call)                                                          \
	static int row_##fn(void)                                              \
	{                                                                      \
		return (call);                                                 \
	}
ROW(nvs_aio_create, nvs_aio_create(NULL, NULL))
ROW(nvs_aio_submit, nvs_aio_submit(NULL, NULL, NULL))
ROW(nvs_aio_submit_wait, nvs_aio_submit_wait(NULL, NULL))
ROW(nvs_aio_wait_op, nvs_aio_wait_op(NULL, 1))
ROW(nvs_aio_poll_op, nvs_aio_poll_op(NULL, 1))
ROW(nvs_aio_wait, nvs_aio_wait(NULL))
ROW(nvs_aio_pread, nvs_aio_pread(NULL, NULL, 1, "x", 0, false))
ROW(nvs_aio_pwrite, nvs_aio_pwrite(NULL, NULL, 1, "x", 0, false))
ROW(nvs_aio_sync_pread, nvs_aio_sync_pread(NULL, NULL, 1, "x", 0))
ROW(nvs_aio_sync_pwrite, nvs_aio_sync_pwrite(NULL, NULL, 1, "x", 0))
ROW(nvs_aio_async_pread, nvs_aio_async_pread(NULL, NULL, 1, "x", 0))
ROW(nvs_aio_async_pwrite, nvs_aio_async_pwrite(NULL, NULL, 1, "x", 0))
ROW(nvs_aio_pread_fd, nvs_aio_pread_fd(NULL, NULL, 1, 0, 0, false))
ROW(nvs_aio_pwrite_fd, nvs_aio_pwrite_fd(NULL, NULL, 1, 0, 0, false))
ROW(nvs_aio_get_stats, nvs_aio_get_stats(NULL, NULL))
ROW(nvs_aio_set_queue_limit, nvs_aio_set_queue_limit(NULL, 1))
ROW(nvs_aio_new_cpu_locked_buffer, neg(nvs_aio_new_cpu_locked_buffer(NULL, 1)))
ROW(nvs_aio_free_cpu_locked_buffer, nvs_aio_free_cpu_locked_buffer(NULL, NULL))
ROW(nvs_dio_alignment, nvs_dio_alignment(-1, NULL))
ROW(nvs_aio_read, nvs_aio_read(NULL, 1, NULL, NULL, false, NULL))
ROW(nvs_aio_write, nvs_aio_write(NULL, 1, NULL, NULL, false, NULL))
ROW(nvs_pinned_alloc, neg(nvs_pinned_alloc(0, NULL)))
ROW(nvs_pinned_stats, nvs_pinned_stats(NULL))
ROW(nvs_pool_create, nvs_pool_create(NULL, NULL))
ROW(nvs_pool_destroy, nvs_pool_destroy(pool))
ROW(nvs_pool_get, nvs_pool_get(NULL, NULL))
ROW(nvs_pool_try_get, nvs_pool_try_get(pool, &(void *){NULL}))
ROW(nvs_pool_get_timeout, nvs_pool_get_timeout(pool, &(void *){NULL}, 1))
ROW(nvs_pool_put, nvs_pool_put(NULL, NULL))
ROW(nvs_pool_stats, nvs_pool_stats(NULL, NULL))
ROW(nvs_parse_size, nvs_parse_size("16E", &(uint64_t){0}))
ROW(nvs_config_load, nvs_config_load(NULL, NULL))
ROW(nvs_config_load_string, nvs_config_load_string(NULL, NULL, NULL))
ROW(nvs_config_offload, nvs_config_offload(NULL, NVS_OFFLOAD_PARAM, NULL))
ROW(nvs_config_aio_opts, nvs_config_aio_opts(NULL, NULL))
ROW(nvs_config_nvswap, nvs_config_nvswap(NULL, NULL))
ROW(nvs_config_swapper_opts,
    nvs_config_swapper_opts(NULL, NVS_OFFLOAD_PARAM, 0, NULL))
ROW(nvs_param_swapper_create, nvs_param_swapper_create(NULL, NULL, NULL))
ROW(nvs_param_add_layer, nvs_param_add_layer(NULL, 0, 1, NULL, NULL))
ROW(nvs_param_add_layer_where,
    nvs_param_add_layer_where(NULL, 0, 1, NULL, NULL, false))
ROW(nvs_param_prefetch_layer, nvs_param_prefetch_layer(NULL, 0))
ROW(nvs_param_set_walk, nvs_param_set_walk(NULL, 0, NULL))
ROW(nvs_param_acquire_layer, nvs_param_acquire_layer(NULL, 0, NULL))
ROW(nvs_param_release_layer, nvs_param_release_layer(NULL, 0, false))
ROW(nvs_param_evict_layer, nvs_param_evict_layer(NULL, 0))
ROW(nvs_param_swapper_stats, nvs_param_swapper_stats(NULL, NULL))
ROW(nvs_optim_swapper_create, nvs_optim_swapper_create(NULL, NULL, NULL))
ROW(nvs_optim_add_group, nvs_optim_add_group(NULL, 0, 1, NULL, NULL))
ROW(nvs_optim_swap_in, nvs_optim_swap_in(NULL, 0, NULL))
ROW(nvs_optim_swap_out, nvs_optim_swap_out(NULL, 0))
ROW(nvs_grad_swapper_create, nvs_grad_swapper_create(NULL, NULL, NULL))
ROW(nvs_grad_add_group, nvs_grad_add_group(NULL, 0, 1))
ROW(nvs_grad_write, nvs_grad_write(NULL, 0, 0, NULL, 1, NVS_GRAD_ASSIGN))
ROW(nvs_grad_flush, nvs_grad_flush(NULL, 0))
ROW(nvs_grad_acquire, nvs_grad_acquire(NULL, 0, NULL))
ROW(nvs_grad_release, nvs_grad_release(NULL, 0))
ROW(nvs_grad_zero, nvs_grad_zero(NULL, 0))
ROW(nvs_swapper_create, nvs_swapper_create(NULL, NULL))
ROW(nvs_swapper_register, nvs_swapper_register(NULL, 1, 1, NULL))
ROW(nvs_swapper_unregister, nvs_swapper_unregister(NULL, 1))
ROW(nvs_swapper_prefetch, nvs_swapper_prefetch(NULL, 1))
ROW(nvs_swapper_try_prefetch, nvs_swapper_try_prefetch(NULL, 1))
ROW(nvs_swapper_acquire, nvs_swapper_acquire(NULL, 1, NULL))
ROW(nvs_swapper_acquire_blank, nvs_swapper_acquire_blank(NULL, 1, NULL))
ROW(nvs_swapper_release, nvs_swapper_release(NULL, 1, false))
ROW(nvs_swapper_evict, nvs_swapper_evict(NULL, 1))
ROW(nvs_swapper_wait, nvs_swapper_wait(NULL, 1))
ROW(nvs_swapper_wait_all, nvs_swapper_wait_all(NULL))
ROW(nvs_swapper_stats, nvs_swapper_stats(NULL, NULL))
ROW(nvs_swapper_info, nvs_swapper_info(NULL, 1, NULL))
ROW(nvs_swapper_read, nvs_swapper_read(NULL, 1, NULL, 0))
ROW(nvs_swapper_checkpoint, nvs_swapper_checkpoint(NULL, "t"))
ROW(nvs_swapper_checkpoint_wait, nvs_swapper_checkpoint_wait(NULL))
ROW(nvs_swapper_generations, nvs_swapper_generations(NULL, NULL, 0))
ROW(nvs_swapper_unsaved, nvs_swapper_unsaved(NULL))
ROW(nvs_swapper_step_begin, nvs_swapper_step_begin(NULL, "s"))
ROW(nvs_swapper_step_end, nvs_swapper_step_end(NULL))
ROW(nvs_swapper_step_open, nvs_swapper_step_open(NULL, "s", 0, 0, 0))
ROW(nvs_swapper_step_undo, nvs_swapper_step_undo(NULL))
ROW(nvs_swapper_set_tag, nvs_swapper_set_tag(NULL, 1, NULL, 0))
ROW(nvs_swapper_get_tag, nvs_swapper_get_tag(NULL, 1, NULL, 0))
ROW(nvs_swapper_list, nvs_swapper_list(NULL, NULL, 0))
ROW(nvs_swapset_check, nvs_swapset_check(NULL, 0, NULL, NULL))
ROW(nvs_swapset_list, nvs_swapset_list(NULL, NULL, NULL))
ROW(nvs_swapset_relocate, nvs_swapset_relocate(NULL, "/a", "/b"))
ROW(nvs_swapper_add_file, nvs_swapper_add_file(NULL, "/a", 0))
ROW(nvs_swapper_share_disk, nvs_swapper_share_disk(NULL, "/a"))
ROW(nvs_swapper_register_file, nvs_swapper_register_file(NULL, 1, 1, NULL, 0))
ROW(nvs_param_add_layer_file, nvs_param_add_layer_file(NULL, 0, 1, NULL, NULL))
ROW(nvs_ckpt_writer_open, nvs_ckpt_writer_open(NULL, NULL, NULL))
ROW(nvs_ckpt_write, nvs_ckpt_write(NULL, NULL, 1))
ROW(nvs_ckpt_close, nvs_ckpt_close(NULL))
ROW(nvs_ckpt_write_async, nvs_ckpt_write_async(NULL, NULL, 1, NULL))
ROW(nvs_ckpt_wait, nvs_ckpt_wait(NULL))
/* GPU support off first (the rows run in order, in one process), so the
 * GPU rows fail alike with and without a GPU. */
ROW(nvs_gpu_open, (setenv("NVSWAP_GPU", "off", 1), nvs_gpu_open()))
ROW(nvs_gpu_malloc, nvs_gpu_malloc(0, 0, NULL))
ROW(nvs_gpu_free, nvs_gpu_free(&pool))
ROW(nvs_gpu_memcpy, nvs_gpu_memcpy(NULL, NULL, 1))
ROW(nvs_gpu_memset, nvs_gpu_memset(&pool, 0, 1))
ROW(nvs_gpu_info, nvs_gpu_info(NULL))
ROW(nvs_gds_open, nvs_gds_open())
ROW(nvs_gds_register, nvs_gds_register(&pool, 1))
ROW(nvs_gds_deregister, nvs_gds_deregister(&pool))
ROW(nvs_launch_detect, nvs_launch_detect(NULL))
/* Two more ways nvs_parse_size fails (finding 9). */
static int row_parse_20_digits(void)
{
	return nvs_parse_size("99999999999999999999", &(uint64_t){0});
}
static int row_parse_null(void)
{
	return nvs_parse_size(NULL, NULL);
}

struct row {
	const char *name;
	int (*fail)(void);
	const char *says; /* the call the sentence names, if not @name */
};
#define R(fn)                                                                  \
	{                                                                      \
#fn, row_##fn, NULL                                            \
	}
/* The handle's read and write calls are forms of nvs_aio_submit (its
 * header says so) and fail in it, with its name. */
#define SUBMIT(fn)                                                             \
	{                                                                      \
#fn, row_##fn, "nvs_aio_submit"                                \
	}
static const struct row rows[] = {
	R(nvs_aio_create),
	R(nvs_aio_submit),
	SUBMIT(nvs_aio_submit_wait),
	R(nvs_aio_wait_op),
	R(nvs_aio_poll_op),
	R(nvs_aio_wait),
	SUBMIT(nvs_aio_pread),
	SUBMIT(nvs_aio_pwrite),
	SUBMIT(nvs_aio_sync_pread),
	SUBMIT(nvs_aio_sync_pwrite),
	SUBMIT(nvs_aio_async_pread),
	SUBMIT(nvs_aio_async_pwrite),
	SUBMIT(nvs_aio_pread_fd),
	SUBMIT(nvs_aio_pwrite_fd),
	R(nvs_aio_get_stats),
	R(nvs_aio_set_queue_limit),
	R(nvs_aio_new_cpu_locked_buffer),
	R(nvs_aio_free_cpu_locked_buffer),
	R(nvs_dio_alignment),
	R(nvs_aio_read),
	R(nvs_aio_write),
	R(nvs_pinned_alloc),
	R(nvs_pinned_stats),
	R(nvs_pool_create),
	R(nvs_pool_destroy),
	R(nvs_pool_get),
	R(nvs_pool_try_get),
	R(nvs_pool_get_timeout),
	R(nvs_pool_put),
	R(nvs_pool_stats),
	R(nvs_parse_size),
	{"nvs_parse_size", row_parse_20_digits},
	{"nvs_parse_size", row_parse_null},
	R(nvs_config_load),
	R(nvs_config_load_string),
	R(nvs_config_offload),
	R(nvs_config_aio_opts),
	R(nvs_config_nvswap),
	R(nvs_config_swapper_opts),
	R(nvs_param_swapper_create),
	R(nvs_param_add_layer),
	R(nvs_param_add_layer_where),
	R(nvs_param_prefetch_layer),
	R(nvs_param_set_walk),
	R(nvs_param_acquire_layer),
	R(nvs_param_release_layer),
	R(nvs_param_evict_layer),
	R(nvs_param_swapper_stats),
	R(nvs_optim_swapper_create),
	R(nvs_optim_add_group),
	R(nvs_optim_swap_in),
	R(nvs_optim_swap_out),
	R(nvs_grad_swapper_create),
	R(nvs_grad_add_group),
	R(nvs_grad_write),
	R(nvs_grad_flush),
	R(nvs_grad_acquire),
	R(nvs_grad_release),
	R(nvs_grad_zero),
	R(nvs_swapper_create),
	R(nvs_swapper_register),
	R(nvs_swapper_unregister),
	R(nvs_swapper_prefetch),
	R(nvs_swapper_try_prefetch),
	R(nvs_swapper_acquire),
	R(nvs_swapper_acquire_blank),
	R(nvs_swapper_release),
	R(nvs_swapper_evict),
	R(nvs_swapper_wait),
	R(nvs_swapper_wait_all),
	R(nvs_swapper_stats),
	R(nvs_swapper_info),
	R(nvs_swapper_read),
	R(nvs_swapper_checkpoint),
	R(nvs_swapper_checkpoint_wait),
	R(nvs_swapper_generations),
	R(nvs_swapper_unsaved),
	R(nvs_swapper_step_begin),
	R(nvs_swapper_step_end),
	R(nvs_swapper_step_open),
	R(nvs_swapper_step_undo),
	R(nvs_swapper_set_tag),
	R(nvs_swapper_get_tag),
	R(nvs_swapper_list),
	R(nvs_swapset_check),
	R(nvs_swapset_list),
	R(nvs_swapset_relocate),
	R(nvs_swapper_add_file),
	R(nvs_swapper_share_disk),
	R(nvs_swapper_register_file),
	R(nvs_param_add_layer_file),
	R(nvs_ckpt_writer_open),
	R(nvs_ckpt_write),
	R(nvs_ckpt_close),
	R(nvs_ckpt_write_async),
	R(nvs_ckpt_wait),
	R(nvs_gpu_open),
	R(nvs_gpu_malloc),
	R(nvs_gpu_free),
	R(nvs_gpu_memcpy),
	R(nvs_gpu_memset),
	R(nvs_gpu_info),
	R(nvs_gds_open),
	R(nvs_gds_register),
	R(nvs_gds_deregister),
	R(nvs_launch_detect),
};

/*
 * Public functions that cannot fail, or fail only on an I/O error no
 * argument can provoke (destroy reports a failed write-back) or in a
 * forked child (-ECHILD, test_hostile.c): void, bool, getters, string
 * lookups.
 */
static const char *const cannot_fail[] = {
	"nvs_aio_opts_init",
	"nvs_aio_destroy",
	"nvs_aio_get_block_size",
	"nvs_aio_get_queue_depth",
	"nvs_aio_get_queue_limit",
	"nvs_aio_queue_share",
	"nvs_aio_get_single_submit",
	"nvs_aio_get_overlap_events",
	"nvs_aio_get_intra_op_parallelism",
	"nvs_aio_get_alignment",
	"nvs_backend_name",
	"nvs_backend_reason_name",
	"nvs_aio_backend_name",
	"nvs_aio_is_pinned",
	"nvs_pinned_free",
	"nvs_pinned_contains",
	"nvs_pinned_set_limit",
	"nvs_pinned_allow_unpinned",
	"nvs_pinned_cuda_status",
	"nvs_pool_opts_init",
	"nvs_pool_buffer_size",
	"nvs_pool_buffer_count",
	"nvs_copy",
	"nvs_copy_mt",
	"nvs_copy_impl",
	"nvs_last_error",
	"nvs_strerror",
	"nvs_config_free",
	"nvs_config_use_gds",
	"nvs_config_warning",
	"nvs_launch_share_queue",
	"nvs_param_swapper_opts_init",
	"nvs_param_swapper_destroy",
	"nvs_param_layer_in_cpu",
	"nvs_optim_swapper_opts_init",
	"nvs_optim_swapper_destroy",
	"nvs_grad_swapper_opts_init",
	"nvs_grad_swapper_destroy",
	"nvs_swapper_opts_init",
	"nvs_persist_name",
	"nvs_swapper_destroy",
	"nvs_swapper_discard",
	"nvs_swapper_dir",
	"nvs_version",
	"nvs_build_features",
	"nvs_ckpt_opts_init",
	"nvs_ckpt_offset",
	"nvs_ckpt_temp_path",
	"nvs_ckpt_abort",
	"nvs_ckpt_async_done",
	"nvs_gpu_pointer",    /* 1, 0, or -EIO from the driver */
	"nvs_gds_registered", /* bool */
};

/* @name appears in @s as a whole word ("nvs_aio_pread" not matched by
 * "nvs_aio_pread_fd"). */
static bool names(const char *s, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = strstr(s, name); p; p = strstr(p + 1, name))
		if (!isalnum((unsigned char)p[n]) && p[n] != '_')
			return true;
	return false;
}

static void empty_pool(void)
{
	struct nvs_pool_opts o;

	nvs_pool_opts_init(&o);
	o.buffer_size = 4096;
	o.buffer_count = 1;
	o.allow_unpinned = true;
	cr_assert_eq(nvs_pool_create(&o, &pool), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_pool_get(pool, &taken), 0);
}

static void give_back(void)
{
	cr_assert_eq(nvs_pool_put(pool, taken), 0);
	cr_assert_eq(nvs_pool_destroy(pool), 0);
}

Test(last_error, every_public_failure_sets_a_sentence_naming_the_call,
     .init = empty_pool, .fini = give_back)
{
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		/* An older sentence from another call, to be replaced. */
		if (strcmp(r->name, "nvs_aio_wait"))
			cr_assert_eq(nvs_aio_wait(NULL), -EINVAL);
		else
			cr_assert_eq(nvs_parse_size(NULL, NULL), -EINVAL);
		cr_expect_lt(r->fail(), 0, "%s did not fail", r->name);
		cr_expect(names(nvs_last_error(), r->says ? r->says : r->name),
			  "%s: the sentence does not name it: '%s'", r->name,
			  nvs_last_error());
	}
}

/* Every NVS_API function in the public headers has a row above or is
 * listed as one that cannot fail. */
Test(last_error, every_public_function_is_in_the_table)
{
	static const char *const hdrs[] = {
		"aio",	   "buffers", "common", "config", "offload", "swapper",
		"swapset", "version", "ckpt",	"gpu",	  "backing"};
	unsigned seen = 0;

	for (size_t h = 0; h < sizeof(hdrs) / sizeof(hdrs[0]); h++) {
		char path[PATH_MAX], line[512];
		bool api = false;
		FILE *f;

		snprintf(path, sizeof(path), "%s/include/nvswap/%s.h",
			 NVS_SOURCE_ROOT, hdrs[h]);
		f = fopen(path, "r");
		cr_assert_not_null(f, "%s", path);
		while (fgets(line, sizeof(line), f)) {
			char *p, *q;
			bool found = false;

			if (!strncmp(line, "NVS_API", 7))
				api = true;
			if (!api || !(p = strstr(line, "nvs_")) ||
			    !(q = strchr(p, '(')))
				continue;
			api = false;
			*q = '\0';
			for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]);
			     i++)
				found |= !strcmp(rows[i].name, p);
			for (size_t i = 0;
			     i < sizeof(cannot_fail) / sizeof(cannot_fail[0]);
			     i++)
				found |= !strcmp(cannot_fail[i], p);
			cr_expect(found, "%s (%s.h) has no row in the table", p,
				  hdrs[h]);
			seen++;
		}
		fclose(f);
	}
	cr_assert_gt(seen, 90, "read %u declarations", seen);
}

Test(last_error, strerror_of_int_min_and_an_empty_copy_are_defined)
{
	cr_assert_str_eq(nvs_strerror(INT_MIN), "unknown error");
	cr_assert_str_eq(nvs_strerror(INT_MAX), "unknown error");
	nvs_copy(NULL, NULL, 0);
	nvs_copy_mt(NULL, NULL, 0, 4);
}
