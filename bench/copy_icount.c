// SPDX-License-Identifier: MIT
/*
 * A fixed loop of copies for counting instructions with callgrind, which
 * is repeatable where timing is not: what nvs_copy adds to memcpy below
 * its streaming window.
 *
 *   valgrind --tool=callgrind nvswap-bench-copy-icount SIZE memcpy|nvs_copy
 *
 * Compare the two "Collected" totals; each run makes 100,000 copies.
 */
#include <nvswap/nvswap.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COPIES 100000

static char src[4 << 20], dst[4 << 20];

int main(int argc, char **argv)
{
	size_t n = argc > 2 ? (size_t)atol(argv[1]) : 0;
	bool nvs = argc > 2 && !strcmp(argv[2], "nvs_copy");

	if (n == 0 || n > sizeof(src) ||
	    (!nvs && (argc < 3 || strcmp(argv[2], "memcpy")))) {
		fprintf(stderr, "usage: %s SIZE memcpy|nvs_copy\n", argv[0]);
		return 2;
	}
	nvs_copy(dst, src, 1); /* one-time setup outside the loop's count */
	for (int i = 0; i < COPIES; i++) {
		if (nvs)
			nvs_copy(dst, src, n);
		else
			memcpy(dst, src, n);
		__asm__ volatile("" : : : "memory");
	}
	return 0;
}
