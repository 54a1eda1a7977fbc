// SPDX-License-Identifier: MIT
/* Allocation seam with a fault-injection hook for tests. */
#include "internal/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Counts allocations; fail_at pairs with it (0 = disarmed). Relaxed: the
 * hook is a test device, ordering with other memory does not matter. */
static atomic_ulong alloc_count;
static atomic_ulong fail_at;

static int should_fail(void)
{
	unsigned long n = atomic_fetch_add_explicit(&alloc_count, 1,
						    memory_order_relaxed) +
			  1;
	unsigned long f = atomic_load_explicit(&fail_at, memory_order_relaxed);
	return f != 0 && n == f;
}

unsigned long nvs__alloc_fail_at(unsigned long nth)
{
	unsigned long used =
		atomic_exchange_explicit(&alloc_count, 0, memory_order_relaxed);
	atomic_store_explicit(&fail_at, nth, memory_order_relaxed);
	return used;
}

void *nvs__malloc(size_t n)
{
	return should_fail() ? NULL : malloc(n ? n : 1);
}

void *nvs__calloc(size_t count, size_t n)
{
	return should_fail() ? NULL : calloc(count ? count : 1, n ? n : 1);
}

bool nvs__reserve(void *arrayp, size_t *cap, size_t n, size_t need, size_t size)
{
	size_t c = *cap;
	void *old, *nv;

	if (need <= c)
		return true;
	c = c > SIZE_MAX / 2 / size ? need : c * 2;
	if (c < need)
		c = need;
	if (c > SIZE_MAX / size)
		return false;
	nv = nvs__malloc(c * size);
	if (!nv)
		return false;
	memcpy(&old, arrayp, sizeof(old));
	if (n)
		memcpy(nv, old, n * size);
	nvs__free(old);
	memcpy(arrayp, &nv, sizeof(nv));
	*cap = c;
	return true;
}

void nvs__free(void *p)
{
	free(p);
}
