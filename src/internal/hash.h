/* SPDX-License-Identifier: MIT */
/*
 * The only includer of uthash. uthash's default on out-of-memory ends the process;
 * here it sets a flag the caller checks (nvs__hash_oom), and its memory
 * comes through the allocation seam.
 */
#ifndef NVS_INTERNAL_HASH_H
#define NVS_INTERNAL_HASH_H

#include "internal/alloc.h"

extern _Thread_local int nvs__hash_oom;

#define uthash_malloc(sz) nvs__malloc(sz)
#define uthash_free(ptr, sz) nvs__free(ptr)
#define uthash_nonfatal_oom(obj) (nvs__hash_oom = 1)
#define HASH_NONFATAL_OOM 1

/* FNV-1a over the key's bytes, in place of uthash's Jenkins hash, whose
 * switch falls through between labels (clang's -Wimplicit-fallthrough,
 * an error in the fuzz tree). Keys are short: tensor ids are 8 bytes. */
static inline unsigned nvs__hash_bytes(const void *key, unsigned len)
{
	const unsigned char *p = key;
	unsigned h = 2166136261u;

	while (len--)
		h = (h ^ *p++) * 16777619u;
	return h;
}
#define HASH_FUNCTION(keyptr, keylen, hashv)                                   \
	((hashv) = nvs__hash_bytes((keyptr), (unsigned)(keylen)))

#include <uthash.h>

#endif
