// SPDX-License-Identifier: MIT
/*
 * Backend choice and the io_uring fast path through the whole handle:
 * AUTO walks io_uring -> libaio -> psync past a disabled or blocked kernel
 * interface (a real seccomp filter, the io_uring_disabled sysctl) and says
 * why; pinned memory and cached files go to io_uring registered; the
 * optional SQPOLL and IOPOLL modes move the right bytes or skip saying why.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "aio/ops.h"
#include "nvswap/nvswap.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(backends, .fini = fini);

/* Skips the calling test, with the reason, where io_uring cannot run. */
static void need_uring(void)
{
	char why[200] = "";

	if (nvs__engine_probe(NVS_BACKEND_IO_URING, 8, why, sizeof(why)) < 0)
		cr_skip_test("io_uring unavailable here: %s", why);
}

/* A seccomp filter failing @nr1 and @nr2 (-1: none) with @err, as a
 * container runtime's profile does. Only this test process is affected. */
static void block_syscalls(long nr1, long nr2, int err)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr1, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr2, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K,
			 SECCOMP_RET_ERRNO |
				 ((unsigned)err & SECCOMP_RET_DATA)),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};

#if !defined(__x86_64__)
	cr_skip_test("the seccomp filter here is written for x86-64");
#endif
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		cr_skip_test("cannot install a seccomp filter here: %s",
			     strerror(errno));
}

static void stats_of(struct nvs_aio *h, struct nvs_aio_stats *st)
{
	cr_assert_eq(nvs_aio_get_stats(h, st), 0);
	cr_log_info("%s: %s", nvs_aio_backend_name(h), st->backend_notes);
}

/* A write and read back of @n bytes from @buf through @h. */
static void roundtrip(struct nvs_aio *h, unsigned char *buf, size_t n,
		      const char *name)
{
	unsigned char *back = tu_alloc(n, 0);

	tu_fill(buf, n, 77);
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, n, tu_path(name), 0), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_aio_sync_pread(h, back, n, tu_path(name), 0), 1, "%s",
		     nvs_last_error());
	cr_assert(memcmp(buf, back, n) == 0);
	tu_free(back);
}

Test(backends, seccomp_blocked_io_uring_falls_through_to_libaio)
{
	struct nvs_aio_stats st;
	struct nvs_aio *h;
	unsigned char buf[8192];

	unsetenv("NVSWAP_BACKEND");
	block_syscalls(__NR_io_uring_setup, -1, EPERM);
	cr_assert_eq(nvs_aio_create(NULL, &h), 0, "%s", nvs_last_error());
	stats_of(h, &st);
	cr_assert_str_eq(nvs_aio_backend_name(h), "libaio");
	cr_assert_eq(st.backend, NVS_BACKEND_LIBAIO);
	cr_assert(strstr(st.backend_notes, "io_uring: io_uring_setup is "
					   "refused with EPERM (a seccomp"),
		  "%s", st.backend_notes);
	cr_assert(strstr(st.backend_notes, "libaio: chosen"), "%s",
		  st.backend_notes);
	roundtrip(h, buf, sizeof(buf), "s");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, kernel_without_io_uring_or_aio_falls_through_to_psync)
{
	struct nvs_aio_stats st;
	struct nvs_aio *h;
	unsigned char buf[8192];

	unsetenv("NVSWAP_BACKEND");
	block_syscalls(__NR_io_uring_setup, __NR_io_setup, ENOSYS);
	cr_assert_eq(nvs_aio_create(NULL, &h), 0, "%s", nvs_last_error());
	stats_of(h, &st);
	cr_assert_str_eq(nvs_aio_backend_name(h), "psync");
	cr_assert(strstr(st.backend_notes, "io_uring: the kernel has no "
					   "io_uring (ENOSYS)"),
		  "%s", st.backend_notes);
	cr_assert(strstr(st.backend_notes, "libaio: the kernel has no native "
					   "AIO (ENOSYS)"),
		  "%s", st.backend_notes);
	cr_assert(strstr(st.backend_notes, "psync: chosen"), "%s",
		  st.backend_notes);
	roundtrip(h, buf, sizeof(buf), "p");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, asking_for_a_blocked_io_uring_is_eopnotsupp_with_the_reason)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h = (struct nvs_aio *)&o;

	unsetenv("NVSWAP_BACKEND");
	block_syscalls(__NR_io_uring_setup, -1, EPERM);
	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_IO_URING;
	cr_assert_eq(nvs_aio_create(&o, &h), -EOPNOTSUPP);
	cr_assert_null(h);
	cr_assert(strstr(nvs_last_error(), "io_uring backend cannot run "
					   "here: io_uring_setup is refused"),
		  "%s", nvs_last_error());
}

Test(backends, io_uring_disabled_sysctl_is_read_and_named)
{
	struct nvs_aio_opts o;
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	unsetenv("NVSWAP_BACKEND");
	/* The sysctl is machine-wide: play it with a file of our own. */
	tu_write_file(tu_path("io_uring_disabled"), "2\n", 2);
	nvs__uring_disabled_path = tu_path("io_uring_disabled");
	cr_assert_eq(nvs_aio_create(NULL, &h), 0, "%s", nvs_last_error());
	stats_of(h, &st);
	cr_assert_neq(st.backend, NVS_BACKEND_IO_URING);
	cr_assert(strstr(st.backend_notes, "kernel.io_uring_disabled=2"), "%s",
		  st.backend_notes);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_IO_URING;
	cr_assert_eq(nvs_aio_create(&o, &h), -EOPNOTSUPP);
	cr_assert(strstr(nvs_last_error(), "sysctl -w "
					   "kernel.io_uring_disabled=0"),
		  "%s", nvs_last_error());
}

static struct nvs_aio *uring_handle(unsigned par, uint32_t flags)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	int ret;

	need_uring();
	unsetenv("NVSWAP_BACKEND");
	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_IO_URING;
	o.intra_op_parallelism = par;
	o.block_size = 256 << 10;
	o.queue_depth = 8;
	o.uring_flags = flags;
	ret = nvs_aio_create(&o, &h);
	if (ret == -EPERM && (flags & NVS_URING_SQPOLL))
		cr_skip_test("SQPOLL needs privileges on this kernel");
	cr_assert_eq(ret, 0, "%s", nvs_last_error());
	return h;
}

Test(backends, pinned_memory_and_cached_files_go_to_io_uring_registered)
{
	struct nvs_aio *h = uring_handle(2, 0);
	size_t n = 4 << 20;
	unsigned char *buf = nvs_aio_new_cpu_locked_buffer(h, n);
	struct nvs_aio_stats st;

	cr_assert_not_null(buf, "%s", nvs_last_error());
	roundtrip(h, buf, n, "r");
	stats_of(h, &st);
	cr_assert_eq(st.backend, NVS_BACKEND_IO_URING);
	cr_assert_eq(st.register_error, 0);
	/* 4 MiB written from pinned memory in 256 KiB requests: all fixed.
	 * The read lands in malloc memory: none. */
	cr_assert_eq(st.requests, 32);
	cr_assert_eq(st.fixed_buffer_requests, 16);
	cr_assert_eq(st.fixed_file_requests, 32, "the cache's descriptors");
	cr_assert_geq(st.registered_bytes, n);
	cr_assert_eq(nvs_aio_free_cpu_locked_buffer(h, buf), 0);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, no_fixed_flag_keeps_io_uring_unregistered)
{
	struct nvs_aio *h = uring_handle(1, NVS_URING_NO_FIXED);
	size_t n = 1 << 20;
	unsigned char *buf = nvs_aio_new_cpu_locked_buffer(h, n);
	struct nvs_aio_stats st;

	roundtrip(h, buf, n, "n");
	stats_of(h, &st);
	cr_assert_eq(st.fixed_buffer_requests, 0);
	cr_assert_eq(st.fixed_file_requests, 0);
	cr_assert_eq(st.registered_bytes, 0);
	nvs_aio_free_cpu_locked_buffer(h, buf);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, files_closed_by_the_cache_are_never_written_through_a_slot)
{
	struct nvs_aio_opts o;
	struct nvs_aio *h;
	unsigned char a[4096], b[4096], back[4096];

	need_uring();
	unsetenv("NVSWAP_BACKEND");
	nvs_aio_opts_init(&o);
	o.backend = NVS_BACKEND_IO_URING;
	o.open_files = 1; /* every other op evicts and closes */
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	tu_fill(a, sizeof(a), 1);
	tu_fill(b, sizeof(b), 2);
	for (int i = 0; i < 20; i++) {
		cr_assert_eq(nvs_aio_sync_pwrite(h, i % 2 ? b : a, 4096,
						 tu_path(i % 2 ? "B" : "A"),
						 4096 * (i / 2)),
			     1);
	}
	cr_assert_eq(tu_file_size(tu_path("A")), 10 * 4096);
	cr_assert_eq(tu_file_size(tu_path("B")), 10 * 4096);
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(nvs_aio_sync_pread(h, back, 4096, tu_path("A"),
						4096 * i),
			     1);
		cr_assert(memcmp(back, a, 4096) == 0, "A block %d", i);
		cr_assert_eq(nvs_aio_sync_pread(h, back, 4096, tu_path("B"),
						4096 * i),
			     1);
		cr_assert(memcmp(back, b, 4096) == 0, "B block %d", i);
	}
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, sqpoll_handle_moves_the_bytes)
{
	struct nvs_aio *h = uring_handle(2, NVS_URING_SQPOLL);
	size_t n = (2 << 20) + 777;
	unsigned char *buf = tu_alloc(n, 3);
	struct nvs_aio_stats st;

	roundtrip(h, buf, n, "q");
	stats_of(h, &st);
	cr_assert(st.uring_setup_flags & 2u /* IORING_SETUP_SQPOLL */);
	tu_free(buf);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, iopoll_handle_moves_the_bytes_or_says_why_not)
{
	struct nvs_aio *h = uring_handle(1, NVS_URING_IOPOLL);
	size_t n = 1 << 20;
	unsigned char *buf = nvs_aio_new_cpu_locked_buffer(h, n);
	int ret;

	unsigned char *back = nvs_aio_new_cpu_locked_buffer(h, n);

	tu_fill(buf, n, 3);
	ret = nvs_aio_sync_pwrite(h, buf, n, tu_path("i"), 0);
	if (ret == 1)
		ret = nvs_aio_sync_pread(h, back, n, tu_path("i"), 0);
	if (ret == -EOPNOTSUPP) {
		/* Said as it is, with the request that met it. */
		cr_assert(strstr(nvs_last_error(), "not supported"), "%s",
			  nvs_last_error());
		nvs_aio_free_cpu_locked_buffer(h, back);
		nvs_aio_free_cpu_locked_buffer(h, buf);
		nvs_aio_destroy(h);
		cr_skip_test("IOPOLL: this disk has no poll queues "
			     "(EOPNOTSUPP; NVMe needs nvme.poll_queues > 0)");
	}
	cr_assert_eq(ret, 1, "%s", nvs_last_error());
	cr_assert(memcmp(buf, back, n) == 0);
	nvs_aio_free_cpu_locked_buffer(h, back);
	nvs_aio_free_cpu_locked_buffer(h, buf);
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(backends, registration_past_the_memlock_limit_falls_back_unregistered)
{
	struct tu_child c;

	/* nobody writes its file in our scratch directory. */
	cr_assert_eq(chmod(tu_dir(), 0777), 0);
	if (!tu_as_nobody("uring_memlock", 8 << 20, &c))
		cr_skip_test("cannot lower RLIMIT_MEMLOCK and drop root here");
	if (c.res[7] == 2)
		cr_skip_test("io_uring unavailable here: %s", c.msg);
	cr_assert_eq(c.res[7], 0, "setup: %s", c.msg);
	cr_assert_eq(c.res[0], 1, "write: %s", c.msg);
	cr_assert_eq(c.res[1], 1, "read");
	cr_assert_eq(c.res[2], 1, "the bytes read back are the bytes written");
	cr_assert_eq(c.res[3], -ENOMEM, "the refusal is in the stats");
	cr_assert_gt(c.res[4], 0, "one ring still registered");
	cr_assert_lt(c.res[4], c.res[5], "the other went unregistered");
	cr_assert_eq(c.res[6], 0);
}
