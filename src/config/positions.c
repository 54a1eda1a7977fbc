// SPDX-License-Identifier: MIT
/*
 * The config's position index: a lenient scan of text jansson already
 * accepted records where every key stands (jansson keeps no positions for
 * values), so that each error and warning can say FILE:LINE:COLUMN.
 */
#include "config/positions.h"
#include "config/config_impl.h"
#include "config/unescape.h"
#include "internal/alloc.h"
#include "internal/errors.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct scan {
	const char *p;
	int line, col;
	struct nvs_config *c;
};

static void adv(struct scan *s)
{
	if (*s->p == '\n') {
		s->line++;
		s->col = 1;
	} else {
		s->col++;
	}
	s->p++;
}

static void skip_ws(struct scan *s)
{
	while (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')
		adv(s);
}

/* Copy a JSON string, escapes decoded as jansson decodes them, so that a
 * key written "\u0061io" is found as "aio". */
static void scan_string(struct scan *s, char *out, size_t n)
{
	size_t k = 0, len, skip;
	char u[4];

	adv(s); /* opening quote */
	while (*s->p && *s->p != '"') {
		if (*s->p == '\\') {
			adv(s);
			skip = nvs__json_unescape(s->p, u, &len);
			for (size_t i = 0; i < len && k + 1 < n; i++)
				out[k++] = u[i];
			while (skip-- && *s->p)
				adv(s);
			continue;
		}
		if (k + 1 < n)
			out[k++] = *s->p;
		adv(s);
	}
	if (*s->p)
		adv(s);
	if (out)
		out[k < n ? k : n - 1] = 0;
}

static void scan_value(struct scan *s, const char *path);

static void note_pos(struct scan *s, const char *path, int line, int col)
{
	struct nvs_config *c = s->c;

	if (!nvs__reserve(&c->pos, &c->cappos, c->npos, c->npos + 1,
			  sizeof(*c->pos))) {
		c->oom = true;
		return;
	}
	if (snprintf(c->pos[c->npos].path, PATH_MAX_KEY, "%s", path) >=
	    PATH_MAX_KEY)
		return;
	c->pos[c->npos].line = line;
	c->pos[c->npos].col = col;
	c->npos++;
}

static void scan_object(struct scan *s, const char *path)
{
	char key[PATH_MAX_KEY], sub[PATH_MAX_KEY];

	adv(s); /* { */
	for (;;) {
		int line, col;

		skip_ws(s);
		if (*s->p != '"')
			break;
		line = s->line;
		col = s->col;
		scan_string(s, key, sizeof(key));
		/* Paths longer than any key we check are not indexed. */
		if (snprintf(sub, sizeof(sub), "%s%s%s", path, *path ? "." : "",
			     key) >= (int)sizeof(sub))
			sub[0] = 0;
		else
			note_pos(s, sub, line, col);
		skip_ws(s);
		if (*s->p == ':')
			adv(s);
		scan_value(s, sub);
		skip_ws(s);
		if (*s->p != ',')
			break;
		adv(s);
	}
	skip_ws(s);
	if (*s->p == '}')
		adv(s);
}

static void scan_value(struct scan *s, const char *path)
{
	skip_ws(s);
	if (*s->p == '{') {
		scan_object(s, path);
	} else if (*s->p == '[') {
		adv(s);
		for (;;) {
			skip_ws(s);
			if (*s->p == ']' || !*s->p)
				break;
			scan_value(s, path); /* elements share the key */
			skip_ws(s);
			if (*s->p != ',')
				break;
			adv(s);
		}
		if (*s->p == ']')
			adv(s);
	} else if (*s->p == '"') {
		scan_string(s, NULL, 0);
	} else {
		while (*s->p && !strchr(",}] \t\r\n", *s->p))
			adv(s);
	}
}

/* The text was accepted by jansson, so the scan can be lenient. */
void nvs__config_index_positions(struct nvs_config *c, const char *text)
{
	struct scan s = {.p = text, .line = 1, .col = 1, .c = c};

	scan_value(&s, "");
}

static void where(const struct nvs_config *c, const char *path, int *line,
		  int *col)
{
	*line = *col = 0;
	for (size_t i = 0; i < c->npos; i++)
		if (!strcmp(c->pos[i].path, path)) {
			*line = c->pos[i].line;
			*col = c->pos[i].col;
			return;
		}
}

/* An error about @path: "NAME:LINE:COL: PATH: what". */
int nvs__config_bad(const struct nvs_config *c, int err, const char *path,
		    const char *fmt, ...)
{
	char what[NVS_ERRMSG_MAX / 2];
	int line, col;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	where(c, path, &line, &col);
	return nvs__err(err, "%s:%d:%d: %s: %s", c->name, line, col, path,
			what);
}

void nvs__config_warn(struct nvs_config *c, const char *path, const char *fmt,
		      ...)
{
	char what[256], *w;
	int line, col, n;
	va_list ap;

	if (c->nwarn == MAX_WARNINGS)
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	where(c, path, &line, &col);
	n = snprintf(NULL, 0, "%s:%d:%d: %s: %s", c->name, line, col, path,
		     what);
	w = nvs__malloc((size_t)n + 1);
	if (!w) {
		c->oom = true;
		return;
	}
	snprintf(w, (size_t)n + 1, "%s:%d:%d: %s: %s", c->name, line, col, path,
		 what);
	c->warn[c->nwarn++] = w;
}
