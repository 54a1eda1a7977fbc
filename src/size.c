// SPDX-License-Identifier: MIT
/* Byte sizes as people write them: 4096, 64K, 100M, 2GiB, 1kb. */
#include "nvswap/common.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "internal/errors.h"

static int fail(int err, const char *s, const char *why)
{
	return nvs__err(err, "nvs_parse_size: '%.64s'%s: %s", s,
			strlen(s) > 64 ? "..." : "", why);
}

int nvs_parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	const char *p = s, *u;
	uint64_t v = 0;
	unsigned shift = 0;

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
	/* K, M, G, T in either case, alone or as KiB or KB (any case):
	 * all binary, as the header documents. */
	u = *p >= 'a' && *p <= 'z' ? strchr(units, *p - 'a' + 'A')
	    : *p		   ? strchr(units, *p)
				   : NULL;
	if (u) {
		shift = 10 * (unsigned)(u - units + 1);
		p++;
		if (!strcasecmp(p, "iB") || !strcasecmp(p, "B"))
			p += strlen(p);
	}
	if (*p)
		return fail(-EINVAL, s,
			    "not a size (a number with an optional K, M, G or "
			    "T suffix, e.g. 64K, 2GiB)");
	if (shift && v > (UINT64_MAX >> shift))
		return fail(-ERANGE, s, "larger than 2^64 - 1 bytes");
	*out = v << shift;
	return 0;
}
