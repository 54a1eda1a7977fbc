/* SPDX-License-Identifier: MIT */
/*
 * struct nvs_config, shared by the loader's files: the jansson tree it
 * owns, the values read from it, its warnings, and where each key stands
 * in the text (positions.c fills that index).
 */
#ifndef NVS_CONFIG_CONFIG_IMPL_H
#define NVS_CONFIG_CONFIG_IMPL_H

#include "nvswap/config.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define MAX_WARNINGS 32
#define PATH_MAX_KEY 160

struct keypos {
	char path[PATH_MAX_KEY]; /* "zero_optimization.offload_param" */
	int line, col;
};

struct nvs_config {
	json_t *root;
	char name[256];
	struct nvs_offload_config off[2];
	struct nvs_aio_opts aio;
	bool use_gds;
	struct nvs_nvswap_config nv;
	char *warn[MAX_WARNINGS];
	unsigned nwarn;
	/* Positions of every key, from the text. */
	struct keypos *pos;
	size_t npos, cappos;
	bool oom; /* an index entry or a warning could not be allocated */
};

#endif /* NVS_CONFIG_CONFIG_IMPL_H */
