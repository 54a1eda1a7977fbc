/* SPDX-License-Identifier: MIT */
/*
 * The three kinds of offloaded training state, on top of the swap manager
 * (nvswap/swapper.h): parameters walked layer by layer with read-ahead,
 * optimizer state swapped per sub-group with optional pipelining, and
 * gradients written behind during backward and read back for the step.
 *
 * Each role swapper borrows a struct nvs_swapper (which must outlive it).
 * A layer's or group's tensors are packed into one swapper tensor, each
 * at a 64-byte aligned offset, registered under id id_base + (group <<
 * 20): a group needs one pool buffer (so the packed group must fit in
 * buffer_size), and several roles can share one swapper when their
 * id_base differ (say 0 and 1 << 40). Threading: a role swapper is used
 * by one thread at a time; the swapper under it may be shared.
 *
 * Over a persistent swapper (opts.persist, nvswap/swapper.h) a role's
 * groups outlive it: each packed tensor's tag records the group's layout
 * (its tensor count and sizes), destroy leaves the tensors registered
 * (the swapper's own destroy checkpoints them), and adding a group the
 * reopened set holds takes it as saved (@init is ignored) when the layout
 * matches, or fails with -EINVAL naming the group when it does not.
 * Nothing stays in CPU memory there (max_in_cpu is ignored): what a
 * checkpoint must see is on NVMe. Gradients are zeroed each step and
 * need no persistence; they work on either kind of swapper.
 */
#ifndef NVSWAP_OFFLOAD_H
#define NVSWAP_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvswap/common.h"
#include "nvswap/swapper.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most tensors one layer or sub-group holds. */
#define NVS_OFFLOAD_MAX_TENSORS 64
/** Largest layer or group number + 1. */
#define NVS_OFFLOAD_MAX_GROUPS (1u << 20)
/** Longest walk nvs_param_set_walk() takes. */
#define NVS_OFFLOAD_MAX_WALK (4u * NVS_OFFLOAD_MAX_GROUPS)

/* ------------------------------------------------------------ parameters */

/** struct nvs_param_swapper_opts - fill with nvs_param_swapper_opts_init(). */
struct nvs_param_swapper_opts {
	size_t size;
	unsigned lookahead;  /* layers read ahead of the walk, default 1 */
	uint64_t max_in_cpu; /* bytes of parameters that never go to disk,
				default 0. Whole layers, in the order they
				are added, while they fit (DeepSpeed keeps
				the first parameters up to max_in_cpu
				elements) */
	uint64_t id_base;    /* default 0 */
	uint64_t reserved[6];
};

struct nvs_param_swapper;

/** nvs_param_swapper_opts_init() - the defaults. */
NVS_API void nvs_param_swapper_opts_init(struct nvs_param_swapper_opts *o);

/**
 * nvs_param_swapper_create() - a parameter swapper over @core (borrowed;
 * must outlive it). @opts: borrowed for the call.
 * Return: 0, -EINVAL (NULLs, opts not initialised), -ENOMEM.
 */
NVS_API int nvs_param_swapper_create(struct nvs_swapper *core,
				     const struct nvs_param_swapper_opts *opts,
				     struct nvs_param_swapper **out);

/**
 * nvs_param_swapper_destroy() - unregister every layer's tensors from the
 * swapper and free the resident ones. NULL is a no-op.
 * Return: 0, or the first error of an unregister (-EBUSY: a layer is
 * still acquired; the swapper is freed anyway).
 */
NVS_API int nvs_param_swapper_destroy(struct nvs_param_swapper *p);

/**
 * nvs_param_add_layer() - layer @layer: @n tensors of @nbytes[i] bytes,
 * initial contents @init[i] (@init or @init[i] NULL: zeros).
 * Return: 0, -EEXIST (the layer exists), -EINVAL (n is 0 or above
 * NVS_OFFLOAD_MAX_TENSORS, layer >= NVS_OFFLOAD_MAX_GROUPS, a zero size),
 * or nvs_swapper_register()'s errors (-EFBIG: the layer, packed, is
 * larger than a pool buffer). Nothing is added on failure.
 */
NVS_API int nvs_param_add_layer(struct nvs_param_swapper *p, unsigned layer,
				unsigned n, const size_t *nbytes,
				const void *const *init);

/**
 * nvs_param_add_layer_where() - nvs_param_add_layer() with the caller
 * choosing which layers max_in_cpu keeps: @in_cpu false streams @layer
 * from NVMe whatever max_in_cpu has left; true keeps it in CPU memory
 * when it fits what is left (as nvs_param_add_layer() does, which is this
 * with true). A server keeps its largest layers (embeddings) resident
 * this way, so the pool buffers need only fit the streamed ones.
 * Return: as nvs_param_add_layer().
 */
NVS_API int nvs_param_add_layer_where(struct nvs_param_swapper *p,
				      unsigned layer, unsigned n,
				      const size_t *nbytes,
				      const void *const *init, bool in_cpu);

/** nvs_layer_source.file of a tensor that reads as zeros. */
#define NVS_LAYER_ZEROS UINT32_MAX

/** struct nvs_layer_source - where a layer tensor's clean contents are. */
struct nvs_layer_source {
	uint32_t file;	   /* nvs_swapper_add_file()'s index on the core
			      swapper, or NVS_LAYER_ZEROS */
	uint32_t reserved; /* 0 */
	uint64_t offset;   /* of its nbytes[i] bytes in the file */
};

/**
 * nvs_param_add_layer_file() - layer @layer: @n tensors of @nbytes[i]
 * bytes whose clean contents are in files of the caller's (@src[i]):
 * weights served in place. The layer is streamed (max_in_cpu does not
 * keep it), packed as nvs_param_add_layer() packs, and its packed tensor
 * registered with nvs_swapper_register_file(): nothing is read or written
 * now, each read of the layer reads its tensors from their files (and
 * checks the files: -ESTALE for one changed since it was added), and once
 * released dirty and written back it lives in the swap file.
 * @src: borrowed for the call; @n entries.
 * Return: 0, nvs_param_add_layer()'s errors, or
 *   nvs_swapper_register_file()'s (-EINVAL naming a source with an
 *   unknown file or beyond its file, -EOPNOTSUPP for a persistent set).
 *   Nothing is added on failure.
 */
NVS_API int nvs_param_add_layer_file(struct nvs_param_swapper *p,
				     unsigned layer, unsigned n,
				     const size_t *nbytes,
				     const struct nvs_layer_source *src);

/**
 * nvs_param_prefetch_layer() - start reading @layer without waiting for
 * buffers (as far as free buffers go). Return: 0, -ENOENT, or a submit
 * error; a short pool is not an error.
 */
NVS_API int nvs_param_prefetch_layer(struct nvs_param_swapper *p,
				     unsigned layer);

/**
 * nvs_param_set_walk() - read ahead in the order a model uses its layers
 * rather than by layer number.
 * @layers: the forward pass's acquires in order, @n of them (borrowed
 *          for the call: the swapper keeps a copy). A layer may come
 *          more than once (a tied embedding used first and last, a module
 *          called twice); each must have been added. @n 0 (@layers may
 *          be NULL) removes the walk: read-ahead by number again.
 *
 * With a walk, nvs_param_acquire_layer() follows the acquires along it:
 * a position (the occurrence acquired last; none after this call) and a
 * direction (forward first). Acquiring the layer at the position again
 * stays there, and turns the walk at its ends: backward after the last
 * entry going forward (the backward pass starts where forward ended),
 * forward after the first going backward (the next step). Acquiring the
 * neighbour ahead moves one on; the neighbour behind turns the
 * direction and moves there; any other layer moves to its next
 * occurrence ahead, else to its first occurrence going forward (after
 * the last entry, the first entry there is a new pass: the forward
 * after an optimizer pass that went forward too). Then the next
 * lookahead distinct layers along the walk in its direction, other
 * than the one acquired, are read ahead, on past the walk's end into
 * the next pass or step: the swapper remembers what the acquire after
 * each end did (turned, or started over from the first entry) and
 * expects the same as one cycle of those ago (the shortest period they
 * repeat with: a turn every time for forward and backward alone; turn,
 * start over, turn... with an optimizer pass going forward; a turn
 * until something else was seen). So the next step's first layers are
 * read during this step's last ones, and the layers after the turn
 * during the last ones before it. A layer not in the walk is acquired
 * without read-ahead and leaves the position as it was. Take the walk
 * from the first step's acquires, as ZeRO-3 traces it; a later step
 * that strays only reads less ahead, or reads a few layers it does not
 * use (past an end, or layers the caller then skips): a layer read
 * ahead that the walk no longer lists ahead at any distance (the
 * position went past it, or a new walk does not hold it) gives its
 * buffer back at the next read-ahead once its read has landed, unchecked
 * (readaheads_unused), with or without auto_evict; one still listed
 * keeps what was read for it. A new walk forgets what was learned.
 * Return: 0, -EINVAL (@p NULL, @layers NULL with @n > 0, @n above
 * NVS_OFFLOAD_MAX_WALK), -ENOENT (an entry is not an added layer; the
 * message names the entry and the layer), -ENOMEM. On failure the
 * previous walk stays as it was.
 */
NVS_API int nvs_param_set_walk(struct nvs_param_swapper *p, unsigned n,
			       const unsigned *layers);

/**
 * nvs_param_acquire_layer() - the resident tensors of @layer.
 * @ptrs: receives one pointer per tensor, in add order.
 *
 * It starts reading the next lookahead layers in the walk's direction
 * into free buffers only, so the reads overlap the caller's compute:
 * along the walk given to nvs_param_set_walk(), or without one by
 * number (upwards after acquiring a lower layer, downwards after a
 * higher one: forward and backward passes both read ahead). A layer
 * not yet read is read first with the disk to itself, the read-ahead
 * starting once it is resident; one already being read (read ahead)
 * has its read queued first, and the read-ahead starts before the
 * wait for it, so the disk's queue stays as deep as the free buffers
 * allow.
 * Return: 0, -ENOENT (no such layer), nvs_swapper_acquire()'s errors,
 * or a read-ahead's submit error; on failure nothing stays acquired.
 */
NVS_API int nvs_param_acquire_layer(struct nvs_param_swapper *p, unsigned layer,
				    void **ptrs);

/**
 * nvs_param_release_layer() - end an acquire. @dirty: the parameters
 * changed (written back at eviction; clean layers are dropped without
 * I/O). Then the read-ahead of the last acquire is tried again: a layer
 * ahead that found no free buffer then may find one now (a write-back
 * ended during the compute), and its read goes in before the write-back
 * that evicting this layer starts (a read that cannot start now is left
 * to the acquire that needs the layer).
 * Return: 0, -ENOENT, -EBUSY (not acquired).
 */
NVS_API int nvs_param_release_layer(struct nvs_param_swapper *p, unsigned layer,
				    bool dirty);

/**
 * nvs_param_evict_layer() - give @layer's buffers back (write-back of
 * changed tensors starts now; a no-op for layers kept in CPU memory).
 * One exception: with a walk, an unchanged layer that the walk turns on
 * (the layer acquired last, at an end, expected again next: see
 * nvs_param_set_walk()) keeps its buffer until the next acquire, which
 * gets it without I/O; when that acquire is of another layer, the
 * buffer is given back first. (A changed layer is written back; an
 * acquire during that write gets the buffer at once too.)
 * Return: 0, -ENOENT, -EBUSY (acquired), or a write submit error.
 */
NVS_API int nvs_param_evict_layer(struct nvs_param_swapper *p, unsigned layer);

/** nvs_param_layer_in_cpu() - whether @layer is kept in CPU memory. */
NVS_API bool nvs_param_layer_in_cpu(const struct nvs_param_swapper *p,
				    unsigned layer);

/**
 * struct nvs_param_stats - counters of a parameter swapper since its
 * creation (the I/O itself is counted by the swapper's nvs_swap_stats).
 */
struct nvs_param_stats {
	uint64_t acquires;   /* successful nvs_param_acquire_layer() */
	uint64_t readaheads; /* layers the read-ahead brought in: a read
				started, or the buffer of a write-back in
				flight kept (none for layers resident or
				on their way already, nor when no buffer
				was free) */
	uint64_t readaheads_past_end; /* of those, listed past an end of
					 the walk: after the turn, or the
					 next step's first layers */
	uint64_t turns;	       /* acquires that turned the walk at an end */
	uint64_t restarts;     /* acquires after the last entry going forward
				  that started over from the first */
	uint64_t kept;	       /* clean evictions put off because the walk
				  turns on the layer */
	uint64_t kept_dropped; /* of those, given back at the next acquire,
				  which was of another layer */
	uint64_t readaheads_unused; /* layers read ahead that the walk then
				       no longer listed ahead, their buffers
				       given back unused (see
				       nvs_param_set_walk()) */
	uint64_t reserved[7];
};

/**
 * nvs_param_swapper_stats() - copy @p's counters into @st.
 * Return: 0, -EINVAL (a NULL argument).
 */
NVS_API int nvs_param_swapper_stats(const struct nvs_param_swapper *p,
				    struct nvs_param_stats *st);

/* ------------------------------------------------------- optimizer state */

/** struct nvs_optim_swapper_opts - fill with nvs_optim_swapper_opts_init(). */
struct nvs_optim_swapper_opts {
	size_t size;
	bool pipeline_read;  /* swap_in(g) also reads group g+1 ahead */
	bool pipeline_write; /* swap_out(g) returns before its write-back */
	uint8_t reserved8[6];
	uint64_t id_base; /* default 0 */
	uint64_t reserved[6];
};

struct nvs_optim_swapper;

NVS_API void nvs_optim_swapper_opts_init(struct nvs_optim_swapper_opts *o);

/** nvs_optim_swapper_create() - as nvs_param_swapper_create(). */
NVS_API int nvs_optim_swapper_create(struct nvs_swapper *core,
				     const struct nvs_optim_swapper_opts *opts,
				     struct nvs_optim_swapper **out);

/** nvs_optim_swapper_destroy() - as nvs_param_swapper_destroy(). */
NVS_API int nvs_optim_swapper_destroy(struct nvs_optim_swapper *o);

/**
 * nvs_optim_add_group() - sub-group @group with @n state tensors (e.g.
 * fp32 master weights, exp_avg, exp_avg_sq), sizes and initial contents as
 * nvs_param_add_layer(). Groups are stepped in the order they are added;
 * "the next group" is the next one added.
 */
NVS_API int nvs_optim_add_group(struct nvs_optim_swapper *o, unsigned group,
				unsigned n, const size_t *nbytes,
				const void *const *init);

/**
 * nvs_optim_swap_in() - the resident state tensors of @group (@state: one
 * pointer each). With pipeline_read, the next group's state is then read
 * ahead into whatever buffers are free, so it arrives while this group
 * steps. A group takes one buffer whatever its number of tensors, so the
 * full pipeline (read g+1, step g, write g-1) needs 3; fewer mean less
 * overlap, never a failure (1 buffer works, serially).
 * Return: as nvs_param_acquire_layer().
 */
NVS_API int nvs_optim_swap_in(struct nvs_optim_swapper *o, unsigned group,
			      void **state);

/**
 * nvs_optim_swap_out() - the step of @group is done: its state is written
 * back. Without pipeline_write this waits for the write; with it, the
 * write overlaps the next group's step (its buffers return when it ends,
 * collected by later calls). Return: 0, -ENOENT, -EBUSY (not swapped in),
 * or a write error (the state stays resident and dirty).
 */
NVS_API int nvs_optim_swap_out(struct nvs_optim_swapper *o, unsigned group);

/* ------------------------------------------------------------- gradients */

/** How nvs_grad_write() combines data with what the group holds. */
enum nvs_grad_mode {
	NVS_GRAD_ASSIGN = 0,	     /* copy */
	NVS_GRAD_ACCUMULATE_F32 = 1, /* add, as float32 (offset and size
					multiples of 4) */
};

struct nvs_grad_swapper_opts {
	size_t size;
	uint64_t id_base; /* default 0 */
	uint64_t reserved[6];
};

struct nvs_grad_swapper;

NVS_API void nvs_grad_swapper_opts_init(struct nvs_grad_swapper_opts *o);

/** nvs_grad_swapper_create() - as nvs_param_swapper_create(). */
NVS_API int nvs_grad_swapper_create(struct nvs_swapper *core,
				    const struct nvs_grad_swapper_opts *opts,
				    struct nvs_grad_swapper **out);

/** nvs_grad_swapper_destroy() - as nvs_param_swapper_destroy(). */
NVS_API int nvs_grad_swapper_destroy(struct nvs_grad_swapper *g);

/**
 * nvs_grad_add_group() - a gradient region of @nbytes for @group, reading
 * as zeros until written (no I/O). Return: 0, -EEXIST, -EINVAL, or
 * nvs_swapper_register()'s errors.
 */
NVS_API int nvs_grad_add_group(struct nvs_grad_swapper *g, unsigned group,
			       size_t nbytes);

/**
 * nvs_grad_write() - put a gradient partition at @offset of @group's
 * region (any offset and size: alignment is handled when the region is
 * written). The first write after a flush brings the region in (read
 * back, or zeros after nvs_grad_zero()) and keeps it until
 * nvs_grad_flush(). @data: borrowed for the call.
 * Return: 0, -ENOENT, -EINVAL (out of the region; ACCUMULATE_F32 with an
 * offset or size not a multiple of 4; an unknown mode), -EBUSY (the
 * region is acquired for reading), or nvs_swapper_acquire()'s errors
 * (-EDEADLK: every pool buffer is held, for instance by other open
 * regions: an open region keeps its buffer until its flush).
 */
NVS_API int nvs_grad_write(struct nvs_grad_swapper *g, unsigned group,
			   size_t offset, const void *data, size_t nbytes,
			   enum nvs_grad_mode mode);

/**
 * nvs_grad_flush() - write @group's region behind (returns at once; the
 * write overlaps what comes next). A no-op when nothing was written since
 * the last flush. Return: 0, -ENOENT, or a write submit error.
 */
NVS_API int nvs_grad_flush(struct nvs_grad_swapper *g, unsigned group);

/**
 * nvs_grad_acquire() - @group's region for the optimizer step (flushes
 * pending writes first; waits only for a read of this region: one whose
 * write-back is still in flight is handed out from the buffer being
 * written, see nvs_swapper_acquire()). Release with nvs_grad_release().
 * Return: as nvs_swapper_acquire().
 */
NVS_API int nvs_grad_acquire(struct nvs_grad_swapper *g, unsigned group,
			     const void **ptr);

/** nvs_grad_release() - end nvs_grad_acquire(); the region is evicted. */
NVS_API int nvs_grad_release(struct nvs_grad_swapper *g, unsigned group);

/**
 * nvs_grad_zero() - @group's region reads as zeros again (a new step):
 * no I/O, the old contents are dropped. Return: 0, -ENOENT, -EBUSY.
 */
NVS_API int nvs_grad_zero(struct nvs_grad_swapper *g, unsigned group);

#ifdef __cplusplus
}
#endif

#endif /* NVSWAP_OFFLOAD_H */
