// SPDX-License-Identifier: MIT
/*
 * Linked against the shared libnvswap, as applications are: pinned memory
 * works and the process's malloc is untouched. With --preloaded the test
 * runs under LD_PRELOAD=libjemalloc.so.2 (an application that uses
 * jemalloc as its malloc): that jemalloc stays the malloc, nvswap's
 * private copy coexists with it, and neither sees the other's arenas.
 * Prints "N passed, N failed".
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/nvswap.h"
#include "check.h"

typedef int (*mallctl_fn)(const char *, void *, size_t *, void *, size_t);

static unsigned app_arenas(mallctl_fn mallctl)
{
	unsigned n = 0;
	size_t sz = sizeof(n);

	mallctl("arenas.narenas", &n, &sz, NULL, 0);
	return n;
}

int main(int argc, char **argv)
{
	bool preloaded = argc > 1 && !strcmp(argv[1], "--preloaded");
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *self = dlopen("libnvswap.so.0", RTLD_NOW | RTLD_NOLOAD);
	void *app_mallctl = dlsym(RTLD_DEFAULT, "mallctl");
	mallctl_fn mallctl = NULL;
	unsigned narenas = 0;
	struct nvs_pinned_stats st;

	CHECK(libc && self, "libc and libnvswap are loaded");
	CHECK(dlsym(self, "nvs_pinned_alloc") != NULL, "public API exported");
	CHECK(dlsym(self, "nvs__je_mallocx") == NULL &&
		      dlsym(self, "nvs__je_malloc_conf_2_conf_harder") ==
			      NULL &&
		      dlsym(self, "nvs__pinned_alloc") == NULL,
	      "no library-internal symbol exported");
	if (preloaded) {
		void *je = dlopen("libjemalloc.so.2", RTLD_NOW | RTLD_NOLOAD);
		CHECK(je != NULL, "jemalloc preloaded");
		CHECK(dlsym(RTLD_DEFAULT, "malloc") == dlsym(je, "malloc"),
		      "the application's jemalloc is its malloc");
		memcpy(&mallctl, &app_mallctl, sizeof(app_mallctl));
		narenas = app_arenas(mallctl);
	} else {
		CHECK(dlsym(RTLD_DEFAULT, "malloc") == dlsym(libc, "malloc"),
		      "glibc's malloc");
		CHECK(app_mallctl == NULL, "no jemalloc API in the process");
	}

	for (int i = 0; i < 200; i++) {
		size_t n = (size_t)(i % 7 == 0 ? (3 << 20) + i : 1000 + i * 97);
		char *m = malloc(n), *p = nvs_pinned_alloc(n, NULL);
		CHECK(m && p, "allocation %d", i);
		if (!m || !p)
			break;
		memset(m, 1, n);
		memset(p, 2, n);
		CHECK(nvs_pinned_contains(p, n) && !nvs_pinned_contains(m, 1),
		      "only pinned memory is pinned");
		free(m);
		nvs_pinned_free(p);
	}
	nvs_pinned_stats(&st);
	CHECK(st.live_allocations == 0 && st.bad_frees == 0, "all freed");
	if (preloaded)
		CHECK(app_arenas(mallctl) == narenas,
		      "nvswap's arenas are its own, not the application's");
	return check_report();
}
