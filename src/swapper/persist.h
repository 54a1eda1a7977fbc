/* SPDX-License-Identifier: MIT */
/*
 * Persistent swap sets: the swapper's side of a set that outlives the
 * process (see "Persistent swap sets" in nvswap/persist.h).
 *
 * Every tensor's placement (its extents, allocated as one unit) has a
 * reference record: whether it is a tensor's current placement, and how
 * many kept (or committing) generations point at it. A placement some
 * generation points at is frozen: a write of its tensor goes to a new
 * placement (copy on write), and the old one is freed only when no
 * generation and no tensor uses it any more. persist_open.c reopens and
 * checks a set; persist.c keeps the records, makes checkpoints and
 * commits them on a thread of their own.
 *
 * Every function wants the swapper's lock held unless it says otherwise.
 */
#ifndef NVS_SWAPPER_PERSIST_H
#define NVS_SWAPPER_PERSIST_H

#include "internal/hash.h"
#include "swapper/manifest.h"
#include "swapper/swapper_impl.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nvswap/swapper.h"

/* Each path's data file of a persistent set. */
#define DATA_FILE "set.data"

/* One placement: its extents and who uses them. Keyed by its first
 * extent's offset | path (offsets are aligned, paths < 16). */
struct nvs_xref {
	UT_hash_handle hh;
	uint64_t key;
	unsigned gens; /* kept or committing generations pointing here */
	bool cur;      /* a tensor's current placement */
	size_t nexts;
	struct nvs_extent ext[]; /* copy */
};

struct nvs_pset {
	uint8_t set_id[16];
	char *name;
	unsigned rank;
	unsigned keep;
	char *real[NVS_SWAPPER_MAX_PATHS]; /* realpath of each nvme_path */
	char *rec[NVS_SWAPPER_MAX_PATHS];  /* how manifests record them */
	struct nvs_xref *xref;
	/* Kept generations, oldest first (manifests as committed). */
	struct nvs_manifest *gens;
	size_t ngens, capgens;
	uint64_t next_gen;
	/* Something changed since the last snapshot (a register, unregister,
	 * tag, or a write other than a checkpoint's): destroy checkpoints
	 * only then (or when a tensor is dirty, or no generation exists). */
	bool changed;
	/* The checkpoint being committed (pend), its thread, the writes it
	 * still waits for, and the outcome nobody collected yet. */
	struct nvs_manifest pend;
	bool pending;
	bool thread;
	pthread_t thr;
	size_t pend_left;
	int pend_err;
	char *pend_msg;
	int result; /* of the last checkpoint: gen number or -errno */
	bool result_new;
	char *result_msg;
	/* Opening: the manifests read (all kept ones) and which one the
	 * registry comes from. */
	uint64_t open_gen;
	/* Opening found no manifest: nothing of the set is saved, so a
	 * failed create removes what it made of it. */
	bool empty;
	/* Serializes checkpoint, checkpoint_wait and destroy (the thread
	 * handle, the result). Taken before the swapper's lock, never
	 * while holding it. */
	pthread_mutex_t ckpt;
};

/* The first extent's key of a placement. */
static inline uint64_t nvs__xref_key(const struct nvs_extent *e)
{
	return e->off | e->path;
}

/* create(): after each path's rank directory is open, before its data
 * file. Scratch (@o->persist 0): -EEXIST when a directory holds a
 * persistent set. Persistent: reads and checks the kept manifests (layout
 * against @o), s->align raised to theirs; a new set otherwise (-ENOENT
 * for RESUME). No lock (the swapper is not shared yet). */
int nvs__persist_open(struct nvs_swapper *s, const struct nvs_swapper_opts *o);

/* create(): open (new set: create and empty) path @i's data file into
 * s->path[i] (fd, file, direct). No lock. */
int nvs__persist_data_file(struct nvs_swapper *s, unsigned i);

/* create(): once the spaces and pool exist, rebuild the placements and
 * the registry from the manifests read by nvs__persist_open(). No lock. */
int nvs__persist_restore(struct nvs_swapper *s);

/* destroy(): checkpoint (tag "destroy") and wait for it. 0 or -errno.
 * No lock held. */
int nvs__persist_close(struct nvs_swapper *s);

/* Free s->pers (its commit thread joined first; no lock held). */
void nvs__persist_free(struct nvs_swapper *s);

/* nvs_swapper_discard(): unlink every manifest and set.data of the set,
 * the lock still held. 0, or the first -errno (the sentence set). */
int nvs__persist_unlink(struct nvs_swapper *s);

/* @t was just placed (register): record its placement. 0, -ENOMEM. */
int nvs__persist_placed(struct nvs_swapper *s, struct tensor *t);

/* @t is going away (unregister): its placement is no longer current;
 * freed (space and disk blocks) unless a generation keeps it. */
void nvs__persist_unplace(struct nvs_swapper *s, struct tensor *t);

/* The placement at @ext is no longer a tensor's current one: freed
 * (space and disk blocks) unless a generation keeps it. */
void nvs__persist_uncurrent(struct nvs_swapper *s,
			    const struct nvs_extent *ext);

/* Before writing @t: when a generation keeps its placement, move it to a
 * new one (t->ext; the old one in t->old_ext until the write ends).
 * 0, or -errno (nothing changed). */
int nvs__persist_cow_begin(struct nvs_swapper *s, struct tensor *t);

/* @t's write ended (@ok: it succeeded): the old placement (@ok) or the
 * new one (failed; @t goes back to the old) stops being current. */
void nvs__persist_cow_end(struct nvs_swapper *s, struct tensor *t, bool ok);

/* A checkpoint's write of @t ended with @err (0: written); its sentence
 * in the last error. */
void nvs__persist_fence_done(struct nvs_swapper *s, struct tensor *t, int err);

/* Shared by persist.c and persist_open.c: add a placement record for
 * @ext (copied) or find the one with the same key; NULL on -ENOMEM or
 * when one with the same key has other extents (*@clash). */
struct nvs_xref *nvs__xref_get(struct nvs_pset *p, const struct nvs_extent *ext,
			       size_t n, bool *clash);
struct nvs_xref *nvs__xref_find(struct nvs_pset *p, const struct nvs_extent *e);
/* Drop @t's placement record, if any, without freeing its space (a
 * register that failed gives the space back itself). */
void nvs__xref_forget(struct nvs_pset *p, const struct tensor *t);

#endif
