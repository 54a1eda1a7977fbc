// SPDX-License-Identifier: MIT
/*
 * nvs_swapper_discard(): a persistent set goes with every generation,
 * its lock and the directories made for it, unsaved changes are not
 * checkpointed, a scratch swapper goes as with destroy, and a file that
 * cannot be unlinked is named while the set stays whole and reopens.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(discard, .fini = fini);

enum { SZ = 64 << 10 };

/* A set named "d" over @npaths paths under tu_dir() ("a", "b": levels
 * this process makes). */
static struct nvs_swapper *open_set(int persist, unsigned npaths)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	tu_swapper_opts(&o, SZ, 4);
	o.npaths = npaths;
	o.nvme_paths[0] = tu_path("a");
	o.nvme_paths[1] = tu_path("b");
	o.persist = (uint8_t)persist;
	o.name = "d";
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* nvs_swapper_create() of set "d" on path "a" with persist=resume. */
static int resume_set(struct nvs_swapper **out)
{
	struct nvs_swapper_opts o;

	tu_swapper_opts(&o, SZ, 4);
	o.nvme_paths[0] = tu_path("a");
	o.persist = NVS_PERSIST_RESUME;
	o.name = "d";
	return nvs_swapper_create(&o, out);
}

/* Tensor @id's bytes := @buf (dirty until evicted). */
static int put(struct nvs_swapper *s, uint64_t id, const void *buf)
{
	void *p;
	int ret = nvs_swapper_acquire(s, id, &p);

	if (ret < 0)
		return ret;
	memcpy(p, buf, SZ);
	return nvs_swapper_release(s, id, true);
}

/* Tensors 1..4 written with @seed, checkpointed. */
static void save(struct nvs_swapper *s, unsigned seed, bool first)
{
	static char buf[SZ];

	for (uint64_t id = 1; id <= 4; id++) {
		tu_fill(buf, SZ, seed * 7 + id);
		if (first)
			cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0,
				     "%s", nvs_last_error());
		else
			cr_assert_eq(put(s, id, buf), 0, "%s",
				     nvs_last_error());
	}
	cr_assert_gt(nvs_swapper_checkpoint(s, "step"), 0, "%s",
		     nvs_last_error());
	cr_assert_gt(nvs_swapper_checkpoint_wait(s), 0, "%s", nvs_last_error());
}

/* The entries of tu_dir(), space-separated and sorted by readdir. */
static void listing(char *out, size_t len)
{
	DIR *d = opendir(tu_dir());
	struct dirent *e;

	cr_assert(d);
	*out = '\0';
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			snprintf(out + strlen(out), len - strlen(out), "%s ",
				 e->d_name);
	closedir(d);
}

Test(discard, a_persistent_set_goes_whole_with_its_made_directories)
{
	static char buf[SZ];
	char left[512];
	struct nvs_swapper *s = open_set(NVS_PERSIST_PERSISTENT, 2);

	save(s, 1, true);
	save(s, 2, false);
	/* Unsaved changes: destroy would checkpoint them, discard not. */
	tu_fill(buf, SZ, 99);
	cr_assert_eq(put(s, 1, buf), 0);
	cr_assert_eq(nvs_swapper_unsaved(s), 1);
	cr_assert_eq(nvs_swapper_discard(s), 0, "%s", nvs_last_error());
	listing(left, sizeof(left));
	cr_assert_str_empty(left, "left behind: %s", left);

	/* Nothing to resume any more. */
	struct nvs_swapper *r = NULL;
	cr_assert_eq(resume_set(&r), -ENOENT, "%s", nvs_last_error());
}

Test(discard, a_users_directories_stay)
{
	char left[512];
	struct nvs_swapper *s;

	cr_assert_eq(mkdir(tu_path("a"), 0700), 0);
	s = open_set(NVS_PERSIST_PERSISTENT, 1);
	save(s, 1, true);
	cr_assert_eq(nvs_swapper_discard(s), 0, "%s", nvs_last_error());
	listing(left, sizeof(left));
	cr_assert_str_eq(left, "a ");
	cr_assert_eq(access(tu_path("a/nvswap"), F_OK), -1);
}

Test(discard, a_set_reopened_by_another_process_goes_too)
{
	char left[512];
	struct nvs_swapper *s = open_set(NVS_PERSIST_PERSISTENT, 1);
	pid_t pid;
	int st;

	save(s, 1, true);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	/* A process that did not make the directories discards the set. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct nvs_swapper *r = NULL;
		bool ok = resume_set(&r) == 0 &&
			  nvs_swapper_generations(r, NULL, 0) == 1 &&
			  nvs_swapper_discard(r) == 0;
		_exit(ok ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	listing(left, sizeof(left));
	/* The levels of nvme_path this process made stay (not the child's
	 * to remove); nvswap/ and below are gone. */
	cr_assert_str_eq(left, "a ");
	cr_assert_eq(access(tu_path("a/nvswap"), F_OK), -1);
}

Test(discard, a_scratch_swapper_goes_as_with_destroy)
{
	static char buf[SZ];
	char left[512];
	struct nvs_swapper *s = open_set(NVS_PERSIST_SCRATCH, 2);

	tu_fill(buf, SZ, 3);
	cr_assert_eq(nvs_swapper_register(s, 7, SZ, buf), 0);
	cr_assert_eq(nvs_swapper_discard(s), 0, "%s", nvs_last_error());
	listing(left, sizeof(left));
	cr_assert_str_empty(left, "left behind: %s", left);
	cr_assert_eq(nvs_swapper_discard(NULL), 0);
}

/* chattr +i / -i; false where the filesystem has no such flag. */
static bool immutable(const char *path, bool on)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY);
	int flags = 0;
	bool ok;

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
	if (ok) {
		flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
		ok = ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
	}
	close(fd);
	return ok;
}

Test(discard, a_file_it_cannot_unlink_is_named_and_the_set_stays_whole)
{
	const char *dir = tu_path("a/nvswap/d/rank0");
	struct nvs_swapper *s = open_set(NVS_PERSIST_PERSISTENT, 1);
	int ret;

	save(s, 1, true);
	if (geteuid() != 0 || !immutable(dir, true)) {
		nvs_swapper_destroy(s);
		cr_skip_test("cannot make %s immutable (needs root and a "
			     "filesystem with chattr +i): %s",
			     dir, strerror(errno));
	}
	ret = nvs_swapper_discard(s);
	immutable(dir, false);
	cr_assert_eq(ret, -EPERM, "%d: %s", ret, nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_discard") &&
			  strstr(nvs_last_error(), "/manifest."),
		  "%s", nvs_last_error());
	/* The lock was released and the set reopens at its generation. */
	s = open_set(NVS_PERSIST_RESUME, 1);
	cr_assert_eq(nvs_swapper_generations(s, NULL, 0), 1);
	cr_assert_eq(nvs_swapper_discard(s), 0, "%s", nvs_last_error());
}

Test(discard, a_resume_that_finds_no_set_leaves_nothing)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	char left[512];

	cr_assert_eq(mkdir(tu_path("a"), 0700), 0);
	tu_swapper_opts(&o, SZ, 4);
	o.nvme_paths[0] = tu_path("a");
	o.nvme_paths[1] = tu_path("b/c"); /* levels made, then removed */
	o.npaths = 2;
	o.persist = NVS_PERSIST_RESUME;
	o.name = "d";
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOENT, "%s",
		     nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "no persistent swap set to resume"),
		  "%s", nvs_last_error());
	listing(left, sizeof(left));
	cr_assert_str_eq(left, "a ");
	cr_assert_eq(access(tu_path("a/nvswap"), F_OK), -1);
}
