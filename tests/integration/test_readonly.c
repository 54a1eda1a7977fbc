// SPDX-License-Identifier: MIT
/*
 * Read-only sets (NVS_PERSIST_READONLY): a reader sees what the writer
 * saved and writes nothing (every file's and directory's size, mtime and
 * ctime unchanged), every call that would change the set is -EROFS and
 * changes nothing, readers share a set while a writer is refused naming
 * them (and a reader one naming the writer), no set is -ENOENT with
 * nothing made, and a set on a read-only bind mount serves.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvswap/swapper.h"
#include "swapper/swapdir.h"
#include "testutil.h"
#include "tu_swapper.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(readonly, .fini = fini);

enum { SZ = 64 << 10, N = 4 };

static void opts(struct nvs_swapper_opts *o, const char *path, int persist)
{
	tu_swapper_opts(o, SZ, 4);
	o->nvme_paths[0] = path;
	o->persist = (uint8_t)persist;
	o->name = "r";
}

/* Set "r" in @path: tensors 1..N of pattern 10+id, tagged "t<id>",
 * checkpointed, closed. */
static void make_set(const char *path)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s;
	static char buf[SZ];
	char tag[8];

	mkdir(path, 0700);
	opts(&o, path, NVS_PERSIST_PERSISTENT);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	for (uint64_t id = 1; id <= N; id++) {
		tu_fill(buf, SZ, 10 + id);
		cr_assert_eq(nvs_swapper_register(s, id, SZ, buf), 0, "%s",
			     nvs_last_error());
		snprintf(tag, sizeof(tag), "t%u", (unsigned)id);
		cr_assert_eq(nvs_swapper_set_tag(s, id, tag, strlen(tag)), 0);
	}
	tu_swapper_commit_close(s, "made");
}

static struct nvs_swapper *open_ro(const char *path)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;

	opts(&o, path, NVS_PERSIST_READONLY);
	cr_assert_eq(nvs_swapper_create(&o, &s), 0, "%s", nvs_last_error());
	return s;
}

/* Every tensor's bytes and tag are the writer's. */
static void check_set(struct nvs_swapper *s)
{
	static char want[SZ];
	uint64_t ids[N + 1];
	char tag[8], got[8];
	void *p;

	cr_assert_eq(nvs_swapper_list(s, ids, N + 1), N);
	for (uint64_t id = 1; id <= N; id++) {
		tu_fill(want, SZ, 10 + id);
		cr_assert_eq(nvs_swapper_acquire(s, id, &p), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(memcmp(p, want, SZ), 0, "tensor %u", (unsigned)id);
		cr_assert_eq(nvs_swapper_release(s, id, false), 0);
		cr_assert_eq(nvs_swapper_evict(s, id), 0, "%s",
			     nvs_last_error());
		snprintf(tag, sizeof(tag), "t%u", (unsigned)id);
		cr_assert_eq(nvs_swapper_get_tag(s, id, got, sizeof(got)),
			     (int)strlen(tag));
		cr_assert_eq(memcmp(got, tag, strlen(tag)), 0);
	}
}

/* Every entry under the tree walked: path, type, size, mtime, ctime. */
static char *snap;
static size_t snap_len, snap_cap;

static int note(const char *path, const struct stat *st, int flag,
		struct FTW *ftw)
{
	char line[4400];
	int n;

	(void)flag;
	(void)ftw;
	n = snprintf(line, sizeof(line), "%s %o %lld %lld.%09ld %lld.%09ld\n",
		     path, (unsigned)st->st_mode, (long long)st->st_size,
		     (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
		     (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
	if (snap_len + (size_t)n + 1 > snap_cap) {
		snap_cap = (snap_len + (size_t)n + 1) * 2;
		snap = realloc(snap, snap_cap);
		cr_assert_not_null(snap);
	}
	memcpy(snap + snap_len, line, (size_t)n + 1);
	snap_len += (size_t)n;
	return 0;
}

/* A listing of @root's whole tree (the caller frees it). */
static char *tree(const char *root)
{
	snap = NULL;
	snap_len = snap_cap = 0;
	cr_assert_eq(nftw(root, note, 16, FTW_PHYS), 0);
	return snap;
}

Test(readonly, reads_what_the_writer_saved_and_writes_nothing)
{
	const char *a = tu_path("a");
	struct nvs_swap_stats st;
	char *before, *after;

	make_set(a);
	before = tree(a);
	struct nvs_swapper *s = open_ro(a);
	cr_assert_eq(nvs_swapper_stats(s, &st), 0);
	cr_assert(st.readonly);
	cr_assert(st.checksum, "every read of a set is checked");
	check_set(s);
	cr_assert_eq(nvs_swapper_unsaved(s), 0);
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	after = tree(a);
	cr_assert_str_eq(after, before, "a reader changed the tree");
	free(before);
	free(after);
}

Test(readonly, every_change_is_erofs_and_changes_nothing)
{
	const char *a = tu_path("a");
	static char buf[SZ];
	char *before, *after;
	void *p;

	make_set(a);
	before = tree(a);
	struct nvs_swapper *s = open_ro(a);
	cr_assert_eq(nvs_swapper_register(s, 9, SZ, buf), -EROFS);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_register: the set in"),
		  "%s", nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "read-only"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_unregister(s, 1), -EROFS);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_unregister"));
	cr_assert_eq(nvs_swapper_set_tag(s, 1, "x", 1), -EROFS);
	cr_assert_eq(nvs_swapper_acquire_blank(s, 2, &p), -EROFS);
	cr_assert_null(p);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_acquire_blank"), "%s",
		  nvs_last_error());
	cr_assert_eq(nvs_swapper_acquire(s, 2, &p), 0, "%s", nvs_last_error());
	memset(p, 0x5a, SZ); /* changed in memory: never written */
	cr_assert_eq(nvs_swapper_release(s, 2, true), -EROFS);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_release"));
	cr_assert_eq(nvs_swapper_release(s, 2, false), 0,
		     "the refused release left it acquired: %s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_evict(s, 2), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_checkpoint(s, "no"), -EROFS);
	cr_assert_eq(nvs_swapper_step_begin(s, "no"), -EROFS);
	cr_assert_eq(nvs_swapper_step_open(s, "no", NVS_STEP_UNDOABLE, 0,
					   UINT64_MAX),
		     -EROFS);
	cr_assert_eq(nvs_swapper_step_end(s), 0, "no step is open");
	cr_assert_eq(nvs_swapper_discard(s), -EROFS);
	cr_assert(strstr(nvs_last_error(), "nvs_swapper_discard"));
	check_set(s); /* still usable, tensor 2 as saved */
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	after = tree(a);
	cr_assert_str_eq(after, before, "a refused call changed the tree");
	free(before);
	free(after);
}

Test(readonly, readers_share_and_a_writer_is_refused_naming_them)
{
	const char *a = tu_path("a");
	struct nvs_swapper_opts o;
	struct nvs_swapper *w = NULL;
	char pid[64];

	make_set(a);
	struct nvs_swapper *r1 = open_ro(a);
	struct nvs_swapper *r2 = open_ro(a);
	check_set(r1);
	check_set(r2);
	opts(&o, a, NVS_PERSIST_PERSISTENT);
	cr_assert_eq(nvs_swapper_create(&o, &w), -EBUSY);
	cr_assert_null(w);
	snprintf(pid, sizeof(pid), "by process %ld:", (long)getpid());
	cr_assert(strstr(nvs_last_error(), "is open read-only"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), pid), "one pid, once: %s",
		  nvs_last_error());
	o.persist = NVS_PERSIST_RESUME;
	cr_assert_eq(nvs_swapper_create(&o, &w), -EBUSY);
	cr_assert_eq(nvs_swapper_destroy(r1), 0);
	cr_assert_eq(nvs_swapper_create(&o, &w), -EBUSY, "r2 still reads");
	cr_assert_eq(nvs_swapper_destroy(r2), 0);
	cr_assert_eq(nvs_swapper_create(&o, &w), 0, "%s", nvs_last_error());
	/* And the other way: a writer holds it, a reader is refused. */
	struct nvs_swapper *r = NULL;
	opts(&o, a, NVS_PERSIST_READONLY);
	cr_assert_eq(nvs_swapper_create(&o, &r), -EBUSY);
	cr_assert_null(r);
	snprintf(pid, sizeof(pid), "held for writing by process %ld",
		 (long)getpid());
	cr_assert(strstr(nvs_last_error(), pid), "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(w), 0, "%s", nvs_last_error());
}

Test(readonly, a_writer_names_readers_in_other_processes)
{
	const char *a = tu_path("a");
	struct nvs_swapper_opts o;
	struct nvs_swapper *w = NULL;
	int ready[2], go[2], status;
	pid_t kids[2];
	char c, want[64];

	make_set(a);
	cr_assert_eq(pipe(ready), 0);
	cr_assert_eq(pipe(go), 0);
	for (int k = 0; k < 2; k++) {
		kids[k] = fork();
		cr_assert_geq(kids[k], 0);
		if (kids[k] == 0) {
			/* The lock alone: no swapper (and no threads) in a
			 * forked child. */
			struct nvs_swapdir d;
			close(ready[0]);
			close(go[1]);
			if (nvs__swapdir_open_ro(a, "r", 0, &d) < 0)
				_exit(1);
			(void)!write(ready[1], "x", 1);
			(void)!read(go[0], &c, 1);
			nvs__swapdir_close(&d, false);
			_exit(0);
		}
	}
	close(ready[1]);
	close(go[0]);
	for (int k = 0; k < 2; k++)
		cr_assert_eq(read(ready[0], &c, 1), 1, "a reader failed");
	opts(&o, a, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_create(&o, &w), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "is open read-only by processes"),
		  "%s", nvs_last_error());
	for (int k = 0; k < 2; k++) {
		snprintf(want, sizeof(want), "%ld", (long)kids[k]);
		cr_assert(strstr(nvs_last_error(), want), "pid %s: %s", want,
			  nvs_last_error());
	}
	close(go[1]); /* both readers end */
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(waitpid(kids[k], &status, 0), kids[k]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	close(ready[0]);
	cr_assert_eq(nvs_swapper_create(&o, &w), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(w), 0);
}

Test(readonly, no_set_is_enoent_and_makes_nothing)
{
	const char *e = tu_path("e");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	char level[4200];

	/* A missing path is not made. */
	opts(&o, tu_path("missing/deeper"), NVS_PERSIST_READONLY);
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOENT);
	cr_assert_null(s);
	cr_assert_eq(access(tu_path("missing"), F_OK), -1);
	/* An empty directory: no nvswap/ appears. */
	cr_assert_eq(mkdir(e, 0700), 0);
	opts(&o, e, NVS_PERSIST_READONLY);
	cr_assert_eq(nvs_swapper_create(&o, &s), -ENOENT);
	cr_assert(strstr(nvs_last_error(), "no persistent swap set to open "
					   "read-only"),
		  "%s", nvs_last_error());
	snprintf(level, sizeof(level), "%s/nvswap", e);
	cr_assert_eq(access(level, F_OK), -1, "nvswap/ was made");
	/* The rank directory of a set that saved nothing (scratch space
	 * of the same name, still open): no manifest, -ENOENT, and the
	 * scratch swapper's files are left alone. */
	struct nvs_swapper *scratch = NULL;
	opts(&o, e, NVS_PERSIST_SCRATCH);
	cr_assert_eq(nvs_swapper_create(&o, &scratch), 0);
	opts(&o, e, NVS_PERSIST_READONLY);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EBUSY,
		     "the scratch swapper holds it: %s", nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(scratch), 0);
	cr_assert_eq(access(level, F_OK), -1, "scratch's nvswap/ stays");
	/* A bad persist value names the four. */
	o.persist = 4;
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert_str_eq(nvs_persist_name(NVS_PERSIST_READONLY), "readonly");
	cr_assert_null(nvs_persist_name(4));
}

Test(readonly, a_set_on_a_read_only_bind_mount_serves)
{
	const char *a = tu_path("a"), *ro = tu_path("ro");
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = NULL;
	char lock[4200];

	make_set(a);
	/* The set's lock file left out, as a copy might: on a read-only
	 * filesystem no writer can come, so it is read unlocked. */
	snprintf(lock, sizeof(lock), "%s/nvswap/r/rank0/lock", a);
	cr_assert_eq(unlink(lock), 0);
	if (!tu_bind_ro(a, ro))
		cr_skip_test("cannot bind-mount read-only here (%s): needs "
			     "root and a private mount namespace",
			     strerror(errno));
	s = open_ro(ro);
	check_set(s);
	struct nvs_swapper *s2 = open_ro(ro);
	check_set(s2);
	cr_assert_eq(nvs_swapper_destroy(s2), 0);
	/* A writer cannot: the filesystem refuses. */
	struct nvs_swapper *w = NULL;
	opts(&o, ro, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_create(&o, &w), -EROFS, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0, "%s", nvs_last_error());
	snprintf(lock, sizeof(lock), "%s/nvswap/r/rank0/lock", ro);
	cr_assert_eq(access(lock, F_OK), -1, "nothing was made");
}

Test(readonly, a_missing_lock_file_is_made_in_a_directory_of_ours)
{
	const char *a = tu_path("a");
	char lock[4200];

	make_set(a);
	snprintf(lock, sizeof(lock), "%s/nvswap/r/rank0/lock", a);
	cr_assert_eq(unlink(lock), 0);
	struct nvs_swapper *s = open_ro(a);
	cr_assert_eq(access(lock, F_OK), 0, "the lock a writer would make");
	struct nvs_swapper_opts o;
	struct nvs_swapper *w = NULL;
	opts(&o, a, NVS_PERSIST_RESUME);
	cr_assert_eq(nvs_swapper_create(&o, &w), -EBUSY,
		     "the reader holds "
		     "it");
	check_set(s);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
}
