// SPDX-License-Identifier: MIT
/*
 * The nvswap-tune tests' shared helpers (see tuneutil.h).
 */
#include "tuneutil.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <nvswap/nvswap.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

const char *tt_keep(const char *name)
{
	static char kept[32][4096];
	static unsigned next;
	char *p = kept[next++ % 32];

	snprintf(p, sizeof(kept[0]), "%s", tu_path(name));
	return p;
}

void tt_write_text(const char *path, const char *text)
{
	tu_write_file(path, text, strlen(text));
}

char *tt_read_text(const char *path)
{
	size_t n;
	char *p = tu_read_file(path, &n);

	p[n] = 0; /* tu_read_file allocates one byte more */
	return p;
}

const char *tt_small_sweep(void)
{
	const char *p = tt_keep("sweep.json");

	tt_write_text(p, "{\n"
			 "  \"block_size\": [\"64K\", \"256K\"],\n"
			 "  \"queue_depth\": [4, 16],\n"
			 "  \"intra_op_parallelism\": [1, 2],\n"
			 "  \"overlap_events\": true,\n"
			 "  \"single_submit\": false,\n"
			 "  \"backend\": [\"io_uring\", \"psync\"]\n"
			 "}\n");
	return p;
}

const char *tt_ds_config(const char *name, unsigned count, unsigned long elems)
{
	const char *p = tt_keep(name);
	char text[8192];

	snprintf(text, sizeof(text),
		 "{\n"
		 "  \"train_batch_size\": 8,\n"
		 "  \"zero_optimization\": {\n"
		 "    \"stage\": 3,\n"
		 "    \"offload_param\": {\"device\": \"nvme\", "
		 "\"nvme_path\": \"%s\", \"buffer_count\": %u, "
		 "\"buffer_size\": %lu}\n"
		 "  },\n"
		 "  \"aio\": {\"thread_count\": 4, \"queue_depth\": 8, "
		 "\"use_gds\": false}\n"
		 "}\n",
		 tu_dir(), count, elems);
	tt_write_text(p, text);
	return p;
}

static struct tu_out vtune(const char *prefix, const char *fmt, va_list ap)
{
	const char *bin = getenv("NVSWAP_TUNE");
	char args[8192], cmd[9000];

	cr_assert_not_null(bin, "NVSWAP_TUNE is set by tests/meson.build");
	vsnprintf(args, sizeof(args), fmt, ap);
	snprintf(cmd, sizeof(cmd), "%s %s %s", prefix ? prefix : "", bin, args);
	return tu_run(cmd);
}

struct tu_out tt_tune(const char *prefix, const char *fmt, ...)
{
	struct tu_out o;
	va_list ap;

	va_start(ap, fmt);
	o = vtune(prefix, fmt, ap);
	va_end(ap);
	return o;
}

json_t *tt_tune_json(const char *fmt, ...)
{
	struct tu_out o;
	va_list ap;
	json_t *r;

	va_start(ap, fmt);
	o = vtune(NULL, fmt, ap);
	va_end(ap);
	cr_assert_eq(o.status, 0, "%s%s", o.out, o.err);
	r = tt_parse(o.out);
	tu_out_free(&o);
	return r;
}

json_t *tt_parse(const char *text)
{
	json_error_t err;
	json_t *r = json_loads(text, 0, &err);

	cr_assert_not_null(r, "%d:%d: %s in\n%s", err.line, err.column,
			   err.text, text);
	return r;
}

void tt_refused(struct tu_out o, int status, const char *what)
{
	cr_assert_eq(o.status, status, "exit %d for %s: %s%s", o.status, what,
		     o.out, o.err);
	cr_assert(strstr(o.err, what), "'%s' in: %s", what, o.err);
	tu_out_free(&o);
}

json_int_t tt_int(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	cr_assert(json_is_integer(v), "%s is an integer", key);
	return json_integer_value(v);
}

void tt_no_leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		cr_assert_null(strstr(e->d_name, "nvswap-tune"),
			       "left behind: %s/%s", dir, e->d_name);
	closedir(d);
}

void tt_config_is(const char *path, json_t *best)
{
	struct nvs_config *cfg;
	struct nvs_aio_opts o;
	struct nvs_nvswap_config nv;
	const char *be = json_string_value(json_object_get(best, "backend"));
	struct nvs_aio_stats st;
	struct nvs_aio *h;

	cr_assert_eq(nvs_config_load(path, &cfg), 0, "%s", nvs_last_error());
	cr_assert_null(nvs_config_warning(cfg, 0), "a warning: %s",
		       nvs_config_warning(cfg, 0));
	cr_assert_eq(nvs_config_aio_opts(cfg, &o), 0);
	cr_assert_eq(o.block_size, tt_int(best, "block_size"));
	cr_assert_eq(o.queue_depth, tt_int(best, "queue_depth"));
	cr_assert_eq(o.intra_op_parallelism,
		     tt_int(best, "intra_op_parallelism"));
	cr_assert_eq(o.overlap_events,
		     json_is_true(json_object_get(best, "overlap_events")));
	cr_assert_eq(o.single_submit,
		     json_is_true(json_object_get(best, "single_submit")));
	cr_assert_eq(nvs_config_nvswap(cfg, &nv), 0);
	/* Either named, or left to auto, which must pick it here. */
	unsetenv("NVSWAP_BACKEND");
	o.backend = nv.backend;
	cr_assert_eq(nvs_aio_create(&o, &h), 0, "%s", nvs_last_error());
	cr_assert_eq(nvs_aio_get_stats(h, &st), 0);
	cr_assert_str_eq(nvs_backend_name(st.backend), be);
	cr_assert_eq(nvs_aio_destroy(h), 0);
	nvs_config_free(cfg);
}

bool tt_holds(const char *dir, const char *marker)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;

	while (d && (e = readdir(d)))
		found |= strstr(e->d_name, marker) != NULL;
	if (d)
		closedir(d);
	return found;
}

void tt_interrupt(char *const argv[], const char *marker)
{
	const char *bin = getenv("NVSWAP_TUNE");
	const char *err = tt_keep("tune.err");
	struct timespec ms = {0, 10 * 1000 * 1000};
	posix_spawn_file_actions_t fa;
	bool seen = false;
	int status, i;
	char *said;
	pid_t pid;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err,
					 O_WRONLY | O_CREAT | O_TRUNC, 0644);
	cr_assert_eq(posix_spawn(&pid, bin, &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	/* Seen once is enough: between two candidates the tuner removes
	 * its swap directory, so a second look may miss it. */
	for (i = 0; i < 1000 && !(seen = tt_holds(tu_dir(), marker)); i++)
		nanosleep(&ms, NULL);
	cr_assert(seen, "the tuner made its files");
	/* Well into the sweep: the files are written, handles are busy. */
	nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
	cr_assert_eq(kill(pid, SIGINT), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT,
		  "status %#x: ended by the signal, as Ctrl-C should", status);
	said = tt_read_text(err);
	cr_assert(strstr(said, "interrupted; temporary files removed"), "%s",
		  said);
	free(said);
	cr_assert_eq(unlink(err), 0);
}
