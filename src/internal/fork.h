/* SPDX-License-Identifier: MIT */
/*
 * Objects that belong to the process that made them: a handle's and a
 * swapper's worker threads exist only there, so a forked child that used
 * its copy would wait forever for them. Each such object records the fork
 * generation it was born in; a call from another refuses at once.
 * Threading: any thread.
 */
#ifndef NVS_INTERNAL_FORK_H
#define NVS_INTERNAL_FORK_H

#include <errno.h>

/* How many fork()s lie between the library's first use and this process;
 * 0 in the process that first used it. The first call installs the
 * pthread_atfork handler that counts. */
unsigned long nvs__fork_gen(void);
/* Set nvs_last_error() for @call on an object of the parent and return
 * -ECHILD. */
int nvs__fork_refuse(const char *call, const char *what);

/* Return -ECHILD from @call when @obj (non-NULL, with a `born` field set
 * from nvs__fork_gen() at create) was made before a fork(). */
#define NVS__PARENT_ONLY(obj, call, what)                                      \
	do {                                                                   \
		if ((obj) && (obj)->born != nvs__fork_gen())                   \
			return nvs__fork_refuse((call), (what));               \
	} while (0)

#endif
