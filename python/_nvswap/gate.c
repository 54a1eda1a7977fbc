/* SPDX-License-Identifier: MIT */
/*
 * The gate of an object whose C counterpart close() destroys: calls in
 * progress (with the GIL released) are counted, and close waits for them
 * before destroying, since the C destroy functions must not run while
 * another thread is inside the object.
 */
#include "ext.h"

void ext_gate_init(struct ext_gate *g)
{
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->users = 0;
	g->closing = false;
	g->closed = false;
}

void ext_gate_fini(struct ext_gate *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
}

/* Nobody waits for the GIL holding @mu, so taking it with the GIL held is
 * safe: its holders never block on anything. */
int ext_gate_enter(struct ext_gate *g, bool force)
{
	int rc = 0;

	pthread_mutex_lock(&g->mu);
	if (g->closed || (g->closing && !force))
		rc = -1;
	else
		g->users++;
	pthread_mutex_unlock(&g->mu);
	return rc;
}

void ext_gate_leave(struct ext_gate *g)
{
	pthread_mutex_lock(&g->mu);
	if (--g->users == 0)
		pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

bool ext_gate_drain(struct ext_gate *g)
{
	PyThreadState *ts;
	bool first;

	pthread_mutex_lock(&g->mu);
	first = !g->closing && !g->closed;
	g->closing = true;
	if (first && !g->users)
		g->closed = true;
	pthread_mutex_unlock(&g->mu);
	if (!first || g->closed)
		return first;
	ts = PyEval_SaveThread();
	pthread_mutex_lock(&g->mu);
	while (g->users)
		pthread_cond_wait(&g->cv, &g->mu);
	g->closed = true;
	pthread_mutex_unlock(&g->mu);
	PyEval_RestoreThread(ts);
	return true;
}
