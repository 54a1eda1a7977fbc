// SPDX-License-Identifier: MIT
/*
 * Deliberate defects for the sanitizer canaries (tests/canary/run.sh): each
 * mode commits one error that the sanitizer of its build must report. A
 * sanitizer run whose canary goes unreported proves nothing, so make test
 * fails it (see the Makefile's test-asan and test-tsan).
 *
 *   nvs-canary leak | overflow | ub | race
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Written by both threads of the race, with no lock: the race itself. */
static long racy;
/* Keeps the compiler from proving the defects away. */
static volatile int sink;

/* Many blocks whose only pointer is overwritten at once: nothing left in
 * a register, on the stack or in a global can keep them all reachable. */
static __attribute__((noinline)) void leak(void)
{
	for (int i = 0; i < 64; i++) {
		char *volatile p = malloc(4096 + (size_t)i);

		if (p)
			memset(p, i, 16);
		p = NULL;
	}
}

static __attribute__((noinline)) void overflow(void)
{
	char *volatile p = malloc(16);

	if (p)
		sink = p[16]; /* one byte past the block */
	free(p);
}

static __attribute__((noinline)) void ub(void)
{
	volatile int big = INT_MAX;

	sink = big + 1; /* signed overflow */
}

static void *bump(void *arg)
{
	(void)arg;
	racy++;
	return NULL;
}

static void race(void)
{
	pthread_t a, b;

	if (pthread_create(&a, NULL, bump, NULL) ||
	    pthread_create(&b, NULL, bump, NULL))
		exit(2);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	sink = (int)racy;
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";

	if (!strcmp(m, "leak"))
		leak();
	else if (!strcmp(m, "overflow"))
		overflow();
	else if (!strcmp(m, "ub"))
		ub();
	else if (!strcmp(m, "race"))
		race();
	else {
		fprintf(stderr, "usage: nvs-canary leak|overflow|ub|race\n");
		return 2;
	}
	return 0;
}
