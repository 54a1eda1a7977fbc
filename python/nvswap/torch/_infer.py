# SPDX-License-Identifier: MIT
"""offload(inference=True, memory=): a model that only runs forward
(serving, generate()).

inference=True makes no gradient or optimizer pool (no Swapper at all
beside the parameters'), writes nothing back, and refuses what would need
them: gradients (a backward through the model raises), an nvswap.torch
optimizer, persist=, grad_hook=, the optimizer pool keywords.

memory= is a host-memory budget for what nvswap holds for the model: the
parameter pool (buffer_size from the largest streamed layer, 2 buffers,
more only where they stream no more) and, with the rest, whole layers
kept resident in CPU memory (spread along the walk; they are never read
from NVMe again), chosen to stream the fewest bytes per forward, so that
more memory never streams more (fit()). A model that fits runs at
in-memory speed; one that does not streams only what does not fit. An
input embedding may be read by rows instead (_rows.py): it needs neither
a buffer nor residency."""
import errno
import functools

import nvswap

from . import _room, _rows
from ._common import ALIGN, error

_OPTIMIZER_KW = ("optimizer_buffer_size", "optimizer_buffer_count")


def check(inference, memory, persist, grad_hook, kw):
    """Refuse what inference=True and memory= cannot take (ValueError,
    TypeError naming the keyword)."""
    if not isinstance(inference, bool):
        raise TypeError("nvswap.torch.offload: inference must be True or "
                        f"False, not {type(inference).__name__}")
    if memory is not None and not inference:
        raise ValueError("nvswap.torch.offload: memory= sizes the pools of "
                         "an inference model (inference=True); a training "
                         "model's come from buffer_size=, buffer_count= and "
                         "the optimizer pool keywords")
    if not inference:
        return
    if grad_hook is not None:
        raise ValueError("nvswap.torch.offload: inference=True computes no "
                         "gradients: grad_hook= would never be called")
    for k in _OPTIMIZER_KW:
        if kw.get(k) is not None:
            raise ValueError(f"nvswap.torch.offload: inference=True makes "
                             f"no optimizer pool: {k}= has no use")


class Short(ValueError):
    """A budget too small to serve the model; least: the least that
    serves it (what the message quotes)."""

    def __init__(self, text, least):
        super().__init__(text)
        self.least = least


def budget(memory, layer_bytes, lookahead, buffer_count=None,
           buffer_size=None, rows=()):
    """(buffer_size, buffer_count, in_cpu, by_rows) for a budget of
    memory bytes: fit()'s plan of every layer, or, with rows (the
    indexes of layers that can be read by rows, _rows.candidates),
    fit()'s plan of the others in what reading by rows leaves
    (_rows.MEMORY), by_rows those layers (they then need no buffer and
    no residency, and a forward reads only the rows its ids use),
    whichever streams fewer layer bytes per forward (the whole plan on
    a tie: the rows a forward reads depend on its ids). Each plan's
    bytes never grow with memory, nor does the lesser of the two. A
    budget neither serves is refused (Short) quoting the lesser least
    budget of the two, which serves."""
    rows = set(rows)
    plans, short = [], []
    try:
        plans.append(fit(memory, layer_bytes, lookahead, buffer_count,
                         buffer_size) + (set(),))
    except Short as e:
        short.append(e)
    if rows:
        rest = [i for i in range(len(layer_bytes)) if i not in rows]
        try:
            size, count, keep = fit(memory, [layer_bytes[i] for i in rest],
                                    lookahead, buffer_count, buffer_size,
                                    _rows.MEMORY)
            plans.append((size, count, {rest[i] for i in keep}, rows))
        except Short as e:
            short.append(e)
    if not plans:
        raise min(short, key=lambda e: e.least)

    def streamed(plan):
        return sum(b for i, b in enumerate(layer_bytes)
                   if i not in plan[2] and i not in plan[3])

    return min(plans, key=streamed)  # the first, the whole plan, on a tie


def fit(memory, layer_bytes, lookahead, buffer_count=None,
        buffer_size=None, reserve=0):
    """(buffer_size, buffer_count, in_cpu) for a budget of memory bytes:
    a pool of buffer_count buffers of buffer_size and in_cpu, the set of
    layers (indexes into layer_bytes, each layer's pool bytes in add
    order) kept resident with the rest.

    The fewest bytes streamed per forward come first, so that more
    memory never streams more: without buffer_size, the t largest
    layers may be made resident so that the buffers need only fit the
    largest streamed one (a Llama's embedding and head are each several
    decoder layers), every t is tried, and the other layers are kept
    along the walk (spread()) in what two buffers leave; then the
    deepest pool (up to the read-ahead's lookahead + 2 buffers) that
    streams no more bytes, and a pool of 2 when nothing streams; then
    the smaller pool. Refused (Short, naming the sizes and the least
    budget that serves) when no choice fits two buffers. reserve: bytes
    of memory taken by something else."""
    avail = memory - reserve
    n, total = len(layer_bytes), sum(layer_bytes)
    order = sorted(range(n), key=lambda i: -layer_bytes[i])
    least_k = max(2, buffer_count or 2)
    best, least = None, None
    for t in (range(n + 1) if buffer_size is None else [None]):
        if t is None:
            forced, size = [], buffer_size
        else:
            forced = order[:t]
            size = layer_bytes[order[t]] if t < n else min(layer_bytes,
                                                           default=ALIGN)
            size = max(ALIGN, (size + ALIGN - 1) // ALIGN * ALIGN)
        held = sum(layer_bytes[i] for i in forced)
        left = avail - held
        need = held + least_k * size + reserve
        least = need if least is None else min(least, need)
        counts = ([buffer_count] if buffer_count is not None else
                  range(2, max(2, lookahead + 2) + 1))
        first = None
        for count in counts:
            if left < max(2, count) * size:
                break
            keep = set(forced) | spread(layer_bytes, forced,
                                        left - count * size)
            streamed = total - sum(layer_bytes[i] for i in keep)
            if first is None:
                first = streamed
            elif streamed > first or first == 0:
                break  # a deeper pool streams more, or nothing streams
            score = (streamed, -count if streamed else count,
                     count * size, t or 0)
            if best is None or score < best[0]:
                best = (score, size, count, keep)
    if best is not None:
        return best[1:]
    beside = (f" beside {reserve} bytes for reading embeddings by rows"
              if reserve else "")
    if buffer_size is not None and buffer_count is not None and \
            avail >= 2 * buffer_size:
        raise Short(f"nvswap.torch.offload: memory={memory} bytes cannot "
                    f"hold buffer_count={buffer_count} buffers of "
                    f"{buffer_size} bytes{beside}: give it at least "
                    f"{least} bytes", least)
    big = buffer_size if buffer_size is not None else max(
        [ALIGN] + [(b + ALIGN - 1) // ALIGN * ALIGN for b in layer_bytes])
    also = "" if buffer_size is not None else (
        ", nor its largest layers resident beside buffers of the next")
    k = least_k
    raise Short(f"nvswap.torch.offload: memory={memory} bytes cannot hold "
                f"{'two' if k == 2 else k} buffers of the largest layer "
                f"({k} x {big} = {k * big} bytes){also}{beside}: give it "
                f"at least {least} bytes", least)


@functools.lru_cache(maxsize=16)
def spread_order(n):
    """Positions 0 .. n-1 of a walk in the order spread() keeps them:
    the last, then those ending its halves, quarters, eighths... (at
    1/2, 1/4, 3/4, 1/8, ... of the walk), so that the first k of them
    lie evenly along it for any k (2 of 4: the 2nd and 4th; 2 of 5: the
    3rd and 5th)."""
    out, seen, den = [], set(), 1
    while len(out) < n:
        for num in range(1, den + 1, 2):
            i = max(0, -(-num * n // den) - 1)  # ceil(num / den * n) - 1
            if i not in seen:
                seen.add(i)
                out.append(i)
        den *= 2
    return tuple(out)


def spread(layer_bytes, taken, room):
    """Layers (not in taken) to keep resident in room bytes: first fit in
    spread_order() along the add order (the walk of a forward), rather
    than first fit in add order. While a resident layer computes, the
    disk reads ahead into the free buffers, so resident layers bunched
    at the start leave the disk idle there, and the streamed ones
    bunched later leave it behind. First fit in one order that room
    does not change keeps no fewer bytes in more room: where the first
    choice differs, the larger room takes a layer larger than all the
    smaller one has left."""
    taken = set(taken)
    rest = [i for i in range(len(layer_bytes)) if i not in taken]
    out = set()
    for k in spread_order(len(rest)):
        i = rest[k]
        if layer_bytes[i] <= room:
            out.add(i)
            room -= layer_bytes[i]
    return out


def streamed_bytes(model, size_of, rows, kept):
    """Without memory=: the bytes a forward of model streams, its
    parameters' but those of embeddings read by rows (rows, modules) and
    kept (max_in_cpu= bytes, or None)."""
    skip = {id(p) for m in rows for p in m.parameters()}
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen and id(p) not in skip:
            seen.add(id(p))
            total += (size_of(p) + ALIGN - 1) // ALIGN * ALIGN
    return max(0, total - (kept or 0))


def cache_fits(streamed, held):
    """page_cache='auto': True when the memory this process may still
    fill (_room.available()), less held (the budget nvswap is about to
    take), holds every streamed byte with an eighth to spare. A cache
    that cannot hold them all is cycled through by each forward's walk
    (every read a miss, plus the reclaim): measured in a memory cgroup
    below the model, 0.77 x O_DIRECT's tokens/s (bench/RESULTS.md)."""
    room = _room.available()
    return room is not None and room - held >= streamed + streamed // 8


def layer_sizes(plan, size_of):
    """Each planned layer's bytes in its pool buffer."""
    return [sum((size_of(p) + ALIGN - 1) // ALIGN * ALIGN for _, p in chunk)
            for _, _, chunk in plan]


def refuse_grads(eng, p):
    """A hook on an inference model's parameter: a backward that reaches
    it raises (before: gradients with nowhere to go)."""
    name = p._nvswap.name

    def hook(grad):
        raise error(errno.EPERM,
                    f"nvswap.torch: parameter '{name}' of a model "
                    "offloaded with inference=True got a gradient: "
                    "inference=True makes no gradient pool (run it under "
                    "torch.no_grad() or torch.inference_mode(), or offload "
                    "without inference=True to train)")

    eng.handles.append(p.register_hook(hook))


def bind(eng):
    """An inference model computing on the CPU: each layer kept in CPU
    memory is acquired once, for good, its parameters pointing at that
    memory (read-only: nothing is written back), and modules whose layers
    are all such get no forward hooks: the acquire and release of every
    module in every forward cost a small model a fifth of its decoding
    step. Streamed layers keep their hooks; the walk is theirs alone.
    An embedding read by rows (_rows.py) gets its forward replaced by
    the lookup, and no hooks either."""
    if eng.gswap is not None or eng.device is not None:
        return
    for layer in range(len(eng.layers)):
        if eng.params.layer_in_cpu(layer):
            _bind_layer(eng, layer)
        elif layer in eng.copy_in_cpu:
            _copy_layer(eng, layer)
    for m, ls in eng.mod_layers.items():
        if ls and ls[0] in eng.rows:
            _rows.forward_by_rows(m, eng.rows[ls[0]])
    _hooked_layers(eng)
    if eng.copied:
        # Layers copied out of a set are, to the C swapper, layers on
        # NVMe like any other: before a walk is known it reads ahead by
        # number, and would read them only to give their buffers back
        # once passed (readaheads_unused), a wasted read each time.
        # The streamed layers in add order until the first forward
        # traces the walk.
        eng._set_walk([x for x in range(len(eng.layers))
                       if x not in eng.bound and x not in eng.rows])


def _bind_layer(eng, layer):
    """Acquire layer for good, its parameters pointing at its memory."""
    try:
        tensors = eng.params.acquire_layer(layer)
    except nvswap.Error as e:
        raise eng._layer_error(layer, e) from e
    for p, t in zip(eng.layers[layer], tensors):
        p.data = t
    eng.bound.add(layer)


def _copy_layer(eng, layer):
    """A layer of a set served read-only kept in CPU memory: read out of
    the set into memory of its own, no pool buffer taken (any size)."""
    ps = eng.layers[layer]
    copies = eng.read_out(layer, [p._nvswap.placeholder for p in ps])
    for p, t in zip(ps, copies):
        p.data = t
    eng.bound.add(layer)
    eng.copied.add(layer)


def first_fit(plan, budget, size_of):
    """The layers (indexes into plan) the C budget of max_in_cpu bytes
    would keep, in add order: each one that still fits."""
    out, left = set(), budget or 0
    for i, b in enumerate(layer_sizes(plan, size_of)):
        if b <= left:
            out.add(i)
            left -= b
    return out


def _hooked_layers(eng):
    """Each module's layers its forward hooks acquire: neither bound nor
    read by rows."""
    eng.fwd_layers = {m: [x for x in ls if x not in eng.bound and
                          x not in eng.rows]
                      for m, ls in eng.mod_layers.items()}
    eng.fwd_layers = {m: ls for m, ls in eng.fwd_layers.items() if ls}


def keep_streamed(eng, layers):
    """The read-ahead's choice (_depth.Tuner): streamed layers kept for
    good in the pool buffers they are read into, bound as layers kept in
    CPU memory are; the walk goes on without them (no read, no hook).
    All or none: when a layer cannot be read (its nvswap.Error raised,
    naming it), those kept before it are let go again.

    The walk loses them first: acquired while still in it, each would
    move the walk's position there and read ahead from it, layers the
    next forward then passes."""
    walk = [x for x in eng.walk if x not in eng.bound]
    if walk:
        eng._set_walk([x for x in walk if x not in layers])
    try:
        for layer in layers:
            _bind_layer(eng, layer)
            eng.kept_streamed.append(layer)
    except BaseException:
        _let_go(eng, [x for x in layers if x in eng.kept_streamed])
        if walk:
            eng._set_walk(walk)
        raise
    _hooked_layers(eng)


def unkeep_streamed(eng, layers, walk):
    """keep_streamed() undone: the layers released (clean: nothing is
    written) and streamed again along walk."""
    _let_go(eng, layers)
    _hooked_layers(eng)
    eng._set_walk(walk)


def _let_go(eng, layers):
    """Kept layers released (clean) and evicted: streamed again."""
    for layer in layers:
        for p in eng.layers[layer]:
            p.data = p._nvswap.placeholder
        eng.bound.discard(layer)
        eng.kept_streamed.remove(layer)
        eng.params.release_layer(layer, False)
        try:
            eng.params.evict_layer(layer)
        except nvswap.Error:
            pass  # clean: it can only be dropped, the next acquire says


def stats(eng):
    """The inference figures of nvt.stats()."""
    resident = [i for i in range(len(eng.layers))
                if eng.params.layer_in_cpu(i) or i in eng.kept_streamed
                or i in eng.copied]
    return {
        "inference": eng.gswap is None,
        "page_cache": bool(eng.page_cache),
        "lookahead": eng.lookahead,
        "resident_layers": len(resident),
        "resident_bytes": sum(eng.layer_bytes[i] for i in resident),
        "forwards": eng.forwards,
        "last_forward_bytes_read": eng.last_forward_read,
        "row_layers": len(eng.rows),
        "row_bytes": sum(t.nbytes for t in eng.rows.values()),
        "rows_read": sum(t.rows_read for t in eng.rows.values()),
        "read_ahead": (dict(eng.tuner.report) if eng.tuner is not None
                       else None),
    }

