// SPDX-License-Identifier: MIT
/*
 * Issue 34, finding 3, for every path the library opens: a FIFO (without
 * a writer, whose plain open blocks for ever), a character device or a
 * directory where a file is expected is refused at once, the sentence
 * naming what it is. The aio handle's paths, the config file, and what a
 * persistent swap set opens: its manifests, its temporary manifest, its
 * data file, its lock file as nvs_swapset_list() reads it. Each test has
 * a timeout: a regression fails instead of hanging the suite.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvswap/aio.h"
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(nonblock, .fini = fini, .timeout = 30);

enum { BUF = 64 << 10, SZ = 40000 };

#define HAS(text)                                                              \
	cr_assert(strstr(nvs_last_error(), (text)), "no \"%s\" in: %s",        \
		  (text), nvs_last_error())

static const char *in_set(const char *name)
{
	static char p[2][4200];
	static unsigned k;

	k ^= 1;
	snprintf(p[k], sizeof(p[k]), "%s/nvswap/set/rank0/%s", tu_dir(), name);
	return p[k];
}

static void set_opts(struct nvs_swapper_opts *o)
{
	tu_swapper_opts(o, BUF, 3);
	o->persist = NVS_PERSIST_PERSISTENT;
	o->name = "set";
}

/* A persistent set with one tensor at generation 1, closed. */
static void make_set(void)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	char buf[SZ];

	set_opts(&o);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	tu_fill(buf, SZ, 7);
	cr_assert_eq(nvs_swapper_register(s, 1, SZ, buf), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint(s, "one"), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint_wait(s), 1, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

Test(nonblock, aio_refuses_a_directory_and_dev_zero_naming_the_type)
{
	struct nvs_aio *h;
	char buf[4096];

	cr_assert_eq(nvs_aio_create(NULL, &h), 0, "%s", nvs_last_error());
	/* A directory keeps its own errno, EISDIR, and says so. */
	cr_assert_eq(nvs_aio_sync_pread(h, buf, sizeof(buf), tu_dir(), 0),
		     -EISDIR, "%s", nvs_last_error());
	HAS(": is a directory");
	HAS(tu_dir());
	cr_assert_eq(nvs_aio_sync_pread(h, buf, sizeof(buf), "/dev/zero", 0),
		     -EINVAL, "%s", nvs_last_error());
	HAS("/dev/zero offset 0 length 4096: is a character device, not a "
	    "regular file or a block device");
	cr_assert_eq(nvs_aio_sync_pwrite(h, buf, sizeof(buf), "/dev/zero", 0),
		     -EINVAL, "%s", nvs_last_error());
	HAS("is a character device");
	cr_assert_eq(nvs_aio_destroy(h), 0);
}

Test(nonblock, config_load_names_a_fifo_a_device_and_a_directory)
{
	const char *fifo = tu_path("ds.json");
	struct nvs_config *c = (struct nvs_config *)1;
	char want[4400];

	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(nvs_config_load(fifo, &c), -EINVAL);
	cr_assert_null(c);
	snprintf(want, sizeof(want),
		 "nvs_config_load: %s: is a FIFO, not a regular file of at "
		 "most 16777216 bytes",
		 fifo);
	cr_assert_str_eq(nvs_last_error(), want);
	cr_assert_eq(nvs_config_load("/dev/null", &c), -EINVAL);
	HAS("/dev/null: is a character device, not a regular file");
	cr_assert_eq(nvs_config_load(tu_dir(), &c), -EINVAL);
	HAS(": is a directory, not a regular file");
}

Test(nonblock, a_fifo_as_the_sets_data_file_is_refused_naming_it)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	make_set();
	cr_assert_eq(unlink(in_set("set.data")), 0);
	cr_assert_eq(mkfifo(in_set("set.data"), 0600), 0);
	set_opts(&o);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL, "%s",
		     nvs_last_error());
	cr_assert_null(s);
	HAS("set/rank0/set.data: is a FIFO, not a regular file");
	/* nvswap-fsck's check opened it O_RDONLY: blocked for ever. */
	cr_assert_eq(nvs_swapset_check(&o, NVS_CHECK_DATA, NULL, NULL), -EINVAL,
		     "%s", nvs_last_error());
	HAS("set/rank0/set.data is a FIFO, not a regular file: nothing is "
	    "judged");
}

Test(nonblock, a_fifo_at_a_manifest_name_is_refused_naming_it)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	make_set();
	/* A newer generation's name: its read blocked the reopen for ever;
	 * now refused as a damaged manifest is, naming the file. */
	cr_assert_eq(mkfifo(in_set("manifest.00000000000000000002"), 0600), 0);
	set_opts(&o);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EBADMSG, "%s",
		     nvs_last_error());
	cr_assert_null(s);
	HAS("set/rank0/manifest.00000000000000000002: is a FIFO, not a "
	    "regular file");
}

Test(nonblock, a_fifo_at_the_temporary_manifest_fails_the_checkpoint)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	char buf[SZ];
	int ret;

	make_set();
	set_opts(&o);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	/* Planted after the open, which clears a stale one away. Its open
	 * for writing blocked for ever without a reader. */
	cr_assert_eq(mkfifo(in_set("manifest.tmp"), 0600), 0);
	tu_fill(buf, SZ, 8);
	cr_assert_eq(nvs_swapper_register(s, 2, SZ, buf), 0, "%s",
		     nvs_last_error());
	ret = nvs_swapper_checkpoint(s, "two");
	if (ret >= 0)
		ret = nvs_swapper_checkpoint_wait(s);
	cr_assert_eq(ret, -EINVAL, "%d: %s", ret, nvs_last_error());
	HAS("manifest.tmp is a FIFO, not a regular file");
	/* Gone again: the close's own checkpoint goes through. */
	cr_assert_eq(unlink(in_set("manifest.tmp")), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
}

static void count(const struct nvs_swapset_info *info, void *arg)
{
	(void)info;
	++*(int *)arg;
}

Test(nonblock, a_fifo_at_lock_does_not_block_listing_sets)
{
	int n = 0;

	make_set();
	unlink(in_set("lock"));
	cr_assert_eq(mkfifo(in_set("lock"), 0600), 0);
	cr_assert_eq(nvs_swapset_list(tu_dir(), count, &n), 1, "%s",
		     nvs_last_error());
	cr_assert_eq(n, 1);
}
