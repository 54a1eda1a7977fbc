/* SPDX-License-Identifier: MIT */
/*
 * Where every key of a loaded config stands in its text (jansson keeps no
 * positions for values), and the "NAME:LINE:COL: PATH: what" errors and
 * warnings built from that index.
 */
#ifndef NVS_CONFIG_POSITIONS_H
#define NVS_CONFIG_POSITIONS_H

#include "config/config_impl.h"

/*
 * nvs__config_index_positions() - record the line and column of every
 * object key in @text, by its dotted path, in @c->pos. @text was accepted
 * by jansson. Out of memory sets @c->oom.
 */
void nvs__config_index_positions(struct nvs_config *c, const char *text);

/*
 * nvs__config_bad() - set nvs_last_error() to "NAME:LINE:COL: PATH: what"
 * about @path (0:0 when the index lacks it).
 * Return: @err.
 */
int nvs__config_bad(const struct nvs_config *c, int err, const char *path,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * nvs__config_warn() - add the warning "NAME:LINE:COL: PATH: what" to @c;
 * past MAX_WARNINGS it is dropped, out of memory sets @c->oom.
 */
void nvs__config_warn(struct nvs_config *c, const char *path, const char *fmt,
		      ...) __attribute__((format(printf, 3, 4)));

#endif /* NVS_CONFIG_POSITIONS_H */
