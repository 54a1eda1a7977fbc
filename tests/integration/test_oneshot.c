// SPDX-License-Identifier: MIT
/* One-shot nvs_aio_read/nvs_aio_write with validation and timings. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "aio/oneshot.h"
#include "nvswap/aio.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(oneshot, .fini = fini);

Test(oneshot, write_then_read_with_validation_and_stats)
{
	enum { SZ = (2 << 20) + 513 };
	unsigned char *src = tu_alloc(SZ, 0), *dst = tu_alloc(SZ, 3);
	struct nvs_io_stats st;

	tu_fill(src, SZ, 4);
	cr_assert_eq(nvs_aio_write(src, SZ, tu_path("o"), NULL, true, &st), 0,
		     "%s", nvs_last_error());
	cr_assert_eq(st.bytes, (uint64_t)SZ);
	cr_assert_gt(st.io_ns, 0);
	cr_assert_geq(st.total_ns, st.io_ns);
	cr_assert_eq(tu_file_size(tu_path("o")), SZ);
	cr_assert_eq(nvs_aio_read(dst, SZ, tu_path("o"), NULL, true, &st), 0);
	cr_assert(memcmp(src, dst, SZ) == 0);
	cr_assert_eq(nvs_aio_read(dst, SZ, tu_path("o"), NULL, false, NULL), 0);
	tu_free(src);
	tu_free(dst);
}

Test(oneshot, validation_reports_the_first_differing_byte)
{
	enum { SZ = 3 << 20 };
	unsigned char *buf = malloc(SZ + 1);

	tu_fill(buf, SZ + 1, 4);
	tu_write_file(tu_path("v"), buf, SZ);
	cr_assert_eq(nvs__validate_file("t", tu_path("v"), buf, SZ), 0);
	buf[(2 << 20) + 5] ^= 0x40;
	cr_assert_eq(nvs__validate_file("t", tu_path("v"), buf, SZ), -EBADMSG);
	cr_assert(strstr(nvs_last_error(), "byte 2097157"), "%s",
		  nvs_last_error());
	buf[(2 << 20) + 5] ^= 0x40;
	cr_assert_eq(nvs__validate_file("t", tu_path("v"), buf, SZ + 1),
		     -EBADMSG, "a file too short fails");
	cr_assert(strstr(nvs_last_error(), "ends at"), "%s", nvs_last_error());
	cr_assert_eq(nvs__validate_file("t", tu_path("none"), buf, 1), -ENOENT);
	free(buf);
}

Test(oneshot, errors_pass_through)
{
	char buf[16];

	cr_assert_eq(nvs_aio_read(buf, 16, tu_path("none"), NULL, false, NULL),
		     -ENOENT);
	struct nvs_aio_opts o;
	nvs_aio_opts_init(&o);
	o.block_size = 100;
	cr_assert_eq(nvs_aio_write(buf, 16, tu_path("x"), &o, false, NULL),
		     -EINVAL);
}
