/* SPDX-License-Identifier: MIT */
/*
 * The config's checked sections (zero_optimization's offload sections,
 * aio, nvswap): a table per section says each key's type and where its
 * value goes.
 */
#ifndef NVS_CONFIG_SCHEMA_H
#define NVS_CONFIG_SCHEMA_H

#include "config/config_impl.h"

/*
 * nvs__config_load_sections() - check every key of the checked sections
 * of @c->root and read their values into @c, over its defaults. Keys
 * outside those sections are ignored.
 * Return: 0, -EINVAL (or a stat/access -errno for a directory) with
 * nvs_last_error() naming the key's position, or -ENOMEM.
 */
int nvs__config_load_sections(struct nvs_config *c);

#endif /* NVS_CONFIG_SCHEMA_H */
