/* SPDX-License-Identifier: MIT */
/*
 * The allocation seam: every heap allocation of the library goes through
 * here so tests can fail the n-th one and check that -ENOMEM comes back
 * clean.
 */
#ifndef NVS_INTERNAL_ALLOC_H
#define NVS_INTERNAL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

void *nvs__malloc(size_t n);
void *nvs__calloc(size_t count, size_t n);
void nvs__free(void *p);

/*
 * @arrayp is the address of a pointer to an array of @n elements of @size
 * bytes with room for *@cap: make room for at least @need, at least
 * doubling. false, with nothing changed, when memory runs out. Through
 * the seam, so tests can fail it. (A void * rather than a void **: the
 * pointer is read and written with memcpy, whatever its element type.)
 */
bool nvs__reserve(void *arrayp, size_t *cap, size_t n, size_t need,
		  size_t size);

/*
 * Test hook: make the @nth allocation from now on fail (1 = the next one),
 * 0 disarms. Returns how many allocations were made since the last call,
 * so a test can learn how many a call needs and then fail each in turn.
 */
unsigned long nvs__alloc_fail_at(unsigned long nth);

#endif
