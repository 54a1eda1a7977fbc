// SPDX-License-Identifier: MIT
/*
 * Bad input to the swap manager, the config loader and the role swappers
 * (test_bad_input.c has the aio handle, one-shot calls and buffers): NULL
 * pointers, bad paths, read-only filesystems, empty and directory
 * configs. Each call gets its exact -errno and names itself in
 * nvs_last_error(). docs/bad-input-table.md lists every row.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#include "bad_input.h"
#include "nvswap/config.h"
#include "nvswap/offload.h"
#include "nvswap/swapper.h"
#include "testutil.h"

static void teardown(void)
{
	tu_cleanup();
}

TestSuite(bad_input_swap, .fini = teardown);

/* ------------------------------------------------------------ swapper */

enum { BUF = 64 << 10 };

static void sw_opts(struct nvs_swapper_opts *o, const char *path)
{
	nvs_swapper_opts_init(o);
	o->npaths = 1;
	o->nvme_paths[0] = path;
	o->buffer_size = BUF;
	o->buffer_count = 2;
	o->aio.queue_depth = 8;
}

static struct nvs_swapper *sw(void)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	sw_opts(&o, tu_dir());
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

Test(bad_input_swap, swapper_null_arguments_not_covered_elsewhere_are_einval)
{
	struct nvs_swapper *s = sw();
	struct nvs_tensor_info info;
	struct nvs_swap_stats st;

	FAILS(nvs_swapper_try_prefetch(NULL, 1), -EINVAL,
	      "nvs_swapper_try_prefetch");
	FAILS(nvs_swapper_info(NULL, 1, &info), -EINVAL, "nvs_swapper_info");
	FAILS(nvs_swapper_stats(s, NULL), -EINVAL, "nvs_swapper_stats");
	FAILS(nvs_swapper_stats(NULL, &st), -EINVAL, "nvs_swapper_stats");
	cr_assert_null(nvs_swapper_dir(NULL, 0));
	FAILS(nvs_swapper_try_prefetch(s, 77), -ENOENT,
	      "nvs_swapper_try_prefetch");
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}

Test(bad_input_swap,
     swapper_register_from_an_unaligned_buffer_reads_back_exactly)
{
	enum { N = 10001 };
	struct nvs_swapper *s = sw();
	unsigned char *d = tu_alloc(N, 3);
	void *p;

	tu_fill(d, N, 21);
	cr_assert_eq(nvs_swapper_register(s, 1, N, d), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 1, &p), 0, "%s", nvs_last_error());
	cr_assert(memcmp(p, d, N) == 0);
	cr_assert_eq(nvs_swapper_release(s, 1, false), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	tu_free(d);
}

Test(bad_input_swap, swapper_bad_path_arguments)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (struct nvs_swapper *)&s;
	unsigned char *d;
	const char *f = data_file("plain", 10, 1, &d);

	sw_opts(&o, NULL);
	FAILS(nvs_swapper_create(&o, &s), -EINVAL, "nvs_swapper_create");
	cr_assert_null(s);
	sw_opts(&o, tu_dir());
	o.npaths = NVS_SWAPPER_MAX_PATHS + 1;
	FAILS(nvs_swapper_create(&o, &s), -EINVAL, "nvs_swapper_create");
	sw_opts(&o, tu_dir());
	o.buffer_size = 0;
	FAILS(nvs_swapper_create(&o, &s), -EINVAL, "nvs_swapper_create");
	sw_opts(&o, f);
	FAILS(nvs_swapper_create(&o, &s), -ENOTDIR, f);
	cr_assert_null(s);
	free(d);
}

Test(bad_input_swap, swapper_on_a_read_only_filesystem_is_erofs)
{
	const char *mnt = tu_path("ro");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (struct nvs_swapper *)&s;

	if (!tu_mount_private(mnt, "tmpfs", MS_RDONLY, "size=1m"))
		cr_skip_test("cannot mount a tmpfs here (%s): needs root and "
			     "CAP_SYS_ADMIN",
			     strerror(errno));
	sw_opts(&o, mnt);
	FAILS(nvs_swapper_create(&o, &s), -EROFS, mnt);
	cr_assert_null(s);
	umount2(mnt, MNT_DETACH);
}

/* ------------------------------------------------------------- config */

Test(bad_input_swap, config_path_that_is_a_directory_is_einval)
{
	struct nvs_config *c = (struct nvs_config *)&c;

	FAILS(nvs_config_load(tu_dir(), &c), -EINVAL, "not a regular file");
	cr_assert(strstr(nvs_last_error(), tu_dir()), "%s", nvs_last_error());
	cr_assert_null(c);
}

Test(bad_input_swap, config_empty_file_is_einval)
{
	struct nvs_config *c = (struct nvs_config *)&c;
	const char *p = tu_path("empty.json");

	tu_write_file(p, "", 0);
	FAILS(nvs_config_load(p, &c), -EINVAL, p);
	cr_assert_null(c);
}

Test(bad_input_swap, config_null_arguments_not_covered_elsewhere_are_einval)
{
	struct nvs_config *c = NULL;
	struct nvs_aio_opts ao;
	struct nvs_swapper_opts so;

	FAILS(nvs_config_load_string("{}", NULL, NULL), -EINVAL,
	      "nvs_config_load_string");
	FAILS(nvs_config_aio_opts(NULL, &ao), -EINVAL, "nvs_config_aio_opts");
	cr_assert_eq(nvs_config_load_string("{}", NULL, &c), 0);
	nvs_swapper_opts_init(&so);
	FAILS(nvs_config_swapper_opts(NULL, NVS_OFFLOAD_PARAM, 0, &so), -EINVAL,
	      "nvs_config_swapper_opts");
	FAILS(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, NULL), -EINVAL,
	      "nvs_config_swapper_opts");
	/* -1 is NVS_RANK_AUTO: -2 is the smallest negative refused. */
	FAILS(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, -2, &so), -EINVAL,
	      "nvs_config_swapper_opts");
	nvs_config_free(c);
}

/* ------------------------------------------------------------ offload */

Test(bad_input_swap, offload_null_swappers_are_einval_or_no_ops)
{
	struct nvs_optim_swapper_opts oo;
	struct nvs_grad_swapper_opts go;
	struct nvs_optim_swapper *op = (struct nvs_optim_swapper *)&op;
	struct nvs_grad_swapper *g = (struct nvs_grad_swapper *)&g;
	void *ptr[1];
	const void *cptr[1];
	size_t sz[1] = {4};

	nvs_optim_swapper_opts_init(&oo);
	nvs_grad_swapper_opts_init(&go);
	FAILS(nvs_optim_swapper_create(NULL, &oo, &op), -EINVAL,
	      "nvs_optim_swapper_create");
	cr_assert_null(op);
	FAILS(nvs_grad_swapper_create(NULL, &go, &g), -EINVAL,
	      "nvs_grad_swapper_create");
	cr_assert_null(g);
	cr_assert_eq(nvs_optim_swapper_destroy(NULL), 0);
	cr_assert_eq(nvs_grad_swapper_destroy(NULL), 0);
	FAILS(nvs_param_prefetch_layer(NULL, 0), -EINVAL,
	      "nvs_param_prefetch_layer");
	FAILS(nvs_param_acquire_layer(NULL, 0, ptr), -EINVAL,
	      "nvs_param_acquire_layer");
	FAILS(nvs_param_set_walk(NULL, 0, NULL), -EINVAL, "nvs_param_set_walk");
	FAILS(nvs_param_release_layer(NULL, 0, false), -EINVAL,
	      "nvs_param_release_layer");
	FAILS(nvs_param_evict_layer(NULL, 0), -EINVAL, "nvs_param_evict_layer");
	cr_assert_not(nvs_param_layer_in_cpu(NULL, 0));
	FAILS(nvs_optim_swap_in(NULL, 0, ptr), -EINVAL, "nvs_optim_swap_in");
	FAILS(nvs_optim_swap_out(NULL, 0), -EINVAL, "nvs_optim_swap_out");
	FAILS(nvs_grad_flush(NULL, 0), -EINVAL, "nvs_grad_flush");
	FAILS(nvs_grad_acquire(NULL, 0, cptr), -EINVAL, "nvs_grad_acquire");
	FAILS(nvs_grad_release(NULL, 0), -EINVAL, "nvs_grad_release");
	FAILS(nvs_grad_zero(NULL, 0), -EINVAL, "nvs_grad_zero");
	FAILS(nvs_param_add_layer(NULL, 0, 1, sz, NULL), -EINVAL,
	      "nvs_param_add_layer");
	FAILS(nvs_optim_add_group(NULL, 0, 1, sz, NULL), -EINVAL,
	      "nvs_optim_add_group");
	FAILS(nvs_grad_add_group(NULL, 0, 100), -EINVAL, "nvs_grad_add_group");
	FAILS(nvs_grad_write(NULL, 0, 0, sz, 4, NVS_GRAD_ASSIGN), -EINVAL,
	      "nvs_grad_write");
}

Test(bad_input_swap, offload_null_size_array_and_grad_null_data_are_einval)
{
	struct nvs_swapper_opts so;
	struct nvs_swapper *s = NULL;
	struct nvs_param_swapper_opts po;
	struct nvs_grad_swapper_opts go;
	struct nvs_param_swapper *p;
	struct nvs_grad_swapper *g;

	sw_opts(&so, tu_dir());
	cr_assert_eq(nvs_swapper_create(&so, &s), 0, "%s", nvs_last_error());
	nvs_param_swapper_opts_init(&po);
	nvs_grad_swapper_opts_init(&go);
	cr_assert_eq(nvs_param_swapper_create(s, &po, &p), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_grad_swapper_create(s, &go, &g), 0, "%s",
		     nvs_last_error());
	FAILS(nvs_param_add_layer(p, 0, 1, NULL, NULL), -EINVAL,
	      "nvs_param_add_layer");
	cr_assert_eq(nvs_grad_add_group(g, 0, 100), 0, "%s", nvs_last_error());
	FAILS(nvs_grad_write(g, 0, 0, NULL, 4, NVS_GRAD_ASSIGN), -EINVAL,
	      "nvs_grad_write");
	cr_assert_eq(nvs_grad_swapper_destroy(g), 0);
	cr_assert_eq(nvs_param_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
