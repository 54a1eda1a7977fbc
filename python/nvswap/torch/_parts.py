# SPDX-License-Identifier: MIT
"""A layer's optimizer state in parts.

A layer's Adam state (two or three tensors per parameter) is one group
in the optimizer set, and a group takes one pool buffer: so the buffer
had to hold twice the largest layer (a Llama embedding's AdamW state is
524 MB), even where the gradient region and the parameters are half
that. A layer whose state is larger than an optimizer pool buffer is
registered instead as several groups, its parts: each holds a run of
elements of the layer's parameters, every state tensor of a parameter
cut at the same elements, and the layer's step goes through the parts
one at a time (OffloadedOptimizer._step_lent), each part's elements lent
to torch as parameters of their own (Adam and AdamW are elementwise: bit
for bit the whole). The buffer then bounds what a step holds of the
state, not the layer.

A part is [(param index, key, first element, end element)] in its
group's order. A layer whose state fits a buffer is one part of whole
tensors, registered under the layer's own group number as before parts
existed (a persistent set saved then resumes unchanged); part k > 0 of
layer L is group L + k * STRIDE. Cuts fall on multiples of GRAIN
elements from a parameter's start, so a piece's elements take the same
vector lanes as in the whole parameter.
"""
import errno

import torch

import nvswap

from ._common import ALIGN, STATE_BASE, error, itemsize, read_packed

GRAIN = 4096  # elements: a multiple of every vector width
STRIDE = 1 << 15  # group numbers of a layer's parts: layer + k * STRIDE
MAX_PARTS = (1 << 20) // STRIDE  # nvswap/offload.h: groups < 2^20


def group(layer, k):
    """The optimizer set's group number of part k of layer."""
    return layer + k * STRIDE


def up(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def part_bytes(part, sizes):
    """Bytes part takes in a pool buffer; sizes: {param index: itemsize}."""
    return sum(up((b - a) * sizes[i]) for i, _, a, b in part)


def plan(slots, bs, runs=None):
    """The parts of a layer's state: slots [(param index, key, numel,
    itemsize)] in group order (a parameter's keys together), bs the
    bytes a part may take. One part of whole tensors when the state
    fits; else runs of elements, each part filled up to bs. runs: the
    layer's fp32 masters where they are in parts themselves ([[(param
    index, first, end)]], _mixed.Masters.runs), or None: each part of
    the masters then has parts of the state of its own (a step holds
    one part of each at a time). None when bs cannot hold GRAIN
    elements of one parameter's state."""
    if runs is None and sum(up(n * s) for _, _, n, s in slots) <= bs:
        return [[(i, k, 0, n) for i, k, n, _ in slots]]
    params = {}  # index -> ([keys], numel, itemsize), in slot order
    for i, k, n, s in slots:
        params.setdefault(i, ([], n, s))[0].append(k)
    spans = [[(i, 0, n) for i, (_, n, _) in params.items()]]
    if runs is not None:
        held = {i for run in runs for i, _, _ in run}
        spans = [[r for r in run if r[0] in params] for run in runs] + \
            [[(i, 0, n) for i, (_, n, _) in params.items()
              if i not in held]]
    parts = []
    for span in spans:
        got = _fill([(i, params[i][0], a, b, params[i][2])
                     for i, a, b in span], bs)
        if got is None:
            return None
        parts += got
    return parts or [[]]


def _fill(runs, bs):
    """Parts of up to bs bytes holding runs [(param index, [keys], first
    element, end element, itemsize)]; None where bs cannot hold GRAIN
    elements of a parameter's state."""
    parts, cur, used = [], [], 0
    for i, keys, a, n, s in runs:
        if n == 0:  # no elements: listed, taking no room
            cur += [(i, k, 0, 0) for k in keys]
        while a < n:
            # each tensor of the piece starts at an ALIGN boundary
            fit = (bs - used) // len(keys) // ALIGN * ALIGN // s
            e = n - a if fit >= n - a else fit // GRAIN * GRAIN
            if e <= 0:
                if not cur:
                    return None
                parts.append(cur)
                cur, used = [], 0
                continue
            cur += [(i, k, a, a + e) for k in keys]
            used += len(keys) * up(e * s)
            a += e
    if cur:
        parts.append(cur)
    return parts


def refuse(who, what, parts, bs, layer):
    """nvswap.Error(EFBIG) from who (a call's name) when plan()'s parts
    for what (the state, or the fp32 masters, of layer, named) cannot be
    used: none (a GRAIN of elements does not fit a buffer of bs bytes)
    or more than the group numbering allows."""
    if parts is None:
        raise error(errno.EFBIG,
                    f"{who}: an optimizer pool buffer ({bs} bytes) cannot "
                    f"hold {GRAIN} elements of {what}: raise "
                    "offload_optimizer.buffer_size (optimizer_buffer_size=)")
    if len(parts) > 1 and (len(parts) > MAX_PARTS or layer >= STRIDE):
        raise error(errno.EFBIG,
                    f"{who}: {what} would take {len(parts)} optimizer pool "
                    f"buffers of {bs} bytes; at most {MAX_PARTS} (and a "
                    f"layer number below {STRIDE}) can be: raise "
                    "offload_optimizer.buffer_size (optimizer_buffer_size=)")


def refuse_saved(who, what, need, bs):
    """nvswap.Error(EFBIG) when a saved part of what (need bytes) is
    larger than a buffer of bs bytes, naming the size to give."""
    if need > bs:
        raise error(errno.EFBIG,
                    f"{who}: a part of {what} was saved with {need} "
                    f"bytes, larger than an optimizer pool buffer ({bs} "
                    "bytes): resume with optimizer_buffer_size= of at "
                    f"least {need}")


def check(opt, eng, layer, slots, bs):
    """plan(), or nvswap.Error(EFBIG) naming the layer (of eng, the
    model's engine) and what to raise. With fp32 masters in parts the
    state's parts are planned within theirs."""
    runs = eng.masters.runs(layer) if eng.masters is not None else None
    parts = plan(slots, bs, runs)
    refuse(f"nvswap.torch.{type(opt).__name__}", f"the state of "
           f"layer {layer} ({', '.join(eng.names[layer])})", parts, bs,
           layer)
    return parts


def check_saved(opt, layer, bs):
    """A registered (resumed) layer's parts each fit a buffer of bs
    bytes, else nvswap.Error(EFBIG) naming the size to give."""
    sizes = {i: itemsize(opt._state_dtype(p))
             for i, p in enumerate(opt._eng.layers[layer])}
    need = max(part_bytes(part, sizes) for part in layout(opt, layer))
    refuse_saved(f"nvswap.torch.{type(opt).__name__}", f"the state "
                 f"of layer {layer} ({', '.join(opt._eng.names[layer])})",
                 need, bs)


def layout(opt, layer):
    """The parts of a registered layer's state."""
    got = opt._parts.get(layer)
    if got is not None:
        return got
    ps = opt._eng.layers[layer]
    return [[(i, k, 0, ps[i].numel()) for i, k in opt._keys[layer]]]


def read_ahead(opt, layer, k):
    """Start reading part k of layer while the part before it steps:
    into a free pool buffer only, never waiting (the swap_in that needs
    it reads what is not there, and raises a read's failure)."""
    try:
        opt._eng.gswap.try_prefetch(STATE_BASE + (group(layer, k) << 20))
    except nvswap.Error:
        pass


def piece(t, a, b):
    """Elements [a, b) of t: t itself when that is all of it."""
    return t if a == 0 and b == t.numel() else t.reshape(-1)[a:b]


def register(opt, layer, keys, values, parts):
    """Add layer's state groups: values {(param index, key): tensor of
    the parameter's shape (a meta tensor registers zeros)}, keys their
    order."""
    for k, part in enumerate(parts):
        opt._swap.add_group(group(layer, k), [
            piece(values[(i, key)], a, b) for i, key, a, b in part])
    opt._keys[layer] = keys
    if len(parts) > 1:
        opt._parts[layer] = parts
    else:
        opt._parts.pop(layer, None)


def add(opt, layer, keys, values):
    """Register layer's state, not registered yet: values {(param index,
    key): tensor of the parameter's shape}, keys their order; in parts
    where it is larger than an optimizer pool buffer (EFBIG, nothing
    registered, where it cannot be cut: check())."""
    slots = [(i, k, values[(i, k)].numel(), itemsize(values[(i, k)].dtype))
             for i, k in keys]
    bs = opt._eng.gswap.stats()["buffer_size"]
    register(opt, layer, keys, values,
             check(opt, opt._eng, layer, slots, bs))


def read(opt, layer):
    """{(param index, key): a copy of that state tensor} of layer, read
    with Swapper.read (no pool buffer, nothing written)."""
    eng = opt._eng
    ps = eng.layers[layer]
    parts = layout(opt, layer)
    if len(parts) == 1:
        tensors = read_packed(
            eng.gswap, STATE_BASE + (layer << 20),
            [(opt._state_dtype(ps[i]), ps[i].shape)
             for i, _, _, _ in parts[0]])
        return {(i, k): t.clone()
                for (i, k, _, _), t in zip(parts[0], tensors)}
    out = {(i, k): torch.empty(ps[i].shape, dtype=opt._state_dtype(ps[i]))
           for i, k in opt._keys[layer]}
    for k, part in enumerate(parts):
        tensors = read_packed(
            eng.gswap, STATE_BASE + (group(layer, k) << 20),
            [(opt._state_dtype(ps[i]), (b - a,)) for i, _, a, b in part])
        for (i, key, a, b), t in zip(part, tensors):
            out[(i, key)].view(-1)[a:b].copy_(t)
    return out


def write(opt, layer, values):
    """values {(param index, key): tensor} into the layer's registered
    state groups, part by part, through a pool buffer."""
    for k, part in enumerate(layout(opt, layer)):
        tensors = opt._swap.swap_in(group(layer, k))
        try:
            for slot, (i, key, a, b) in enumerate(part):
                tensors[slot].view(-1).copy_(
                    values[(i, key)].reshape(-1)[a:b])
        finally:
            del tensors
            opt._swap.swap_out(group(layer, k))


def encode(opt):
    """The parts of the layers cut in parts, for a durable record."""
    return {str(layer): [[list(s) for s in part] for part in parts]
            for layer, parts in opt._parts.items()}


def adopt(opt, layer, keys, saved):
    """A resumed layer's state groups, laid out as saved (saved: the
    record's parts of the layer, or None for one part of whole tensors):
    the layout only, the bytes on NVMe adopted."""
    ps = opt._eng.layers[layer]
    parts = ([[(i, k, 0, ps[i].numel()) for i, k in keys]] if saved is None
             else [[(int(i), k, int(a), int(b)) for i, k, a, b in part]
                   for part in saved])
    values = {(i, k): torch.empty(ps[i].shape, device="meta",
                                  dtype=opt._state_dtype(ps[i]))
              for i, k in keys}
    register(opt, layer, keys, values, parts)
