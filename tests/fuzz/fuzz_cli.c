// SPDX-License-Identifier: MIT
/*
 * libFuzzer target: the command-line tools' shared argument parsers
 * (tools/tool.c: sizes, whole numbers, backend names) on arguments split
 * from the input at newlines, and the size and byte-count printers on
 * what they accept. An accepted argument must read back as itself. Each
 * argument, less its leading dashes, is also an option name for the
 * "did you mean" search (tool_closest_option) over a table shaped as the
 * tools' (dash spellings first, underscore aliases after).
 *
 * Input: byte 0 is the lower bound for tool_parse_uint() (0 or 1, as the
 * tools use) and picks a buffer length for the printers; the rest is
 * argv, one argument a line.
 */
#include "fuzz.h"

#include "tool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct option opts[] = {
	{"io-size", required_argument, NULL, 256},
	{"read", no_argument, NULL, 257},
	{"repeats", required_argument, NULL, 258},
	{"nvme-path", required_argument, NULL, 259},
	{"different-file-each-iteration", no_argument, NULL, 260},
	{"help", no_argument, NULL, 'h'},
	{"io_size", required_argument, NULL, 256},
	{"nvme_dir", required_argument, NULL, 259},
	{NULL, 0, NULL, 0},
};

/* The suggestion is a canonical (first) spelling, and an exact name, in
 * either spelling, suggests its own option. */
static void closest(const char *v)
{
	size_t len = strlen(v);
	const char *near = tool_closest_option(v, len, opts);
	int canon = -1, exact = -1;

	for (int i = 0; opts[i].name; i++) {
		bool same = strlen(opts[i].name) == len;

		for (size_t k = 0; same && k < len; k++)
			same = (v[k] == '_' ? '-' : v[k]) ==
			       (opts[i].name[k] == '_' ? '-' : opts[i].name[k]);
		if (same && exact < 0)
			exact = i;
		if (near && near == opts[i].name)
			canon = i;
	}
	if (near)
		check(canon >= 0 && canon < 6);
	if (exact >= 0) {
		check(near != NULL);
		check(opts[canon].val == opts[exact].val);
	}
}

static void one_arg(const char *v, unsigned lo, size_t buflen)
{
	char buf[64], *small;
	size_t n = 12345, back;
	uint64_t raw;
	unsigned u = 777;
	int b;

	if (tool_parse_size(v, &n) == 0) {
		check(n > 0);
		check(nvs_parse_size(v, &raw) == 0 && raw == n);
		/* What the tools print for a size parses back to it. */
		tool_size_str(n, buf, sizeof(buf));
		check(tool_parse_size(buf, &back) == 0 && back == n);
		tool_human(n, buf, sizeof(buf));
		check(strchr(buf, 'B') || strstr(buf, "bytes"));
	} else {
		check(n == 12345);
	}

	if (tool_parse_uint(v, lo, &u) == 0) {
		const char *digits = v + strspn(v, "0");

		check(u >= lo && u <= 1u << 20);
		/* Digits only: no sign, no space, no hex. */
		check(v[strspn(v, "0123456789")] == 0);
		snprintf(buf, sizeof(buf), "%u", u);
		check(!strcmp(buf, *digits ? digits : "0"));
	} else {
		check(u == 777);
	}

	closest(v + strspn(v, "-"));

	b = tool_backend(v);
	check(b >= -1 && b <= NVS_BACKEND_PSYNC);
	if (b >= 0)
		check(!strcmp(nvs_backend_name((enum nvs_backend)b), v));

	/* The printers truncate into any buffer, however short. */
	small = malloc(buflen ? buflen : 1);
	if (!small)
		return;
	if (nvs_parse_size(v, &raw) == 0) {
		tool_size_str(raw, small, buflen);
		tool_human(raw, small, buflen);
		if (buflen)
			check(strlen(small) < buflen);
	}
	free(small);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *args, *p, *nl;
	unsigned lo;
	size_t buflen;

	if (size < 1)
		return 0;
	lo = data[0] & 1;
	buflen = (size_t)(data[0] >> 1) % 24;
	args = malloc(size);
	if (!args)
		return 0;
	memcpy(args, data + 1, size - 1);
	args[size - 1] = 0;
	for (p = args;; p = nl + 1) {
		nl = strchr(p, '\n');
		if (nl)
			*nl = 0;
		one_arg(p, lo, buflen);
		if (!nl)
			break;
	}
	free(args);
	return 0;
}
