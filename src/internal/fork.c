// SPDX-License-Identifier: MIT
/*
 * The fork generation: a counter the child side of a pthread_atfork
 * handler bumps, so an object can tell it is used in a process other than
 * its maker's without a getpid() system call per op.
 */
#include "internal/fork.h"
#include "internal/errors.h"

#include <pthread.h>
#include <stdatomic.h>

/* Written only by the child handler, which runs while the child has one
 * thread; relaxed is enough: every later read is in that thread or in
 * threads it starts afterwards (pthread_create orders them). */
static atomic_ulong gen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	atomic_fetch_add_explicit(&gen, 1, memory_order_relaxed);
}

static void install(void)
{
	pthread_atfork(NULL, NULL, on_fork_child);
}

unsigned long nvs__fork_gen(void)
{
	pthread_once(&once, install);
	return atomic_load_explicit(&gen, memory_order_relaxed);
}

int nvs__fork_refuse(const char *call, const char *what)
{
	return nvs__err(-ECHILD,
			"%s: this %s was made by the parent process before "
			"fork(); its worker threads exist only there, so a "
			"forked child cannot use it (create one in the child)",
			call, what);
}
