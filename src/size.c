// SPDX-License-Identifier: MIT
/* Byte sizes as people write them, by one rule for every size nvswap
 * reads (nvswap.torch's keywords follow it too, python/nvswap/torch/
 * _sizes.py): 4096; 64K, 2GiB binary; 5GB decimal, as transformers
 * reads it; 1Gb refused. */
#include "nvswap/common.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "internal/errors.h"

#define RULE                                                                   \
	"a size is a whole number of bytes with an optional unit: K, M, G, "   \
	"T or KiB, MiB, GiB, TiB are binary (2^10 to 2^40), KB, MB, GB, TB "   \
	"decimal (10^3 to 10^12, as transformers reads them); the unit's "     \
	"letter in either case; a lowercase b after it (1Gb, 100mb) is "       \
	"refused"

static int fail(int err, const char *s, const char *why)
{
	return nvs__err(err, "nvs_parse_size: '%.64s'%s: %s; " RULE, s,
			strlen(s) > 64 ? "..." : "", why);
}

int nvs_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *p = s, *u = NULL;
	uint64_t v = 0, mult = 1;
	unsigned power = 0;

	if (!s || !out)
		return nvs__err(-EINVAL, "nvs_parse_size: %s is NULL",
				s ? "out" : "the text");
	if (*s < '0' || *s > '9')
		return fail(-EINVAL, s, "not a size (digits first, e.g. 64K)");
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return fail(-ERANGE, s, "larger than 2^64 - 1 bytes");
		v = v * 10 + d;
	}
	if (*p)
		u = strchr(units, *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p);
	if (u) {
		bool binary = true;

		power = (unsigned)(u - units + 1);
		p++;
		if ((*p == 'i' || *p == 'I') && (p[1] == 'B' || p[1] == 'b'))
			p++;
		else if (*p == 'B' || *p == 'b')
			binary = false;
		if (*p == 'b' && !p[1])
			return fail(-EINVAL, s,
				    "ambiguous: a lowercase b is a bit to "
				    "some tools and a byte to others (Gb is "
				    "a gigabit to transformers, Gib a GiB): "
				    "write GB or GiB");
		if (*p == 'B')
			p++;
		for (unsigned i = 0; i < power; i++)
			mult = binary ? mult << 10 : mult * 1000;
	}
	if (*p)
		return fail(-EINVAL, s, "not a size");
	if (v > UINT64_MAX / mult)
		return fail(-ERANGE, s, "larger than 2^64 - 1 bytes");
	*out = v * mult;
	return 0;
}
