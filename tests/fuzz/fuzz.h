/* SPDX-License-Identifier: MIT */
/* What every libFuzzer target here shares: its entry point, and check(),
 * which reports a broken invariant the way libFuzzer sees one (abort). */
#ifndef NVS_FUZZ_H
#define NVS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: invariant broken: %s\n",       \
				__FILE__, __LINE__, #cond);                    \
			abort();                                               \
		}                                                              \
	} while (0)

#endif
