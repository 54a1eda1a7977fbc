// SPDX-License-Identifier: MIT
/*
 * nvswap-io: the ds_io of nvswap. Times sequential reads or writes of one
 * file through an aio handle with DeepNVMe's settings and prints ds_io's
 * lines (so existing log parsers work), per-op latency, and with
 * --compare-fio the same job run by fio, interleaved, with the ratios.
 * Uses only the public API. Run with -h for every option. This file is
 * main(); the parts are io_*.c, sharing io.h.
 */
#include "io.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

bool io_quiet;
bool io_keep_files;

static void on_signal(int sig)
{
	io_remove_files();
	io_fio_cleanup();
	io_restore_huge();
	signal(sig, SIG_DFL);
	raise(sig);
}

int main(int argc, char **argv)
{
	struct args a;
	struct run r;
	int rc = 0;

	tool_name = "nvswap-io";
	tool_cleanup = io_on_fatal;
	io_parse(argc, argv, &a);
	io_keep_files = a.keep;
	io_quiet = a.json;
	io_check_folder(a.folder);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (a.compare_fio) {
		rc = io_compare_fio(&a);
	} else {
		io_one_run(&a, &r);
		if (r.validated < 0)
			rc = 1;
		if (a.json) {
			json_t *j = io_run_json(&a, &r);
			json_object_set_new(j, "config", io_config_json(&a));
			json_dumpf(j, stdout, JSON_INDENT(2));
			putchar('\n');
			json_decref(j);
		} else {
			io_print_run(&a, &r);
		}
		free(r.lat);
	}
	if (!a.keep)
		io_remove_files();
	return rc;
}
