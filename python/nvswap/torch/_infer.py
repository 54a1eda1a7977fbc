# SPDX-License-Identifier: MIT
"""offload(inference=True, memory=): a model that only runs forward
(serving, generate()).

inference=True makes no gradient or optimizer pool (no Swapper at all
beside the parameters'), writes nothing back, and refuses what would need
them: gradients (a backward through the model raises), an nvswap.torch
optimizer, persist=, grad_hook=, the optimizer pool keywords.

memory= is a host-memory budget for what nvswap holds for the model: the
parameter pool (buffer_size from the largest layer, as many buffers as
the read-ahead needs) and, with the rest, whole layers kept resident in
CPU memory (the C ParamSwapper's max_in_cpu: in the order they are added,
while they fit; they are never read from NVMe again). A model that fits
runs at in-memory speed; one that does not streams only what does not
fit. An input embedding is read by rows instead (_rows.py): it needs
neither a buffer nor residency."""
import errno

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


def budget(memory, layer_bytes, lookahead, buffer_count=None,
           buffer_size=None, rows=()):
    """(buffer_size, buffer_count, in_cpu, by_rows) for a budget of
    memory bytes: fit()'s plan of every layer when it keeps them all
    resident; else, with rows (the indexes of layers that can be read by
    rows, _rows.candidates), fit()'s plan of the others in what reading
    by rows leaves (_rows.MEMORY), and by_rows those layers: they then
    need no buffer, no residency and stream only the rows a forward
    uses. Without rows, or when what reading by rows takes leaves too
    little, by_rows is empty."""
    rows, plan = set(rows), None
    try:
        plan = fit(memory, layer_bytes, lookahead, buffer_count,
                   buffer_size)
        if not rows or len(plan[2]) == len(layer_bytes):
            return plan + (set(),)
    except ValueError:
        if not rows:
            raise
    rest = [i for i in range(len(layer_bytes)) if i not in rows]
    try:
        size, count, keep = fit(memory, [layer_bytes[i] for i in rest],
                                lookahead, buffer_count, buffer_size,
                                _rows.MEMORY)
    except ValueError:
        if plan is None:
            raise
        return plan + (set(),)  # a budget too small to read by rows
    return size, count, {rest[i] for i in keep}, rows


def fit(memory, layer_bytes, lookahead, buffer_count=None,
        buffer_size=None, reserve=0):
    """(buffer_size, buffer_count, in_cpu) for a budget of memory bytes:
    a pool of buffer_count buffers of buffer_size (the read-ahead's
    lookahead + 2, or 2 when every streamed layer fits beside them) and
    in_cpu, the set of layers (indexes into layer_bytes, each layer's
    pool bytes in add order) kept resident with the rest.

    Without buffer_size, the t largest layers may be made resident so
    that the buffers need only fit the largest streamed one (a Llama's
    embedding and head are each several decoder layers): every t is
    tried and, among those whose pool holds the read-ahead, the one
    streaming the fewest bytes per forward wins (then the deeper pool,
    then the smaller). Other layers stay spread along the add order
    (spread()). Refused
    (ValueError naming the sizes) when no choice fits two buffers.
    reserve: bytes of memory taken by something else."""
    avail = memory - reserve
    n, total = len(layer_bytes), sum(layer_bytes)
    order = sorted(range(n), key=lambda i: -layer_bytes[i])
    best, least = None, None
    for t in (range(n + 1) if buffer_size is None else [None]):
        if t is None:
            forced, size = [], buffer_size
        else:
            forced = order[:t]
            size = layer_bytes[order[t]] if t < n else min(layer_bytes,
                                                           default=ALIGN)
            size = max(ALIGN, (size + ALIGN - 1) // ALIGN * ALIGN)
        left = avail - sum(layer_bytes[i] for i in forced)
        need = avail - left + (buffer_count or 2) * size + reserve
        least = need if least is None else min(least, need)
        if left < 2 * size:
            continue
        rest = total - (avail - left)
        count, want = buffer_count, 2
        if count is None:
            want = 2 if rest <= left - 2 * size else lookahead + 2
            count = max(2, min(want, left // size))
        elif count * size > left:
            continue
        keep = set(forced) | spread(layer_bytes, forced,
                                    left - count * size)
        streamed = total - sum(layer_bytes[i] for i in keep)
        # a pool too shallow for the read-ahead exposes each read: the
        # read-ahead's depth first, then the fewest bytes streamed
        score = (count < want, streamed, -count, count * size, t or 0)
        if best is None or score < best[0]:
            best = (score, size, count, keep)
    if best is not None:
        return best[1:]
    beside = (f" beside {reserve} bytes for reading embeddings by rows"
              if reserve else "")
    if buffer_size is not None and buffer_count is not None and \
            avail >= 2 * buffer_size:
        raise ValueError(f"nvswap.torch.offload: memory={memory} bytes "
                         f"cannot hold buffer_count={buffer_count} buffers "
                         f"of {buffer_size} bytes{beside}")
    big = buffer_size if buffer_size is not None else max(
        [ALIGN] + [(b + ALIGN - 1) // ALIGN * ALIGN for b in layer_bytes])
    also = "" if buffer_size is not None else (
        ", nor its largest layers resident beside buffers of the next")
    k = buffer_count or 2
    raise ValueError(f"nvswap.torch.offload: memory={memory} bytes cannot "
                     f"hold {'two' if k == 2 else k} buffers of the largest "
                     f"layer ({k} x {big} = {k * big} bytes){also}{beside}: "
                     f"give it at least {least} bytes")


def spread(layer_bytes, taken, room):
    """Layers (not in taken) to keep resident in room bytes, spread evenly
    along the add order (the walk of a forward) rather than the first
    that fit: while a resident layer computes, the disk reads ahead into
    the free buffers, so resident layers bunched at the start leave the
    disk idle there, and the streamed ones bunched later leave it
    behind. A running share of each layer's bytes (room over the bytes
    left) picks a layer once its share covers it; room still left then
    goes first fit."""
    rest = [i for i in range(len(layer_bytes)) if i not in set(taken)]
    avail = sum(layer_bytes[i] for i in rest)
    if avail <= room:
        return set(rest)
    # in integers: acc counts bytes x avail, each layer adds its share
    share, acc, out = room, 0, set()
    for i in rest:
        b = layer_bytes[i]
        acc += b * share
        if b * avail <= acc and b <= room:
            out.add(i)
            room -= b
            acc -= b * avail
    for i in rest:
        if i not in out and layer_bytes[i] <= room:
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

