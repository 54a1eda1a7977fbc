/* SPDX-License-Identifier: MIT */
/* The aio handle's options: checking the caller's and filling defaults. */
#ifndef NVS_AIO_OPTS_H
#define NVS_AIO_OPTS_H

#include "nvswap/aio.h"

/*
 * Copy @in (NULL: defaults) into @o, check every field and fill the
 * defaults of those left 0; *@why says who chose the backend. 0, or
 * -EINVAL with a sentence naming the option.
 */
int nvs__aio_opts_check(struct nvs_aio_opts *o, const struct nvs_aio_opts *in,
			enum nvs_backend_reason *why);

#endif
