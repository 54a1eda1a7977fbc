// SPDX-License-Identifier: MIT
/*
 * Swap space: a sorted table of free ranges per file (a swap file holds
 * few large tensors, so a table beats a tree), best-fit allocation, and
 * the striping layout over several files.
 */
#include "swapper/space.h"
#include "internal/alloc.h"
#include "internal/util.h"

#include <errno.h>
#include <string.h>

#define MAX_END (1ull << 62)

void nvs__space_init(struct nvs_space *s, uint64_t align)
{
	memset(s, 0, sizeof(*s));
	s->align = align ? align : 1;
}

void nvs__space_fini(struct nvs_space *s)
{
	nvs__free(s->free);
	memset(s, 0, sizeof(*s));
}

static uint64_t round_len(const struct nvs_space *s, uint64_t len)
{
	return (len + s->align - 1) & ~(s->align - 1);
}

static void remove_at(struct nvs_space *s, size_t i)
{
	memmove(&s->free[i], &s->free[i + 1],
		(s->nfree - i - 1) * sizeof(*s->free));
	s->nfree--;
}

int nvs__space_alloc(struct nvs_space *s, uint64_t len, uint64_t *off)
{
	size_t best = SIZE_MAX;

	if (len == 0 || len > MAX_END)
		return -EINVAL;
	len = round_len(s, len);
	for (size_t i = 0; i < s->nfree; i++)
		if (s->free[i].len >= len &&
		    (best == SIZE_MAX || s->free[i].len < s->free[best].len))
			best = i;
	if (best != SIZE_MAX) {
		struct nvs_range *r = &s->free[best];
		*off = r->off;
		r->off += len;
		r->len -= len;
		if (r->len == 0)
			remove_at(s, best);
	} else {
		if (s->end + len > MAX_END)
			return -EFBIG;
		*off = s->end;
		s->end += len;
	}
	s->used += len;
	return 0;
}

int nvs__space_free(struct nvs_space *s, uint64_t off, uint64_t len)
{
	size_t i = 0;
	bool left, right;

	if (len == 0 || off % s->align || len > MAX_END)
		return -EINVAL;
	len = round_len(s, len);
	if (off > s->end || len > s->end - off)
		return -EINVAL;
	/* i: first free range after @off. */
	while (i < s->nfree && s->free[i].off < off)
		i++;
	/* The range must not overlap a free one (double free). */
	if (i > 0 && s->free[i - 1].off + s->free[i - 1].len > off)
		return -EINVAL;
	if (i < s->nfree && off + len > s->free[i].off)
		return -EINVAL;
	left = i > 0 && s->free[i - 1].off + s->free[i - 1].len == off;
	right = i < s->nfree && off + len == s->free[i].off;
	if (!left && !right && off + len != s->end &&
	    !nvs__reserve(&s->free, &s->cap, s->nfree, s->nfree + 1,
			  sizeof(*s->free)))
		return -ENOMEM;
	s->used -= len;
	if (left && right) {
		s->free[i - 1].len += len + s->free[i].len;
		remove_at(s, i);
	} else if (left) {
		s->free[i - 1].len += len;
	} else if (right) {
		s->free[i].off = off;
		s->free[i].len += len;
	} else if (off + len != s->end) {
		memmove(&s->free[i + 1], &s->free[i],
			(s->nfree - i) * sizeof(*s->free));
		s->free[i] = (struct nvs_range){off, len};
		s->nfree++;
	} else {
		s->end = off; /* the tail is free: the file shrinks */
		return 0;
	}
	/* A free range that reaches the end gives the end back. */
	if (s->nfree &&
	    s->free[s->nfree - 1].off + s->free[s->nfree - 1].len == s->end) {
		s->end = s->free[s->nfree - 1].off;
		s->nfree--;
	}
	return 0;
}

static unsigned least_filled(const struct nvs_space *spaces, unsigned n)
{
	unsigned best = 0;

	for (unsigned p = 1; p < n; p++)
		if (spaces[p].used < spaces[best].used)
			best = p;
	return best;
}

/* Bytes of the striped tensor that land on @path. */
static uint64_t share(uint64_t nbytes, uint64_t stripe, unsigned npaths,
		      unsigned first, unsigned path)
{
	uint64_t chunks = (nbytes + stripe - 1) / stripe, bytes = 0;

	for (uint64_t i = (path + npaths - first) % npaths; i < chunks;
	     i += npaths)
		bytes += NVS_MIN(stripe, nbytes - i * stripe);
	return bytes;
}

int nvs__space_place(struct nvs_space *spaces, unsigned npaths, uint64_t stripe,
		     uint64_t nbytes, struct nvs_extent *out, size_t max,
		     size_t *n)
{
	uint64_t base[64];
	unsigned first, p;
	uint64_t chunks;
	int ret;

	if (!npaths || npaths > 64 || !stripe || !nbytes ||
	    stripe % spaces[0].align)
		return -EINVAL;
	first = least_filled(spaces, npaths);
	if (nbytes < stripe || npaths == 1) {
		*n = 1;
		if (max < 1)
			return -EINVAL;
		ret = nvs__space_alloc(&spaces[first], nbytes, &out[0].off);
		if (ret < 0)
			return ret;
		out[0].tensor_off = 0;
		out[0].len = nbytes;
		out[0].path = first;
		return 0;
	}
	chunks = (nbytes + stripe - 1) / stripe;
	*n = (size_t)chunks;
	if (chunks > max)
		return -EINVAL;
	for (p = 0; p < npaths; p++) {
		uint64_t bytes = share(nbytes, stripe, npaths, first, p);
		if (bytes == 0)
			continue;
		ret = nvs__space_alloc(&spaces[p], bytes, &base[p]);
		if (ret < 0) {
			while (p-- > 0) {
				uint64_t b =
					share(nbytes, stripe, npaths, first, p);
				if (b)
					nvs__space_free(&spaces[p], base[p], b);
			}
			return ret;
		}
	}
	for (uint64_t i = 0; i < chunks; i++) {
		p = (unsigned)((first + i) % npaths);
		out[i] = (struct nvs_extent){
			.tensor_off = i * stripe,
			.off = base[p] + (i / npaths) * stripe,
			.len = NVS_MIN(stripe, nbytes - i * stripe),
			.path = p,
		};
	}
	return 0;
}

int nvs__space_reserve(struct nvs_space *s, uint64_t off, uint64_t len)
{
	size_t i;

	if (len == 0 || off % s->align || len > MAX_END || off > MAX_END - len)
		return -EINVAL;
	len = round_len(s, len);
	if (off >= s->end) {
		/* Past the end: the gap before it becomes free. */
		if (off > s->end) {
			if (!nvs__reserve(&s->free, &s->cap, s->nfree,
					  s->nfree + 1, sizeof(*s->free)))
				return -ENOMEM;
			s->free[s->nfree++] =
				(struct nvs_range){s->end, off - s->end};
		}
		s->end = off + len;
		s->used += len;
		return 0;
	}
	/* Below the end: it must lie wholly in one free range. */
	for (i = 0; i < s->nfree; i++)
		if (s->free[i].off <= off &&
		    off + len <= s->free[i].off + s->free[i].len)
			break;
	if (i == s->nfree)
		return -EEXIST;
	{
		struct nvs_range r = s->free[i];
		uint64_t head = off - r.off, tail = r.off + r.len - off - len;
		if (head && tail) {
			if (!nvs__reserve(&s->free, &s->cap, s->nfree,
					  s->nfree + 1, sizeof(*s->free)))
				return -ENOMEM;
			memmove(&s->free[i + 2], &s->free[i + 1],
				(s->nfree - i - 1) * sizeof(*s->free));
			s->nfree++;
			s->free[i] = (struct nvs_range){r.off, head};
			s->free[i + 1] = (struct nvs_range){off + len, tail};
		} else if (head) {
			s->free[i].len = head;
		} else if (tail) {
			s->free[i] = (struct nvs_range){off + len, tail};
		} else {
			remove_at(s, i);
		}
	}
	s->used += len;
	return 0;
}

/* Each path's pieces of @ext as one allocation, as place makes them:
 * from its lowest offset, the sum of its lengths. */
static void path_share(const struct nvs_extent *ext, size_t n, size_t i,
		       uint64_t *lo, uint64_t *total, bool *first)
{
	*lo = ext[i].off;
	*total = 0;
	*first = true;
	for (size_t j = 0; j < i && *first; j++)
		*first = ext[j].path != ext[i].path;
	for (size_t j = i; j < n; j++)
		if (ext[j].path == ext[i].path) {
			*total += ext[j].len;
			if (ext[j].off < *lo)
				*lo = ext[j].off;
		}
}

int nvs__space_claim(struct nvs_space *spaces, const struct nvs_extent *ext,
		     size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t lo, total;
		bool first;
		int ret;

		path_share(ext, n, i, &lo, &total, &first);
		if (!first)
			continue;
		ret = nvs__space_reserve(&spaces[ext[i].path], lo, total);
		if (ret < 0) {
			/* Give back the paths claimed before this one. */
			for (size_t j = 0; j < i; j++) {
				path_share(ext, n, j, &lo, &total, &first);
				if (first)
					nvs__space_free(&spaces[ext[j].path],
							lo, total);
			}
			return ret;
		}
	}
	return 0;
}

void nvs__space_release(struct nvs_space *spaces, const struct nvs_extent *ext,
			size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t lo, total;
		bool first;

		path_share(ext, n, i, &lo, &total, &first);
		if (first)
			nvs__space_free(&spaces[ext[i].path], lo, total);
	}
}
