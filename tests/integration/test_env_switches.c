// SPDX-License-Identifier: MIT
/*
 * The on/off environment variables (NVSWAP_GPU, NVSWAP_CUDA,
 * NVSWAP_ALLOW_UNPINNED) take one set of spellings, 1/on/true/yes and
 * 0/off/false/no in any case (empty is unset), and refuse anything else
 * as NVSWAP_BACKEND does: -EINVAL at the first call that reads the
 * variable, with nvs_last_error() naming it, its value and the accepted
 * values, and on every call after. Each test runs in a fresh process, so
 * it sets the variables before nvswap first reads them.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvswap/nvswap.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(env_switches, .fini = fini);

#define ACCEPTED                                                               \
	"is not one of 1, on, true, yes or 0, off, false, no (any case; "      \
	"empty is unset)"

static void assert_names(const char *var, const char *value)
{
	char want[256];

	snprintf(want, sizeof(want), "%s=%s " ACCEPTED, var, value);
	cr_assert(strstr(nvs_last_error(), want), "want '%s' in: %s", want,
		  nvs_last_error());
}

/* A host buffer written through an aio handle: every op asks the GPU
 * layer whether the buffer is device memory. */
static int write_host(void)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = NULL;
	static char buf[4096];
	int ret;

	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_PSYNC;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	ret = nvs_aio_sync_pwrite(h, buf, sizeof(buf), tu_path("f"), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0, "%s", nvs_last_error());
	return ret;
}

Test(env_switches, a_bad_NVSWAP_GPU_is_refused_naming_it)
{
	int err = 0;

	setenv("NVSWAP_GPU", "garbage", 1);
	cr_assert_eq(write_host(), -EINVAL, "%s", nvs_last_error());
	assert_names("NVSWAP_GPU", "garbage");
	cr_assert_eq(write_host(), -EINVAL, "refused again, not forgotten");
	assert_names("NVSWAP_GPU", "garbage");
	cr_assert_eq(nvs_gpu_open(), -EINVAL);
	assert_names("NVSWAP_GPU", "garbage");
	cr_assert_eq(nvs_gpu_pointer(&err, NULL), -EINVAL);
}

Test(env_switches, a_bad_NVSWAP_GPU_is_refused_by_the_first_gpu_call_too)
{
	setenv("NVSWAP_GPU", "2", 1);
	cr_assert_eq(nvs_gpu_open(), -EINVAL);
	assert_names("NVSWAP_GPU", "2");
	cr_assert_eq(write_host(), -EINVAL);
	assert_names("NVSWAP_GPU", "2");
}

/* @fn(@value)'s exit status, run in a child with @var=@value: nvswap
 * reads the variable once per process. */
static int in_child(const char *var, const char *value,
		    int (*fn)(const char *value))
{
	pid_t pid = fork();
	int st;

	cr_assert_neq(pid, -1);
	if (pid == 0) {
		setenv(var, value, 1);
		_exit(fn(value));
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* 0 when GPU support is off, and host I/O works. */
static int gpu_off(const char *value)
{
	char want[64];

	snprintf(want, sizeof(want), "GPU support is off (NVSWAP_GPU=%s)",
		 value);
	return nvs_gpu_open() == -ENODEV && strstr(nvs_last_error(), want) &&
			       write_host() >= 0
		       ? 0
		       : 1;
}

/* 0 when GPU support is on (a device, or no driver on this machine:
 * either way not off and not refused), and host I/O works. */
static int gpu_on(const char *value)
{
	int n = nvs_gpu_open();

	(void)value;
	return (n > 0 || n == -ENODEV) &&
			       !strstr(nvs_last_error(), "NVSWAP_GPU") &&
			       write_host() >= 0
		       ? 0
		       : 1;
}

Test(env_switches, NVSWAP_GPU_false_turns_gpu_support_off)
{
	const char *off[] = {"false", "OFF", "No", "0"};

	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(in_child("NVSWAP_GPU", off[i], gpu_off), 0,
			     "NVSWAP_GPU=%s is off", off[i]);
}

Test(env_switches, NVSWAP_GPU_on_and_empty_leave_gpu_support_on)
{
	const char *on[] = {"true", "ON", "Yes", "1", ""};

	for (unsigned i = 0; i < 5; i++)
		cr_assert_eq(in_child("NVSWAP_GPU", on[i], gpu_on), 0,
			     "NVSWAP_GPU='%s' is on", on[i]);
}

/* With @var=@value, the first pinned allocation and every one after are
 * -EINVAL naming the call, the variable, its value and the spellings. */
static void allocations_refused(const char *var, const char *value)
{
	int err = 0;

	setenv(var, value, 1);
	for (int k = 0; k < 2; k++) {
		cr_assert_null(nvs_pinned_alloc(4096, &err));
		cr_assert_eq(err, -EINVAL, "allocation %d", k);
		assert_names(var, value);
		cr_assert(strstr(nvs_last_error(), "nvs_pinned_alloc: "), "%s",
			  nvs_last_error());
	}
}

Test(env_switches, a_bad_NVSWAP_CUDA_is_refused_naming_it)
{
	struct nvs_aio *h = NULL;
	struct nvs_pool_opts po;
	struct nvs_pool *pool = NULL;

	allocations_refused("NVSWAP_CUDA", "garbage");
	cr_assert(strstr(nvs_pinned_cuda_status(),
			 "NVSWAP_CUDA=garbage " ACCEPTED),
		  "%s", nvs_pinned_cuda_status());
	nvs_pool_opts_init(&po);
	po.buffer_count = 2;
	po.buffer_size = 4096;
	cr_assert_eq(nvs_pool_create(&po, &pool), -EINVAL);
	assert_names("NVSWAP_CUDA", "garbage");
	cr_assert_null(pool);
	cr_assert_eq(nvs_aio_create(NULL, &h), -EINVAL, "bounce buffers");
	assert_names("NVSWAP_CUDA", "garbage");
}

Test(env_switches, NVSWAP_CUDA_false_turns_registration_off)
{
	struct nvs_pinned_stats st;
	void *p;
	int err = 0;

	setenv("NVSWAP_CUDA", "FALSE", 1);
	p = nvs_pinned_alloc(4096, &err);
	cr_assert_not_null(p, "%s", nvs_last_error());
	cr_assert_eq(nvs_pinned_stats(&st), 0);
	cr_assert_eq(st.cuda, NVS_CUDA_OFF);
	cr_assert_str_eq(nvs_pinned_cuda_status(),
			 "CUDA registration off (NVSWAP_CUDA=FALSE)");
	nvs_pinned_free(p);
}

Test(env_switches, a_bad_NVSWAP_ALLOW_UNPINNED_is_refused_naming_it)
{
	allocations_refused("NVSWAP_ALLOW_UNPINNED", "garbage");
}

/* Over the cap on locked memory (NVSWAP_PINNED_LIMIT), an allocation is
 * -ENOMEM (0) unless unpinned memory is allowed: then it is unlocked (1). */
static int over_the_cap(const char *value)
{
	void *p;
	int err = 0;

	(void)value;
	setenv("NVSWAP_PINNED_LIMIT", "64K", 1);
	p = nvs_pinned_alloc(1 << 20, &err);
	return p && !nvs_pinned_contains(p, 1) ? 1 : err == -ENOMEM ? 0 : 2;
}

Test(env_switches, NVSWAP_ALLOW_UNPINNED_takes_every_spelling)
{
	const char *on[] = {"1", "on", "TRUE", "Yes"};
	const char *off[] = {"0", "off", "False", "NO", ""};

	for (unsigned i = 0; i < 4; i++)
		cr_assert_eq(
			in_child("NVSWAP_ALLOW_UNPINNED", on[i], over_the_cap),
			1, "'%s' allows", on[i]);
	for (unsigned i = 0; i < 5; i++)
		cr_assert_eq(
			in_child("NVSWAP_ALLOW_UNPINNED", off[i], over_the_cap),
			0, "'%s' does not", off[i]);
}
