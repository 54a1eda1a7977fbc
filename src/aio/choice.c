// SPDX-License-Identifier: MIT
/*
 * The backend a handle tries (see choice.h). An explicit choice in the
 * options is the caller's decision and an environment variable set for a
 * whole test run or job must not silently replace it; NVSWAP_BACKEND only
 * steers the probe of a caller who left the choice to nvswap. The names of
 * backends and of reasons live here too.
 */
#include "aio/choice.h"
#include "internal/errors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int nvs__backend_choose(enum nvs_backend *b, enum nvs_backend_reason *why)
{
	const char *v = getenv("NVSWAP_BACKEND");

	if (*b != NVS_BACKEND_AUTO) {
		*why = NVS_BACKEND_BY_OPTS;
		return 0;
	}
	*why = NVS_BACKEND_BY_PROBE;
	if (!v || !*v || !strcmp(v, "auto"))
		return 0;
	if (!strcmp(v, "libaio"))
		*b = NVS_BACKEND_LIBAIO;
	else if (!strcmp(v, "psync"))
		*b = NVS_BACKEND_PSYNC;
	else if (!strcmp(v, "io_uring"))
		*b = NVS_BACKEND_IO_URING;
	else
		return nvs__err(-EINVAL,
				"nvs_aio_create: NVSWAP_BACKEND=%s is not one "
				"of auto, io_uring, libaio, psync",
				v);
	*why = NVS_BACKEND_BY_ENV;
	return 0;
}

const char *nvs_backend_name(enum nvs_backend b)
{
	switch (b) {
	case NVS_BACKEND_IO_URING:
		return "io_uring";
	case NVS_BACKEND_LIBAIO:
		return "libaio";
	case NVS_BACKEND_PSYNC:
		return "psync";
	default:
		return "auto";
	}
}

const char *nvs_backend_reason_name(enum nvs_backend_reason why)
{
	switch (why) {
	case NVS_BACKEND_BY_PROBE:
		return "probe";
	case NVS_BACKEND_BY_OPTS:
		return "explicit";
	case NVS_BACKEND_BY_ENV:
		return "NVSWAP_BACKEND";
	}
	return "unknown";
}
