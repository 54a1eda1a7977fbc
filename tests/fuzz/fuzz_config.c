// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: nvs_config_load_string() on arbitrary text, then every
 * accessor and nvs_config_swapper_opts() on what it made, checking that an
 * accepted config holds only values in range and a refused one says why.
 * No I/O beyond the stat(2) and access(2) the loader makes of nvme paths.
 */
#include "fuzz.h"

#include <nvswap/nvswap.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME "<fuzz>"

static void check_offload(const struct nvs_config *cfg,
			  enum nvs_offload_kind which)
{
	struct nvs_offload_config o;
	struct nvs_swapper_opts so;
	int ret;

	check(nvs_config_offload(cfg, which, &o) == 0);
	check(o.device == NVS_DEVICE_NONE || o.device == NVS_DEVICE_CPU ||
	      o.device == NVS_DEVICE_NVME);
	check(o.buffer_count >= 1 && o.buffer_size >= 1);
	check(!o.nvme_path || *o.nvme_path);
	if (o.device == NVS_DEVICE_NVME)
		check(o.present && o.nvme_path);

	nvs_swapper_opts_init(&so);
	ret = nvs_config_swapper_opts(cfg, which, 0, &so);
	check(ret == 0 || ret == -EINVAL);
	if (ret < 0) {
		check(*nvs_last_error());
		return;
	}
	check(o.device == NVS_DEVICE_NVME);
	check(so.elem_size == (which == NVS_OFFLOAD_PARAM ? 2u : 4u));
	check(so.buffer_size == o.buffer_size * so.elem_size);
	check(so.buffer_count == o.buffer_count);
	check(so.npaths >= 1 && so.npaths <= NVS_CONFIG_MAX_PATHS);
	for (unsigned i = 0; i < so.npaths; i++)
		check(so.nvme_paths[i] && *so.nvme_paths[i]);
}

static void check_config(const struct nvs_config *cfg)
{
	struct nvs_aio_opts aio;
	struct nvs_nvswap_config nv;
	const char *w;
	unsigned i;

	check(nvs_config_aio_opts(cfg, &aio) == 0);
	check(aio.block_size >= 512 && aio.block_size % 512 == 0 &&
	      aio.block_size <= NVS_AIO_MAX_BLOCK_SIZE);
	check(aio.queue_depth >= 1 &&
	      aio.queue_depth <= NVS_AIO_MAX_QUEUE_DEPTH);
	check(aio.intra_op_parallelism >= 1 &&
	      aio.intra_op_parallelism <= NVS_AIO_MAX_PARALLELISM);
	check(nvs_config_nvswap(cfg, &nv) == 0);
	check(nv.backend >= NVS_BACKEND_AUTO &&
	      nv.backend <= NVS_BACKEND_PSYNC);
	check(nv.stripe_size >= 1);
	check(nv.npaths <= NVS_CONFIG_MAX_PATHS);
	for (i = 0; i < nv.npaths; i++)
		check(nv.nvme_paths[i] && *nv.nvme_paths[i]);
	if (nv.backend != NVS_BACKEND_AUTO)
		check(aio.backend == nv.backend);
	(void)nvs_config_use_gds(cfg);
	for (i = 0; (w = nvs_config_warning(cfg, i)); i++)
		check(!strncmp(w, NAME ":", strlen(NAME ":")));
	check(i <= 32);
	check_offload(cfg, NVS_OFFLOAD_PARAM);
	check_offload(cfg, NVS_OFFLOAD_OPTIMIZER);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nvs_config *cfg = (struct nvs_config *)1;
	char *text = malloc(size + 1);
	int ret;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0; /* the text ends at the first NUL, as a C string */
	ret = nvs_config_load_string(text, NAME, &cfg);
	if (ret == 0) {
		check(cfg);
		check_config(cfg);
	} else {
		const char *e = nvs_last_error();

		check(!cfg);
		/* The header's list, and what stat(2) adds for a path that
		 * is too long or loops. */
		check(ret == -EINVAL || ret == -ENOENT || ret == -EACCES ||
		      ret == -EROFS || ret == -ENOTDIR || ret == -ENOMEM ||
		      ret == -ENAMETOOLONG || ret == -ELOOP);
		check(*e);
		if (ret == -EINVAL)
			check(!strncmp(e, NAME ":", strlen(NAME ":")));
	}
	nvs_config_free(cfg);
	free(text);
	return 0;
}
