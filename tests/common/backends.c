// SPDX-License-Identifier: MIT
/*
 * Which backends can run here: prints the available ones on stdout (for
 * make test, which runs the integration suite once on each) and why the
 * others cannot on stderr.
 *
 *   nvs-test-backends
 */
#include <stdio.h>

#include "aio/engine.h"

int main(void)
{
	static const struct {
		enum nvs_backend b;
		const char *name;
	} all[] = {{NVS_BACKEND_IO_URING, "io_uring"},
		   {NVS_BACKEND_LIBAIO, "libaio"},
		   {NVS_BACKEND_PSYNC, "psync"}};
	char why[256];

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		why[0] = 0;
		if (nvs__engine_probe(all[i].b, 128, why, sizeof(why)) == 0)
			printf("%s\n", all[i].name);
		else
			fprintf(stderr, "backend %s unavailable: %s\n",
				all[i].name, why);
	}
	return 0;
}
