// SPDX-License-Identifier: MIT
/* The run-time version string, and what this build was made with. */
#include "nvswap/version.h"

#include "config.h"

const char *nvs_version(void)
{
	return NVS_VERSION_STRING;
}

const char *nvs_build_features(void)
{
	static const char features[] =
		"io_uring (liburing " NVS_BUILD_LIBURING "), libaio, psync; "
		"statx DIO alignment: "
#if HAVE_STATX_DIOALIGN
		"yes"
#else
		"no (the device's logical block size is used)"
#endif
		"; pinned arena on a private jemalloc " NVS_BUILD_JEMALLOC
		"; CUDA registration: the runtime is loaded at run time when "
		"present; build " NVS_BUILD_TYPE
		", sanitizers " NVS_BUILD_SANITIZE;

	return features;
}
