/* SPDX-License-Identifier: MIT */
/* Test helpers for the checkpoint writer's Criterion tests: temp files
 * left in a folder, a file's exact bytes, small writer options. */
#ifndef NVS_TU_CKPT_H
#define NVS_TU_CKPT_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/ckpt.h"
#include "testutil.h"

/* Files in @dir whose name contains ".tmp.". */
static inline unsigned tu_temps_in(const char *dir)
{
	unsigned n = 0;
	struct dirent *e;
	DIR *d = opendir(dir);

	cr_assert_not_null(d, "%s", dir);
	while ((e = readdir(d)))
		n += strstr(e->d_name, ".tmp.") != NULL;
	closedir(d);
	return n;
}

/* The file holds exactly @n bytes equal to @ref. */
static inline void tu_assert_file(const char *path, const void *ref, size_t n)
{
	size_t got;
	void *back = tu_read_file(path, &got);

	cr_assert_eq(got, n, "%s: %zu bytes, want %zu", path, got, n);
	cr_assert(n == 0 || !memcmp(back, ref, n), "%s: bytes differ", path);
	free(back);
}

/* Defaults with @count staging buffers of @bufsize bytes. */
static inline struct nvs_ckpt_opts tu_ckpt_opts(size_t bufsize, unsigned count)
{
	struct nvs_ckpt_opts o;

	nvs_ckpt_opts_init(&o);
	o.buffer_size = bufsize;
	o.buffer_count = count;
	return o;
}

#endif
