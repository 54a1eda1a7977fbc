/* SPDX-License-Identifier: MIT */
/*
 * One JSON string escape decoded as jansson decodes it, so that the config
 * loader's position index (positions.c) names a key written with escapes
 * ("\u0061io") the way jansson's tree does ("aio").
 */
#ifndef NVS_CONFIG_UNESCAPE_H
#define NVS_CONFIG_UNESCAPE_H

#include <stddef.h>

/*
 * nvs__json_unescape() - the escape at @p, just after its backslash.
 * @p:   the text; stops at a NUL, never reads past it.
 * @out: receives the character in UTF-8 (1 to 4 bytes).
 * Return: how many bytes of @p the escape takes (at least 1 unless @p is
 * at its end, then 0); *@len receives the bytes written to @out. A
 * malformed escape (jansson refuses those first) reads as its own bytes.
 */
size_t nvs__json_unescape(const char *p, char out[4], size_t *len);

#endif /* NVS_CONFIG_UNESCAPE_H */
