/* SPDX-License-Identifier: MIT */
/*
 * The tensor registry: tensors by id (uthash), the lru and flight lists a
 * tensor is on, waiting while another thread works on a tensor, and a
 * tensor's kept failure. Every function here wants the swapper's lock held.
 */
#ifndef NVS_SWAPPER_REGISTRY_H
#define NVS_SWAPPER_REGISTRY_H

#include "swapper/swapper_impl.h"

#include <stdbool.h>
#include <stdint.h>

/* Append @t to @l (@t is on no list). */
static inline void nvs__tlist_push(struct tlist *l, struct tensor *t)
{
	t->on = l;
	t->next = NULL;
	t->prev = l->tail;
	if (l->tail)
		l->tail->next = t;
	else
		l->head = t;
	l->tail = t;
	l->n++;
}

/* Take @t off its list, if it is on one. */
static inline void nvs__tlist_remove(struct tensor *t)
{
	struct tlist *l = t->on;

	if (!l)
		return;
	if (t->prev)
		t->prev->next = t->next;
	else
		l->head = t->next;
	if (t->next)
		t->next->prev = t->prev;
	else
		l->tail = t->prev;
	l->n--;
	t->on = NULL;
	t->prev = t->next = NULL;
}

/* The registered tensor @id, or NULL. Lock held. */
static inline struct tensor *nvs__tensor_find(const struct nvs_swapper *s,
					      uint64_t id)
{
	struct tensor *t;

	HASH_FIND(hh, s->table, &id, sizeof(id), t);
	return t;
}

/* Wait for s->cond (see struct nvs_swapper). Lock held. */
static inline void nvs__wait_change(struct nvs_swapper *s)
{
	pthread_cond_wait(&s->cond, &s->lock);
}

/* A new tensor @id of @nbytes, ON_NVME, with room for its extents (and
 * the copy-on-write ones of a persistent set) and tickets; t->nexts is
 * how many extents its size takes. NULL when out of memory. No lock
 * needed. */
struct tensor *nvs__tensor_alloc(const struct nvs_swapper *s, uint64_t id,
				 size_t nbytes);
/* Free @t and what it holds (not its buffer or space). */
void nvs__tensor_free(struct tensor *t);

/* Tensor @id of @nbytes checked (size, not registered yet), allocated,
 * placed, its files grown and added to the registry: ON_NVME, reading as
 * zeros. @call names the caller in the errors. 0 and *@out, or -errno
 * (nothing added). Lock held. */
int nvs__tensor_add(struct nvs_swapper *s, uint64_t id, size_t nbytes,
		    const char *call, struct tensor **out);
/* Undo nvs__tensor_add() of @t (idle, never written): out of the
 * registry, its space given back, freed. Lock held. */
void nvs__tensor_unadd(struct nvs_swapper *s, struct tensor *t);

/* Grow the swap files to cover their spaces, so padded reads of a
 * file's last tensor stay inside it. Lock held. */
int nvs__grow_files(struct nvs_swapper *s);

/* Give the blocks of @n extents back to the filesystem, so that freeing
 * tensors frees disk space (a full disk recovers). Best effort: a
 * filesystem without hole punching keeps them until destroy. Nothing
 * with opts.keep_blocks (the next tensor placed there overwrites them). */
void nvs__punch_extents(struct nvs_swapper *s, const struct nvs_extent *ext,
			size_t n);

/* -ENOENT with "<call>: no tensor <id> is registered". */
int nvs__no_tensor(uint64_t id, const char *call);

/* A set opened read-only (NVS_PERSIST_READONLY) changes nothing: -EROFS
 * with a sentence naming @call and the set, else 0. Any lock. */
int nvs__refuse_readonly(const struct nvs_swapper *s, const char *call);

/* Tensor @id once no other thread works on it (see tensor.busy): 0 and
 * *@out, or -ENOENT. Lock held, dropped while waiting; @waited (or NULL)
 * is set when it waited. */
int nvs__tensor_idle(struct nvs_swapper *s, uint64_t id, const char *call,
		     struct tensor **out, bool *waited);

/* *@dst = a copy of @msg (NULL when it cannot be allocated: callers
 * then say less, never fail). */
void nvs__keep_msg(char **dst, const char *msg);

/* Keep @err with @msg (the calling thread's last error) as @t's
 * unreported failure. */
void nvs__keep_error(struct tensor *t, int err, const char *msg);

/* Report (once) and clear @t's kept failure; 0 when there is none. */
int nvs__take_error(struct tensor *t);

#endif
