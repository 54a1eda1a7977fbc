// SPDX-License-Identifier: MIT
/* JSON string escapes decoded as jansson does (see unescape.h). */
#include "config/unescape.h"

#include <string.h>

/* The four hex digits at @p, or -1 (a NUL among them ends the check). */
static long hex4(const char *p)
{
	long v = 0;

	for (int i = 0; i < 4; i++) {
		char c = p[i];

		if (c >= '0' && c <= '9')
			v = v << 4 | (c - '0');
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			v = v << 4 | ((c | 0x20) - 'a' + 10);
		else
			return -1;
	}
	return v;
}

static size_t utf8(unsigned long cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t nvs__json_unescape(const char *p, char out[4], size_t *len)
{
	static const char from[] = "bfnrt", to[] = "\b\f\n\r\t";
	const char *e;
	long cp, lo;

	*len = 0;
	if (!*p)
		return 0;
	if (*p != 'u') {
		e = strchr(from, *p);
		out[0] = e ? to[e - from] : *p; /* \" \\ \/ are themselves */
		*len = 1;
		return 1;
	}
	cp = hex4(p + 1);
	if (cp < 0) {
		out[0] = 'u';
		*len = 1;
		return 1;
	}
	/* A surrogate pair is one character. */
	if (cp >= 0xD800 && cp < 0xDC00 && p[5] == '\\' && p[6] == 'u' &&
	    (lo = hex4(p + 7)) >= 0xDC00 && lo < 0xE000) {
		*len = utf8(0x10000 + ((unsigned long)(cp - 0xD800) << 10) +
				    (unsigned long)(lo - 0xDC00),
			    out);
		return 11;
	}
	*len = utf8((unsigned long)cp, out);
	return 5;
}
