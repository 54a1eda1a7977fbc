// SPDX-License-Identifier: MIT
/*
 * CUDA registration of pinned memory. Without a GPU here, a stand-in
 * runtime (tests/fakes/fake_cudart.c, loaded through NVSWAP_CUDART)
 * records what nvswap registers and can refuse; the last test uses the
 * machine's real libcudart when it has one. The suite's environment turns
 * CUDA off (NVSWAP_CUDA=off); each test here decides for itself, before
 * its first pinned allocation (each runs in a fresh process).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nvswap/buffers.h"
#include "testutil.h"

typedef size_t (*calls_fn)(void);
typedef int (*range_fn)(size_t, void **, size_t *, unsigned *);

static const char *fake_path(void)
{
	const char *p = getenv("NVSWAP_TEST_FAKE_CUDART");

	cr_assert_not_null(p, "meson sets NVSWAP_TEST_FAKE_CUDART");
	return p;
}

static void use_fake(const char *fail)
{
	unsetenv("NVSWAP_CUDA");
	setenv("NVSWAP_CUDART", fake_path(), 1);
	if (fail)
		setenv("FAKE_CUDART_FAIL", fail, 1);
	else
		unsetenv("FAKE_CUDART_FAIL");
}

static void *fake_sym(const char *name)
{
	void *lib = dlopen(fake_path(), RTLD_NOW | RTLD_NOLOAD);
	void *s;

	cr_assert_not_null(lib, "the fake runtime was loaded by nvswap");
	s = dlsym(lib, name);
	cr_assert_not_null(s);
	dlclose(lib);
	return s;
}

/* Is [p, p + n) inside one range the fake registered? */
static bool registered(const void *p, size_t n)
{
	calls_fn calls;
	range_fn range;
	void *rp, *cs = fake_sym("fake_cudart_calls"),
		  *rs = fake_sym("fake_cudart_range");

	memcpy(&calls, &cs, sizeof(cs));
	memcpy(&range, &rs, sizeof(rs));
	for (size_t i = 0; i < calls(); i++) {
		size_t rn;
		unsigned flags;
		if (range(i, &rp, &rn, &flags) != 1)
			continue;
		cr_assert_eq(flags, 1, "cudaHostRegisterPortable");
		if ((uintptr_t)p >= (uintptr_t)rp &&
		    (uintptr_t)p + n <= (uintptr_t)rp + rn)
			return true;
	}
	return false;
}

static size_t fake_calls(void)
{
	calls_fn calls;
	void *cs = fake_sym("fake_cudart_calls");

	memcpy(&calls, &cs, sizeof(cs));
	return calls();
}

TestSuite(cuda, .fini = tu_cleanup);

Test(cuda, nothing_is_looked_for_before_the_first_allocation)
{
	struct nvs_pinned_stats st;

	use_fake(NULL);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.cuda, NVS_CUDA_UNKNOWN);
	cr_assert(strstr(nvs_pinned_cuda_status(), "not looked for yet"));
	cr_assert_null(dlopen(fake_path(), RTLD_NOW | RTLD_NOLOAD));
}

Test(cuda, every_pinned_mapping_is_registered)
{
	struct nvs_pinned_stats st;
	char *big, *small;

	use_fake(NULL);
	big = nvs_pinned_alloc(8u << 20, NULL);
	small = nvs_pinned_alloc(5000, NULL);
	cr_assert_not_null(big);
	cr_assert_not_null(small);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.cuda, NVS_CUDA_ACTIVE, "%s", nvs_pinned_cuda_status());
	cr_assert(strstr(nvs_pinned_cuda_status(), fake_path()), "%s",
		  nvs_pinned_cuda_status());
	cr_assert_eq(st.cuda_registered_bytes, st.bytes_locked);
	cr_assert(registered(big, 8u << 20));
	cr_assert(registered(small, 5000));
	/* Freed memory stays registered for reuse: no new registration. */
	size_t calls = fake_calls();
	nvs_pinned_free(big);
	cr_assert_eq(nvs_pinned_alloc(8u << 20, NULL), big);
	cr_assert_eq(fake_calls(), calls);
	nvs_pinned_free(big);
	nvs_pinned_free(small);
}

Test(cuda, a_refusing_runtime_turns_registration_off_not_allocation)
{
	struct nvs_pinned_stats st;
	char *a, *b;

	use_fake("100");
	a = nvs_pinned_alloc(4u << 20, NULL);
	cr_assert_not_null(a, "%s", nvs_last_error());
	b = nvs_pinned_alloc(6u << 20, NULL);
	cr_assert_not_null(b);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.cuda, NVS_CUDA_FAILED);
	cr_assert_eq(st.cuda_registered_bytes, 0);
	cr_assert(strstr(nvs_pinned_cuda_status(), "error 100"), "%s",
		  nvs_pinned_cuda_status());
	cr_assert(strstr(nvs_pinned_cuda_status(), "no CUDA-capable device"));
	cr_assert_eq(fake_calls(), 1, "not asked again after refusing");
	cr_assert(nvs_pinned_contains(a, 4u << 20), "still pinned");
	nvs_pinned_free(a);
	nvs_pinned_free(b);
}

Test(cuda, off_in_the_environment)
{
	struct nvs_pinned_stats st;
	void *p;

	use_fake(NULL);
	setenv("NVSWAP_CUDA", "off", 1);
	p = nvs_pinned_alloc(4096, NULL);
	cr_assert_not_null(p);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.cuda, NVS_CUDA_OFF);
	cr_assert(strstr(nvs_pinned_cuda_status(), "NVSWAP_CUDA=off"));
	cr_assert_null(dlopen(fake_path(), RTLD_NOW | RTLD_NOLOAD),
		       "the runtime was not even loaded");
	nvs_pinned_free(p);
}

Test(cuda, a_missing_runtime_is_absent)
{
	struct nvs_pinned_stats st;
	void *p;

	unsetenv("NVSWAP_CUDA");
	setenv("NVSWAP_CUDART", "/nonexistent/libcudart.so", 1);
	p = nvs_pinned_alloc(4096, NULL);
	cr_assert_not_null(p);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.cuda, NVS_CUDA_ABSENT);
	cr_assert(strstr(nvs_pinned_cuda_status(), "no CUDA runtime found"),
		  "%s", nvs_pinned_cuda_status());
	cr_assert_eq(st.cuda_registered_bytes, 0);
	nvs_pinned_free(p);
}

Test(cuda, a_library_without_the_entry_points_is_absent)
{
	struct nvs_pinned_stats st;
	void *p;

	unsetenv("NVSWAP_CUDA");
	setenv("NVSWAP_CUDART", "libc.so.6", 1); /* loads, no CUDA in it */
	p = nvs_pinned_alloc(4096, NULL);
	cr_assert_not_null(p);
	nvs_pinned_stats(&st);
	cr_assert_eq(st.cuda, NVS_CUDA_ABSENT);
	cr_assert(strstr(nvs_pinned_cuda_status(), "has no cudaHostRegister"),
		  "%s", nvs_pinned_cuda_status());
	nvs_pinned_free(p);
}

Test(cuda, the_real_runtime_when_this_machine_has_one)
{
	struct nvs_pinned_stats st;
	void *p;

	unsetenv("NVSWAP_CUDA");
	unsetenv("NVSWAP_CUDART");
	p = nvs_pinned_alloc(4u << 20, NULL);
	cr_assert_not_null(p, "%s", nvs_last_error());
	nvs_pinned_stats(&st);
	cr_log_info("CUDA: %s", nvs_pinned_cuda_status());
	switch (st.cuda) {
	case NVS_CUDA_ACTIVE: /* a GPU and its driver */
		cr_assert_eq(st.cuda_registered_bytes, st.bytes_locked);
		break;
	case NVS_CUDA_FAILED: /* a runtime, no device or driver */
	case NVS_CUDA_ABSENT: /* no runtime */
		cr_assert_eq(st.cuda_registered_bytes, 0);
		break;
	default:
		cr_assert_fail("unexpected state %d", (int)st.cuda);
	}
	cr_assert(nvs_pinned_contains(p, 4u << 20));
	nvs_pinned_free(p);
}
