// SPDX-License-Identifier: MIT
/* The run-time version string. */
#include "nvswap/version.h"

const char *nvs_version(void)
{
	return NVS_VERSION_STRING;
}
