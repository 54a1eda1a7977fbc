/* SPDX-License-Identifier: MIT */
/*
 * The allocation seam: every heap allocation of the library goes through
 * here so tests can fail the n-th one and check that -ENOMEM comes back
 * clean.
 */
#ifndef NVS_INTERNAL_ALLOC_H
#define NVS_INTERNAL_ALLOC_H

#include <stddef.h>

void *nvs__malloc(size_t n);
void *nvs__calloc(size_t count, size_t n);
void *nvs__aligned_alloc(size_t align, size_t n);
void nvs__free(void *p);

/*
 * Test hook: make the @nth allocation from now on fail (1 = the next one),
 * 0 disarms. Returns how many allocations were made since the last call,
 * so a test can learn how many a call needs and then fail each in turn.
 */
unsigned long nvs__alloc_fail_at(unsigned long nth);

#endif
