// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: nvs_parse_size() on the input as a C string, checked
 * against a second, independent reading of its header's grammar (digits,
 * an optional K/M/G/T in either case, then nothing or "iB"/"IB" (binary)
 * or "B" (decimal); a lowercase b refused): the same result, the same
 * value, @out untouched on failure.
 */
#include "fuzz.h"

#include <nvswap/nvswap.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The model: 0 and *out, -EINVAL or -ERANGE. The digits are read whole
 * first (an overflow there is -ERANGE whatever follows, as the parser
 * stops at it), then the rest must be a unit, then the product must fit. */
static int model(const char *s, uint64_t *out)
{
	static const char units[] = "kmgt";
	unsigned __int128 v = 0, mult = 1;
	size_t nd = strspn(s, "0123456789");
	const char *p = s + nd, *u;

	if (!nd)
		return -EINVAL;
	for (size_t i = 0; i < nd; i++) {
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > UINT64_MAX)
			return -ERANGE;
	}
	if (*p && (u = strchr(units, *p | 0x20)) && (*p | 0x20) == *u) {
		unsigned step = 1024;

		p++;
		if (!strcmp(p, "B"))
			step = 1000, p++;
		else if (!strcmp(p, "iB") || !strcmp(p, "IB"))
			p += 2;
		for (const char *x = units; x <= u; x++)
			mult *= step;
	}
	if (*p)
		return -EINVAL;
	v *= mult;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint64_t sentinel = 0x5a5a5a5a5a5a5a5aull;
	uint64_t got = sentinel, want = sentinel;
	char *s = malloc(size + 1);
	int r, m;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;
	r = nvs_parse_size(s, &got);
	m = model(s, &want);
	if (r != m || got != want) {
		fprintf(stderr,
			"'%s': nvs_parse_size %d %" PRIu64 ", model %d %" PRIu64
			"\n",
			s, r, got, m, want);
		abort();
	}
	if (r < 0)
		check(got == sentinel);
	/* Plain digits read back as themselves. */
	if (r == 0 && s[strspn(s, "0123456789")] == 0) {
		char buf[32];
		const char *digits = s + strspn(s, "0");

		snprintf(buf, sizeof(buf), "%" PRIu64, got);
		check(!strcmp(buf, *digits ? digits : "0"));
	}
	check(nvs_parse_size(NULL, &got) == -EINVAL);
	check(nvs_parse_size(s, NULL) == -EINVAL);
	free(s);
	return 0;
}
