// SPDX-License-Identifier: MIT
/*
 * The swap manager's files and processes: the scratch directory removed
 * at destroy, a second swapper on the same rank, stale files of a killed
 * process reclaimed, every failed allocation, and the param and optimizer
 * swappers of one config sharing a path, page_cache's swap files
 * without O_DIRECT, and keep_blocks's space kept for the next tensor.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal/alloc.h"
#include "nvswap/config.h"
#include "nvswap/swapper.h"
#include "tu_swapper_cases.h"
#include "testutil.h"

static void fini(void)
{
	tu_cleanup();
}

TestSuite(swapper, .fini = fini);

static unsigned count_swap_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, "swap.", 5);
	closedir(d);
	return n;
}

/* --------------------------------------------------- files, processes */

Test(swapper, destroy_removes_the_scratch_files_and_directory)
{
	struct nvs_swapper *s = mk(2);
	char dir[4200];
	struct stat st;

	snprintf(dir, sizeof(dir), "%s", nvs_swapper_dir(s, 0));
	cr_assert_eq(stat(dir, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);
	cr_assert_eq(count_swap_files(dir), 1);
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0);
	touch(s, 1);
	cr_assert_eq(nvs_swapper_evict(s, 1), 0, "in flight at destroy");
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(stat(dir, &st), -1);
}

Test(swapper, a_second_swapper_on_the_same_rank_is_ebusy_unless_named)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *a = mk(1), *b = (struct nvs_swapper *)&b;

	opts(&o, 1);
	cr_assert_eq(nvs_swapper_create(&o, &b), -EBUSY);
	cr_assert(strstr(nvs_last_error(), "in use by process"));
	o.name = "optimizer";
	b = mk_with(&o);
	o.rank = 1;
	o.name = NULL;
	struct nvs_swapper *c = mk_with(&o);
	cr_assert_eq(nvs_swapper_destroy(c), 0);
	cr_assert_eq(nvs_swapper_destroy(b), 0);
	cr_assert_eq(nvs_swapper_destroy(a), 0);
}

Test(swapper, files_of_a_killed_process_are_reclaimed_at_the_next_start)
{
	int ready[2];
	char c;
	pid_t pid;

	char file[4300];
	snprintf(file, sizeof(file), "%s/nvswap/rank0/swap.0", tu_dir());
	cr_assert_eq(pipe(ready), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct nvs_swapper_opts o;
		struct nvs_swapper *s;
		opts(&o, 1);
		if (nvs_swapper_create(&o, &s) < 0 ||
		    nvs_swapper_register(s, 1, BUF, NULL) < 0 ||
		    nvs_swapper_register(s, 2, BUF, NULL) < 0)
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	ssize_t got = read(ready[0], &c, 1);
	off_t size = tu_file_size(file);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(ready[0]);
	cr_assert_eq(got, 1, "the child set up");
	cr_assert_eq(size, 2 * BUF, "the child's swap file");

	struct nvs_swapper *s = mk(1);
	cr_assert_eq(tu_file_size(file), 0, "a fresh swap file");
	cr_assert_eq(nvs_swapper_register(s, 1, BUF, NULL), 0, "%s",
		     nvs_last_error());
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_eq(tu_file_size(file), -1);
}

/* The calls the allocation test fails in turn; 0 or the first error. */
static int alloc_run(const struct nvs_swapper_opts *o, const void *a,
		     struct nvs_swapper **s)
{
	int ret = nvs_swapper_create(o, s);

	for (uint64_t id = 0; id < 40 && ret == 0; id++)
		ret = nvs_swapper_register(*s, id, 1000, a);
	if (ret == 0)
		ret = nvs_swapper_unregister(*s, 3);
	return ret;
}

Test(swapper, every_failed_allocation_is_enomem_and_leaks_nothing)
{
	struct nvs_swapper_opts o;
	unsigned char *a = malloc(1000);
	struct nvs_swapper *s = NULL;
	unsigned long total, failed = 0;

	opts(&o, 2);
	o.aio.backend = NVS_BACKEND_PSYNC; /* the same allocations each run */
	tu_fill(a, 1000, 17);
	nvs__alloc_fail_at(0);
	cr_assert_eq(alloc_run(&o, a, &s), 0, "%s", nvs_last_error());
	total = nvs__alloc_fail_at(0);
	cr_assert_eq(nvs_swapper_destroy(s), 0);
	cr_assert_gt(total, 40, "a tensor each, and the table");
	for (unsigned long n = 1; n <= total; n++) {
		int ret;
		s = NULL;
		nvs__alloc_fail_at(n);
		ret = alloc_run(&o, a, &s);
		nvs__alloc_fail_at(0);
		if (ret < 0) {
			failed++;
			cr_assert_eq(ret, -ENOMEM, "allocation %lu: %d %s", n,
				     ret, nvs_last_error());
		}
		if (s) {
			/* What was registered is intact. */
			struct nvs_tensor_info info;
			if (nvs_swapper_info(s, 0, &info) == 0)
				expect(s, 0, a, 1000);
			cr_assert_eq(nvs_swapper_destroy(s), 0);
		}
	}
	cr_assert_gt(failed, 40, "%lu of %lu", failed, total);
	free(a);
}

Test(swapper, param_and_optimizer_swappers_from_one_config_share_a_path)
{
	char json[4096];
	struct nvs_config *c;
	struct nvs_swapper_opts o;
	struct nvs_swapper *p, *q;
	unsigned char *a = malloc(8000);

	snprintf(json, sizeof(json),
		 "{\"train_batch_size\": 8, \"zero_optimization\": {\"stage\": "
		 "3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
		 "\"%s\", \"buffer_count\": 2, \"buffer_size\": 4000}, "
		 "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
		 "\"%s\", \"buffer_count\": 2, \"buffer_size\": 2000, "
		 "\"fast_init\": false}}, \"aio\": {\"queue_depth\": 4}}",
		 tu_dir(), tu_dir());
	cr_assert_eq(nvs_config_load_string(json, "ds.json", &c), 0, "%s",
		     nvs_last_error());
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_PARAM, 0, &o), 0);
	p = mk_with(&o);
	nvs_swapper_opts_init(&o);
	cr_assert_eq(nvs_config_swapper_opts(c, NVS_OFFLOAD_OPTIMIZER, 0, &o),
		     0);
	q = mk_with(&o);
	cr_assert(strstr(nvs_swapper_dir(p, 0), "/nvswap/param/rank0"));
	cr_assert(strstr(nvs_swapper_dir(q, 0), "/nvswap/optimizer/rank0"));
	cr_assert_eq(stats(p).buffer_size, 8192, "4000 fp16, rounded");
	cr_assert_eq(stats(q).buffer_size, 8192, "2000 fp32, rounded");
	tu_fill(a, 8000, 18);
	cr_assert_eq(nvs_swapper_register(p, 1, 8000, a), 0);
	cr_assert_eq(nvs_swapper_register(q, 1, 8001, a), -EFBIG);
	cr_assert_eq(nvs_swapper_register(q, 1, 7999, a + 1), 0);
	expect(p, 1, a, 8000);
	expect(q, 1, a + 1, 7999);
	cr_assert_eq(nvs_swapper_destroy(p), 0);
	cr_assert_eq(nvs_swapper_destroy(q), 0);
	nvs_config_free(c);
	free(a);
}

/* ------------------------------------------------------- page_cache */

/* Whether this process holds @path open with O_DIRECT (its flags in
 * /proc/self/fdinfo); -1 when it does not hold it open. */
static int held_direct(const char *path)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int found = -1;

	cr_assert(d);
	while ((e = readdir(d))) {
		char link[300], target[PATH_MAX], line[128];
		unsigned flags;
		ssize_t n;
		FILE *f;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (e->d_name[0] == '.' || n < 0)
			continue;
		target[n] = 0;
		if (strcmp(target, path))
			continue;
		snprintf(link, sizeof(link), "/proc/self/fdinfo/%s", e->d_name);
		f = fopen(link, "r");
		cr_assert(f);
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "flags: %o", &flags) == 1)
				found = (flags & O_DIRECT) != 0;
		fclose(f);
	}
	closedir(d);
	return found;
}

/* Whether the filesystem of @dir takes O_DIRECT (tmpfs before Linux 6.6
 * does not: the swapper then falls back to the page cache anyway). */
static int takes_direct(const char *dir)
{
	char probe[PATH_MAX + 16];
	int fd;

	snprintf(probe, sizeof(probe), "%s/probe", dir);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EINVAL)
		return 0;
	cr_assert_geq(fd, 0, "%s: %s", probe, strerror(errno));
	close(fd);
	unlink(probe);
	return 1;
}

Test(swapper, page_cache_opens_the_swap_files_without_o_direct)
{
	static unsigned char ref[BUF];

	for (int pc = 0; pc < 2; pc++) {
		for (int persist = 0; persist < 2; persist++) {
			struct nvs_swapper_opts o;
			struct nvs_swapper *s;
			char dir[PATH_MAX], file[PATH_MAX + 16];

			opts(&o, 2);
			o.page_cache = pc;
			if (persist) {
				o.persist = NVS_PERSIST_PERSISTENT;
				o.name = "pc";
			}
			s = mk_with(&o);
			cr_assert(realpath(nvs_swapper_dir(s, 0), dir));
			snprintf(file, sizeof(file), "%s/%s", dir,
				 persist ? "set.data" : "swap.0");
			cr_assert_eq(held_direct(file),
				     pc ? 0 : takes_direct(dir),
				     "page_cache %d persist %d: %s", pc,
				     persist, file);
			tu_fill(ref, BUF, 11u + (unsigned)(2 * pc + persist));
			cr_assert_eq(nvs_swapper_register(s, 1, BUF, ref), 0,
				     "%s", nvs_last_error());
			cr_assert_eq(nvs_swapper_evict(s, 1), 0);
			cr_assert_eq(nvs_swapper_wait_all(s), 0);
			expect(s, 1, ref, BUF); /* read back from the file */
			cr_assert_geq(stats(s).bytes_read, BUF);
			if (persist)
				cr_assert_eq(nvs_swapper_discard(s), 0, "%s",
					     nvs_last_error());
			else
				cr_assert_eq(nvs_swapper_destroy(s), 0);
		}
	}
}

/* ------------------------------------------------------ keep_blocks */

/* The 512-byte blocks swap.0 of @s holds. */
static long long blocks0(struct nvs_swapper *s)
{
	char file[PATH_MAX + 16];
	struct stat st;

	snprintf(file, sizeof(file), "%s/swap.0", nvs_swapper_dir(s, 0));
	cr_assert_eq(stat(file, &st), 0, "%s", file);
	return (long long)st.st_blocks;
}

Test(swapper, keep_blocks_leaves_the_blocks_for_the_next_tensor_to_overwrite)
{
	static unsigned char ref[BUF], zero[BUF], got[BUF];

	for (int keep = 0; keep < 2; keep++) {
		struct nvs_swapper_opts o;
		struct nvs_swapper *s;
		struct nvs_tensor_info info;
		long long written, freed;

		opts(&o, 2);
		o.keep_blocks = keep;
		s = mk_with(&o);
		tu_fill(ref, BUF, 21u + (unsigned)keep);
		cr_assert_eq(nvs_swapper_register(s, 1, BUF, ref), 0, "%s",
			     nvs_last_error());
		cr_assert_eq(nvs_swapper_wait_all(s), 0);
		written = blocks0(s);
		cr_assert_geq(written, BUF / 512, "keep %d", keep);
		cr_assert_eq(nvs_swapper_unregister(s, 1), 0);
		freed = blocks0(s);
		if (keep)
			cr_assert_eq(freed, written, "no hole punched");
		else
			cr_assert_eq(freed, written - BUF / 512,
				     "punched at unregister");
		/* placed where the first was: zeros until written, not
		 * the bytes the blocks still hold */
		cr_assert_eq(nvs_swapper_register(s, 2, BUF, NULL), 0);
		cr_assert_eq(nvs_swapper_info(s, 2, &info), 0);
		cr_assert(!info.on_disk);
		memset(got, 0xa5, sizeof(got));
		cr_assert_eq(nvs_swapper_read(s, 2, got, BUF), 0);
		cr_assert(!memcmp(got, zero, BUF), "keep %d: zeros", keep);
		expect(s, 2, zero, BUF); /* and through a buffer */
		cr_assert_eq(nvs_swapper_evict(s, 2), 0);
		modify(s, 2, ref, BUF, 31u + (unsigned)keep);
		cr_assert_eq(nvs_swapper_evict(s, 2), 0);
		cr_assert_eq(nvs_swapper_wait_all(s), 0);
		cr_assert_eq(blocks0(s), written,
			     "keep %d: written over the same blocks' room",
			     keep);
		cr_assert_eq(nvs_swapper_read(s, 2, got, BUF), 0);
		cr_assert(!memcmp(got, ref, BUF), "keep %d: read back", keep);
		cr_assert_eq(nvs_swapper_destroy(s), 0);
	}
}

Test(swapper, keep_blocks_is_refused_for_a_persistent_set)
{
	struct nvs_swapper_opts o;
	struct nvs_swapper *s = (struct nvs_swapper *)&s;
	char dir[PATH_MAX];
	struct stat st;

	opts(&o, 2);
	o.keep_blocks = true;
	o.persist = NVS_PERSIST_PERSISTENT;
	o.name = "kept";
	snprintf(dir, sizeof(dir), "%s/nvswap/kept", o.nvme_paths[0]);
	cr_assert_eq(nvs_swapper_create(&o, &s), -EINVAL);
	cr_assert_null(s);
	cr_assert(strstr(nvs_last_error(), "keep_blocks is for scratch"), "%s",
		  nvs_last_error());
	cr_assert(strstr(nvs_last_error(), "a persistent set"), "%s",
		  nvs_last_error());
	cr_assert_eq(stat(dir, &st), -1, "%s made", dir);
}
