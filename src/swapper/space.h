/* SPDX-License-Identifier: MIT */
/*
 * Swap space: where tensors live in the swap files. nvs__space is one
 * file's extent allocator (aligned ranges, best fit, freed ranges coalesce
 * and are reused, a free tail gives the file back its end); the layout
 * functions spread a tensor over several files (paths): at least
 * stripe_size bytes round-robin in stripe units, smaller ones whole to the
 * least-filled path.
 * Threading: none inside; the swapper serializes calls.
 */
#ifndef NVS_SWAPPER_SPACE_H
#define NVS_SWAPPER_SPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nvs_range {
	uint64_t off, len;
};

struct nvs_space {
	uint64_t align;		/* every offset and length is a multiple */
	uint64_t end;		/* file bytes in use: allocated or free below */
	uint64_t used;		/* allocated bytes */
	struct nvs_range *free; /* free ranges below end, sorted, disjoint,
				   never adjacent (coalesced) */
	size_t nfree, cap;
};

/* An empty space whose offsets and lengths are multiples of @align (a
 * power of two). */
void nvs__space_init(struct nvs_space *s, uint64_t align);
void nvs__space_fini(struct nvs_space *s);
/*
 * @len bytes (rounded up to the alignment) at *@off: the smallest free
 * range that fits (lowest on ties), else at the end. 0, -EINVAL for a
 * zero length, -ENOMEM, -EFBIG past 2^62.
 */
int nvs__space_alloc(struct nvs_space *s, uint64_t len, uint64_t *off);
/*
 * Give back [@off, @off + @len) (@len rounded as at alloc). Coalesces with
 * free neighbours; a range reaching the end lowers the end. -EINVAL when
 * the range is not wholly allocated (a double free, a bad offset): nothing
 * changes. -ENOMEM when the free table cannot grow (nothing changes).
 */
int nvs__space_free(struct nvs_space *s, uint64_t off, uint64_t len);

/* One piece of a tensor: bytes [tensor_off, +len) at @off of file @path. */
struct nvs_extent {
	uint64_t tensor_off;
	uint64_t off;
	uint64_t len;
	unsigned path;
};

/*
 * Place @nbytes over the @npaths spaces. At least @stripe bytes: stripe
 * units round-robin from the least-filled path, each path's share one
 * contiguous allocation; below @stripe: whole, in the least-filled space.
 * Writes the pieces in tensor order to @out (at most @max) and their count
 * to *@n. On failure nothing stays allocated. 0, -EINVAL (zero sizes,
 * @max too small: *@n then says how many are needed), -ENOMEM, -EFBIG.
 */
int nvs__space_place(struct nvs_space *spaces, unsigned npaths, uint64_t stripe,
		     uint64_t nbytes, struct nvs_extent *out, size_t max,
		     size_t *n);
/*
 * Mark [@off, @off + @len) allocated (@len rounded as at alloc), for
 * rebuilding a space from a record: past the end the gap becomes free.
 * 0, -EINVAL (bad range), -EEXIST (part of it is allocated already),
 * -ENOMEM.
 */
int nvs__space_reserve(struct nvs_space *s, uint64_t off, uint64_t len);
/* Claim the allocations @ext describes (as nvs__space_place() made
 * them) with nvs__space_reserve(); all or nothing. */
int nvs__space_claim(struct nvs_space *spaces, const struct nvs_extent *ext,
		     size_t n);
/* Give back what nvs__space_place() placed. */
void nvs__space_release(struct nvs_space *spaces, const struct nvs_extent *ext,
			size_t n);

#endif
