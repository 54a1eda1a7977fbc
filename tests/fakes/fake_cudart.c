// SPDX-License-Identifier: MIT
/*
 * A stand-in for libcudart with the three entry points nvswap uses, for
 * tests on machines without a GPU: it records every cudaHostRegister and
 * returns 0, or the error code in FAKE_CUDART_FAIL. The test reads the
 * record through fake_cudart_range(). Test double for fault injection
 * only: it stands in for a device this machine does not have.
 */
#include <stddef.h>
#include <stdlib.h>

#define MAX_RANGES 256

struct range {
	void *p;
	size_t n;
	unsigned flags;
	int live;
};

static struct range ranges[MAX_RANGES];
static size_t nranges;

int cudaHostRegister(void *p, size_t n, unsigned flags);
int cudaHostUnregister(void *p);
const char *cudaGetErrorString(int err);
size_t fake_cudart_calls(void);
int fake_cudart_range(size_t i, void **p, size_t *n, unsigned *flags);

int cudaHostRegister(void *p, size_t n, unsigned flags)
{
	const char *fail = getenv("FAKE_CUDART_FAIL");

	if (nranges < MAX_RANGES)
		ranges[nranges++] = (struct range){p, n, flags, 0};
	if (fail && atoi(fail))
		return atoi(fail);
	ranges[nranges - 1].live = 1;
	return 0;
}

int cudaHostUnregister(void *p)
{
	for (size_t i = 0; i < nranges; i++)
		if (ranges[i].p == p && ranges[i].live) {
			ranges[i].live = 0;
			return 0;
		}
	return 713; /* cudaErrorHostMemoryNotRegistered */
}

const char *cudaGetErrorString(int err)
{
	return err == 100 ? "no CUDA-capable device is detected (fake)"
			  : "fake error";
}

size_t fake_cudart_calls(void)
{
	return nranges;
}

int fake_cudart_range(size_t i, void **p, size_t *n, unsigned *flags)
{
	if (i >= nranges)
		return -1;
	*p = ranges[i].p;
	*n = ranges[i].n;
	*flags = ranges[i].flags;
	return ranges[i].live;
}
