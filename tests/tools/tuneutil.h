/* SPDX-License-Identifier: MIT */
/*
 * What the nvswap-tune test files share: running the tool, reading its
 * JSON, checking a refusal, the files it must not leave behind, and
 * whether a config it wrote gives back the aio settings it chose.
 */
#ifndef NVS_TUNEUTIL_H
#define NVS_TUNEUTIL_H

#include <jansson.h>

#include "testutil.h"

/* "<tu_dir>/<name>", kept for the test (tu_path's few buffers rotate;
 * no test keeps more than 32 of these). */
const char *tt_keep(const char *name);
void tt_write_text(const char *path, const char *text);
/* The whole file, NUL-terminated; the caller frees it. */
char *tt_read_text(const char *path);
/* A search space of 2 x 2 x 2 points per backend (io_uring, psync),
 * of small ops: <tu_dir>/sweep.json. */
const char *tt_small_sweep(void);
/* $NVSWAP_TUNE with arguments from @fmt, after shell words @prefix
 * (environment settings, a wrapper; NULL for none). */
struct tu_out tt_tune(const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* tt_tune() with no prefix that must succeed (exit 0): its JSON. */
json_t *tt_tune_json(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
/* <tu_dir>/<name>: a DeepSpeed config swapping parameters to tu_dir()
 * through @count buffers of @elems elements, with more keys around
 * them and aio's old spelling thread_count (4). */
const char *tt_ds_config(const char *name, unsigned count, unsigned long elems);
json_t *tt_parse(const char *text);
/* @o ended with @status and said @what on stderr (then freed). */
void tt_refused(struct tu_out o, int status, const char *what);
json_int_t tt_int(json_t *o, const char *key);
/* Nothing of the tuner's is left in @dir. */
void tt_no_leftovers(const char *dir);
/* Start $NVSWAP_TUNE with @argv, wait until tu_dir() holds a name with
 * @marker (its files are made), let it run a little, then Ctrl-C: it
 * must end by that signal, saying it removed its files. */
void tt_interrupt(char *const argv[], const char *marker);
/* Whether @dir holds a name with @marker. */
bool tt_holds(const char *dir, const char *marker);
/* @path loads without warnings, and its aio options and backend are
 * @best's settings. */
void tt_config_is(const char *path, json_t *best);

#endif
