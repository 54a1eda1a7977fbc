// SPDX-License-Identifier: MIT
/*
 * nvswap-tune's --plot: the grid of best sweep medians per block size and
 * queue depth, drawn as SVG directly or through gnuplot when it is there.
 */
#include "tune.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* One panel per direction: a cell per block size x queue depth holding
 * the best sweep median among the points there (parallelism, events,
 * submit mode and backend vary inside a cell; the label names the
 * winner's parallelism and backend). */
struct grid {
	uint32_t x[MAXV], y[MAXV]; /* block sizes, queue depths, ascending */
	unsigned nx, ny, nd;
	int dir[NDIR];
	const struct point *best[NDIR][MAXV][MAXV];
	double vmin, vmax; /* the colour scale: lowest and highest cell */
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static int index_of(const uint32_t *v, unsigned n, uint32_t x)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i] == x)
			return (int)i;
	return -1;
}

static void make_grid(struct grid *g)
{
	memset(g, 0, sizeof(*g));
	memcpy(g->x, S.bs, S.nbs * sizeof(*g->x));
	memcpy(g->y, S.qd, S.nqd * sizeof(*g->y));
	g->nx = S.nbs;
	g->ny = S.nqd;
	qsort(g->x, g->nx, sizeof(*g->x), cmp_u32);
	qsort(g->y, g->ny, sizeof(*g->y), cmp_u32);
	for (int d = 0; d < NDIR; d++)
		if (A.dir[d])
			g->dir[g->nd++] = d;
	for (unsigned i = 0; i < np; i++) {
		const struct point *p = &P[i];
		int x = index_of(g->x, g->nx, p->s.bs);
		int y = index_of(g->y, g->ny, p->s.qd);
		if (x < 0 || y < 0 || p->skip)
			continue;
		for (unsigned k = 0; k < g->nd; k++) {
			int d = g->dir[k];
			const struct point **b = &g->best[k][x][y];
			if (!p->st[SWEEP][d].n)
				continue;
			if (!*b || p->st[SWEEP][d].med > (*b)->st[SWEEP][d].med)
				*b = p;
		}
	}
	for (unsigned k = 0; k < g->nd; k++)
		for (unsigned x = 0; x < g->nx; x++)
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				double v;
				if (!p)
					continue;
				v = p->st[SWEEP][g->dir[k]].med;
				if (v > g->vmax)
					g->vmax = v;
				if (!g->vmin || v < g->vmin)
					g->vmin = v;
			}
	/* From the lowest cell to the highest: differences of a few percent
	 * are what tuning is about, and a scale from 0 hides them. */
	if (g->vmax <= g->vmin)
		g->vmin = 0;
	if (g->vmax <= 0)
		g->vmax = 1;
}

static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '&')
			fputs("&amp;", f);
		else if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else if (*s == '"')
			fputs("&quot;", f);
		else
			fputc(*s, f);
	}
}

/* viridis, from 0 (dark) to 1 (light) */
static void colour(double t, char *buf, size_t len)
{
	static const unsigned char stops[5][3] = {{0x44, 0x01, 0x54},
						  {0x3b, 0x52, 0x8b},
						  {0x21, 0x91, 0x8c},
						  {0x5e, 0xc9, 0x62},
						  {0xfd, 0xe7, 0x25}};
	double s = (t < 0 ? 0 : t > 1 ? 1 : t) * 4;
	int i = s >= 4 ? 3 : (int)s;
	double f = s - i;
	int c[3];

	for (int k = 0; k < 3; k++)
		c[k] = (int)(stops[i][k] + f * (stops[i + 1][k] - stops[i][k]) +
			     0.5);
	snprintf(buf, len, "#%02x%02x%02x", c[0], c[1], c[2]);
}

static void plot_title(char *buf, size_t len)
{
	char io[32];
	size_t o;

	o = (size_t)snprintf(buf, len,
			     "nvswap-tune: GB/s by block size and "
			     "queue depth, %s per op, on",
			     tool_size_str(A.io_size, io, sizeof(io)));
	for (unsigned i = 0; i < A.npaths && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, " %s", real[i]);
}

static void plot_svg(const char *out, const struct grid *g)
{
	int cw = g->nx > 4 ? 80 : 120, ch = g->ny > 4 ? 50 : 80;
	int left = 80, top = 70, gap = 70;
	int pw = (int)g->nx * cw, ph = (int)g->ny * ch;
	int w = left + (int)g->nd * (pw + gap) + 90, h = top + ph + 85;
	char title[PATH_MAX + 128], c[16], b[32];
	FILE *f = fopen(out, "w");

	if (!f)
		tool_die(1, "--plot %s: %s", out, strerror(errno));
	plot_title(title, sizeof(title));
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" viewBox=\"0 0 %d %d\" "
		"font-family=\"sans-serif\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"24\" font-size=\"15\">",
		w, h, w, h, left);
	xml_text(f, title);
	fprintf(f,
		"</text>\n<text x=\"%d\" y=\"44\" font-size=\"11\" "
		"fill=\"#555\">each cell: the best sweep median there; "
		"label: GB/s, then the winner's parallelism and "
		"backend</text>\n",
		left);
	for (unsigned k = 0; k < g->nd; k++) {
		int x0 = left + (int)k * (pw + gap), d = g->dir[k];
		const struct point *top1 = NULL;

		for (unsigned x = 0; x < g->nx; x++)
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				if (p &&
				    (!top1 || p->st[SWEEP][d].med >
						      top1->st[SWEEP][d].med))
					top1 = p;
			}
		fprintf(f,
			"<g>\n<text x=\"%d\" y=\"%d\" font-size=\"14\" "
			"font-weight=\"bold\" text-anchor=\"middle\">%s</text>\n",
			x0 + pw / 2, top - 8, crit_name[d]);
		for (unsigned x = 0; x < g->nx; x++) {
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				/* queue depth grows upwards */
				int cx = x0 + (int)x * cw;
				int cy = top + (int)(g->ny - 1 - y) * ch;
				double v, t;

				if (!p) {
					fprintf(f,
						"<rect x=\"%d\" y=\"%d\" "
						"width=\"%d\" height=\"%d\" "
						"fill=\"#ddd\" "
						"stroke=\"white\"/>\n",
						cx, cy, cw, ch);
					continue;
				}
				v = p->st[SWEEP][d].med;
				t = (v - g->vmin) / (g->vmax - g->vmin);
				colour(t, c, sizeof(c));
				fprintf(f,
					"<rect x=\"%d\" y=\"%d\" width=\"%d\" "
					"height=\"%d\" fill=\"%s\" "
					"stroke=\"%s\" stroke-width=\"%d\"/>\n",
					cx, cy, cw, ch, c,
					p == top1 ? "#d62728" : "white",
					p == top1 ? 3 : 1);
				fprintf(f,
					"<text x=\"%d\" y=\"%d\" "
					"font-size=\"15\" font-weight=\"bold\" "
					"text-anchor=\"middle\" "
					"fill=\"%s\">%.2f</text>\n"
					"<text x=\"%d\" y=\"%d\" "
					"font-size=\"10\" "
					"text-anchor=\"middle\" "
					"fill=\"%s\">par %u, %s</text>\n",
					cx + cw / 2, cy + ch / 2,
					t < 0.6 ? "white" : "black", v,
					cx + cw / 2, cy + ch / 2 + 15,
					t < 0.6 ? "white" : "black", p->s.par,
					tune_bname(p->s.be));
			}
		}
		for (unsigned x = 0; x < g->nx; x++)
			fprintf(f,
				"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
				"text-anchor=\"middle\">%s</text>\n",
				x0 + (int)x * cw + cw / 2, top + ph + 18,
				tool_size_str(g->x[x], b, sizeof(b)));
		for (unsigned y = 0; y < g->ny; y++)
			fprintf(f,
				"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
				"text-anchor=\"end\">%u</text>\n",
				x0 - 6,
				top + (int)(g->ny - 1 - y) * ch + ch / 2 + 4,
				g->y[y]);
		fprintf(f,
			"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
			"text-anchor=\"middle\">block size</text>\n"
			"<text x=\"%d\" y=\"%d\" font-size=\"12\" "
			"text-anchor=\"middle\" transform=\"rotate(-90 %d "
			"%d)\">queue depth</text>\n</g>\n",
			x0 + pw / 2, top + ph + 38, x0 - 40, top + ph / 2,
			x0 - 40, top + ph / 2);
	}
	/* colour scale */
	int lx = left + (int)g->nd * (pw + gap) - gap + 30;
	fprintf(f, "<g>\n");
	for (int i = 0; i < 20; i++) {
		colour(1 - i / 19.0, c, sizeof(c));
		fprintf(f,
			"<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"%d\" "
			"fill=\"%s\"/>\n",
			lx, top + i * ph / 20, ph / 20 + 1, c);
	}
	fprintf(f,
		"<text x=\"%d\" y=\"%d\" font-size=\"11\">%.2f GB/s</text>\n"
		"<text x=\"%d\" y=\"%d\" font-size=\"11\">%.2f GB/s</text>\n</g>\n"
		"<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\">red "
		"border: the panel's best cell. Grey: not measured.</text>\n"
		"</svg>\n",
		lx + 20, top + 10, g->vmax, lx + 20, top + ph, g->vmin, left,
		top + ph + 70);
	if (fclose(f) != 0)
		tool_die(1, "--plot %s: %s", out, strerror(errno));
}

static const char *find_gnuplot(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("PATH");
	char *dirs, *save, *d;

	if (!env || !(dirs = strdup(env)))
		return NULL;
	for (d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof(path), "%s/gnuplot", *d ? d : ".");
		if (access(path, X_OK) == 0) {
			free(dirs);
			return path;
		}
	}
	free(dirs);
	return NULL;
}

/* gnuplot's single-quoted string: a quote is written twice. */
static void gp_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'')
			fputc('\'', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/* Returns false (with a note) when gnuplot ran and failed. */
static bool plot_gnuplot(const char *gp, const char *out, const struct grid *g)
{
	const char *data = tune_tmp_add("/tmp", "/nvswap-tune.", ".dat");
	const char *script = tune_tmp_add("/tmp", "/nvswap-tune.", ".gp");
	char title[PATH_MAX + 128], b[32];
	char arg0[] = "gnuplot", arg1[PATH_MAX];
	char *argv[] = {arg0, arg1, NULL};
	posix_spawn_file_actions_t fa;
	struct stat st;
	FILE *f;
	pid_t pid;
	int status, ret;

	f = fopen(data, "w");
	if (!f)
		tool_die(1, "%s: %s", data, strerror(errno));
	for (unsigned k = 0; k < g->nd; k++) {
		fprintf(f, "# %s\n", crit_name[g->dir[k]]);
		for (unsigned x = 0; x < g->nx; x++)
			for (unsigned y = 0; y < g->ny; y++) {
				const struct point *p = g->best[k][x][y];
				if (p)
					fprintf(f,
						"%u %u %.4f \"par %u, %s\"\n",
						x, y,
						p->st[SWEEP][g->dir[k]].med,
						p->s.par, tune_bname(p->s.be));
			}
		fputs("\n\n", f);
	}
	fclose(f);
	f = fopen(script, "w");
	if (!f)
		tool_die(1, "%s: %s", script, strerror(errno));
	plot_title(title, sizeof(title));
	fprintf(f,
		"set terminal svg size %u,%u dynamic noenhanced "
		"font 'sans,12' background rgb 'white'\n"
		"set output ",
		160 + g->nd * (g->nx * 120 + 160), 200 + g->ny * 80);
	gp_quoted(f, out);
	fprintf(f,
		"\nset palette defined (0 '#440154', 1 '#3b528b', "
		"2 '#21918c', 3 '#5ec962', 4 '#fde725')\n"
		"set cbrange [%.3f:%.3f]\nset cblabel 'GB/s'\n"
		"set xrange [-0.5:%u.5]\nset yrange [-0.5:%u.5]\n"
		"set xlabel 'block size'\nset ylabel 'queue depth'\n"
		"set style fill solid 1.0 noborder\n"
		"set style textbox opaque fc rgb 'white' noborder\n"
		"set xtics (",
		g->vmin, g->vmax, g->nx - 1, g->ny - 1);
	for (unsigned x = 0; x < g->nx; x++)
		fprintf(f, "%s'%s' %u", x ? ", " : "",
			tool_size_str(g->x[x], b, sizeof(b)), x);
	fputs(")\nset ytics (", f);
	for (unsigned y = 0; y < g->ny; y++)
		fprintf(f, "%s'%u' %u", y ? ", " : "", g->y[y], y);
	fprintf(f, ")\nset multiplot layout 1,%u title ", g->nd);
	gp_quoted(f, title);
	fputc('\n', f);
	for (unsigned k = 0; k < g->nd; k++) {
		fprintf(f, "set title '%s'\nplot ", crit_name[g->dir[k]]);
		gp_quoted(f, data);
		fprintf(f,
			" index %u using 1:2:(0.5):(0.5):3 with boxxyerror "
			"fc palette notitle, '' index %u using "
			"1:2:(sprintf(\"%%.2f\\n%%s\", $3, strcol(4))) with "
			"labels boxed notitle\n",
			k, k);
	}
	fputs("unset multiplot\n", f);
	fclose(f);
	snprintf(arg1, sizeof(arg1), "%s", script);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null",
					 O_WRONLY, 0);
	ret = posix_spawn(&pid, gp, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (ret != 0)
		tool_die(1, "running %s: %s", gp, strerror(ret));
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	unlink(data);
	unlink(script);
	tune_tmp_forget(data);
	tune_tmp_forget(script);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
	       stat(out, &st) == 0 && st.st_size > 0;
}

/* Returns the engine that drew it. */
const char *tune_plot(void)
{
	const char *gp = A.engine == PLOT_SVG ? NULL : find_gnuplot();
	struct grid g;

	make_grid(&g);
	if (A.engine == PLOT_GNUPLOT && !gp)
		tool_die(1, "--plot-engine gnuplot: gnuplot is not installed "
			    "(apt-get install gnuplot-nox), or use "
			    "--plot-engine svg");
	if (gp) {
		if (plot_gnuplot(gp, A.plot, &g))
			return "gnuplot";
		if (A.engine == PLOT_GNUPLOT)
			tool_die(1,
				 "--plot %s: gnuplot failed (its message "
				 "is above)",
				 A.plot);
		fprintf(stderr, "nvswap-tune: gnuplot failed; drawing the "
				"SVG without it\n");
	}
	plot_svg(A.plot, &g);
	return "svg";
}
