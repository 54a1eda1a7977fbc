// SPDX-License-Identifier: MIT
// The umbrella header compiles as C++ and links with C linkage.
#include <nvswap/nvswap.h>

int main()
{
	nvs_aio_opts o;
	nvs_aio_opts_init(&o);
	return o.block_size == 1u << 20 && nvs_version() != nullptr ? 0 : 1;
}
