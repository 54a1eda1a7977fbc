/* SPDX-License-Identifier: MIT */
/*
 * The swap manager's shared state, for the files that make it up: a
 * swapper (its lock, paths, spaces, pool, aio handle, registry, lists and
 * counters) and a tensor (its state, buffer, extents and tickets).
 */
#ifndef NVS_SWAPPER_SWAPPER_IMPL_H
#define NVS_SWAPPER_SWAPPER_IMPL_H

#include "internal/hash.h"
#include "swapper/share.h"
#include "swapper/space.h"
#include "swapper/swapdir.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/buffers.h"
#include "nvswap/swapper.h"

struct tensor;
struct nvs_pset;
struct nvs_wfile;
struct nvs_backing;

/* A list of tensors through their prev/next links. */
struct tlist {
	struct tensor *head, *tail;
	unsigned n;
};

struct tensor {
	UT_hash_handle hh;
	uint64_t id;
	size_t nbytes;
	enum nvs_tensor_state state;
	void *buf;     /* pool buffer: RESIDENT, READING, WRITING */
	unsigned pins; /* acquires not released */
	/* Whose acquires they are, for the census's -EDEADLK: holder_pins
	 * of them by holder, the rest by other (other_multi: by more than
	 * one other thread). A release counts against its own thread's. */
	pthread_t holder, other;
	unsigned holder_pins;
	bool other_multi;
	bool dirty;   /* RESIDENT data differs from the disk's */
	bool on_disk; /* written at least once; else reads as zeros */
	bool stale;   /* not on_disk, but its blocks hold an old write (a
			 cleared gradient region): punched when removed */
	bool revive;  /* WRITING: keep the buffer when the write ends */
	bool redirty; /* WRITING: released dirty since the write started (it
			 was acquired meanwhile): still dirty when it ends */
	bool blank;   /* RESIDENT, acquired blank from NVMe: the buffer holds
			 none of its data until a release says dirty; the
			 last release without it gives the buffer back */
	/* A thread works on this tensor with the lock dropped (collects its
	 * tickets, checksums, writes its init data); others wait on cond and
	 * look the tensor up again. */
	bool busy;
	struct tlist *on; /* s->lru (RESIDENT, unpinned) or s->flight
			     (READING, WRITING), or NULL */
	struct tensor *prev, *next;
	int err;	    /* a failed read or write nobody reported yet */
	char *errmsg;	    /* its sentence (NULL when it could not be kept) */
	uint32_t crc;	    /* CRC32C of what is on disk (checksum mode) */
	uint32_t wcrc;	    /* of the write in flight */
	int io_err;	    /* first failure among tickets already collected */
	char *io_msg;	    /* its sentence */
	size_t next_ticket; /* tickets collected so far */
	size_t ntickets;    /* tickets of the I/O in flight */
	size_t nexts;	    /* extents */
	struct nvs_extent *ext;
	uint64_t *tickets; /* one per extent */
	/* Persistent sets (see persist.h): a second extent array for copy
	 * on write, the extents being replaced while such a write is in
	 * flight (NULL otherwise), the caller's tag, and the fence of a
	 * checkpoint's write (acquire waits for it). */
	struct nvs_extent *alt;
	struct nvs_extent *old_ext;
	uint8_t *tag;
	uint16_t taglen;
	bool fence;
	/* An undoable step (see step.h): changed in it (released dirty,
	 * written or cleared); whether the disk no longer holds its value
	 * at the open; that value's placement when a write went elsewhere
	 * (NULL: it had none, or is still in place); and its on_disk and
	 * crc at the first change. */
	bool touched;
	bool diverged;
	bool fresh; /* moved, and no write to the new placement started */
	bool kept_on_disk;
	uint32_t kept_crc;
	struct nvs_extent *kept;
	/* A file-backed tensor (backing.h): its pieces of the caller's
	 * files; whether they hold its value while it is not on_disk (a
	 * clear drops them; an undo restores kept_backed); and whether the
	 * read in flight is theirs (then tickets are the backing's). */
	struct nvs_backing *bk;
	bool backed;
	bool kept_backed;
	bool from_file;
};

struct path {
	struct nvs_swapdir dir;
	int fd;
	bool direct;
	uint64_t file_size;
	char file[4200];
};

struct nvs_swapper {
	unsigned long born; /* fork generation: see internal/fork.h */
	/* Protects everything below that is not set at create. I/O waits,
	 * checksums and zero fills run with it dropped (see tensor.busy). */
	pthread_mutex_t lock;
	/* Broadcast when a tensor stops being busy or in flight, is
	 * released, evicted or removed, and when a buffer goes back. */
	pthread_cond_t cond;
	struct nvs_aio *aio;
	/* The reads of added files (backing.c), made at the first
	 * nvs_swapper_add_file() from aio_opts with the handle's default
	 * bounce memory: their offsets are the files' (safetensors' are
	 * unaligned), so most of their bytes pass through it. */
	struct nvs_aio *faio;
	struct nvs_aio_opts aio_opts;
	struct nvs_pool *pool;
	unsigned npaths;
	struct path path[NVS_SWAPPER_MAX_PATHS];
	struct nvs_space space[NVS_SWAPPER_MAX_PATHS]; /* one per path */
	uint64_t align;	  /* file offsets and I/O lengths */
	uint64_t stripe;  /* stripe unit */
	size_t max_bytes; /* largest tensor (opts.buffer_size) */
	size_t buf_size;  /* pool buffer: max_bytes rounded to align */
	bool auto_evict, checksum;
	bool page_cache;  /* opts.page_cache: swap files without O_DIRECT */
	bool keep_blocks; /* opts.keep_blocks: unregister punches no hole */
	uint32_t wait_ms;
	struct tensor *table;
	struct tlist lru;    /* least recently released first */
	struct tlist flight; /* oldest submission first */
	unsigned in_use;
	struct nvs_swap_stats st;
	struct nvs_pset *pers; /* NULL for scratch space */
	bool discard;	       /* nvs_swapper_discard(): remove the set */
	bool readonly;	       /* NVS_PERSIST_READONLY: nothing is written */
	/* Files tensors read from (nvs_swapper_add_file()); grown under the
	 * lock, each entry fixed once added. */
	struct nvs_wfile **files; /* NVS_SWAPPER_MAX_FILES slots */
	unsigned nfiles;
	/* nvs_swapper_step_begin(): the open step's name, "" when none;
	 * undoable: opened with NVS_STEP_UNDOABLE (see step.h). */
	char step[NVS_STEP_NAME_MAX + 1];
	bool undoable;
	uint64_t undo_min, undo_max; /* the ids it covers */
	unsigned long step_gen;	     /* undoable steps opened */
	/* The processes the disks are shared with (share.c): a read-only
	 * set's readers, nvs_swapper_share_disk()'s lock holders. */
	struct nvs__share share;
};

#endif
