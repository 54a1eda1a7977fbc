# SPDX-License-Identifier: MIT
"""Mixed precision, ZeRO-Infinity's layout: offload(..., dtype=bf16) keeps
each floating parameter in the parameter pool in that dtype (forward and
backward read half the bytes of fp32), and its fp32 master copy in the
optimizer set beside the Adam state: one group per layer, or several
(its parts, runs of its elements) where the layer's masters are larger
than an optimizer pool buffer. The optimizer steps the fp32 master with
the gradient taken to fp32, then writes the rounded copy back into the
layer: what torch.optim.AdamW over fp32 master copies of a bf16 model
gives, bit for bit."""

import torch

import nvswap

from . import _parts
from ._common import itemsize, read_packed

MASTER_BASE = 4 << 40  # id_base of the master groups in the optimizer set


def compute_dtype(dtype):
    """offload(dtype=): None (the parameters' own dtypes) or a torch
    floating dtype the model computes in with fp32 masters."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.replace("torch.", ""), dtype)
    if dtype == torch.float32:
        return None
    if dtype == torch.bfloat16:
        return dtype
    if dtype == torch.float16:
        raise ValueError(
            "nvswap.torch.offload: dtype=torch.float16 needs loss scaling "
            "(a GradScaler's skipped steps on inf/nan), which nvswap.torch "
            "does not do: use dtype=torch.bfloat16, whose range needs none")
    raise ValueError("nvswap.torch.offload: dtype must be torch.bfloat16 "
                     f"(or None / torch.float32 for none), not {dtype!r}")


def cast(t, dtype):
    """t in the compute dtype (floating tensors only)."""
    if dtype is None or not t.is_floating_point() or t.dtype == dtype:
        return t
    return t.to(dtype)


def cast_size(p, dtype):
    """Bytes of parameter p in the compute dtype."""
    if dtype is None or not p.is_floating_point():
        return p.numel() * p.element_size()
    return p.numel() * itemsize(dtype)


def cast_buffers(model, dtype):
    """Floating buffers in the compute dtype, as model.to(dtype) does."""
    if dtype is None:
        return
    for m in model.modules():
        for name, b in m._buffers.items():
            if b is not None and b.is_floating_point() and b.dtype != dtype:
                m._buffers[name] = b.to(dtype)


class Masters:
    """The fp32 master weights of an offloaded model computing in a lower
    precision: a group per layer (its floating parameters, in order) in
    an OptimizerSwapper over the optimizer set; a layer whose masters are
    larger than a pool buffer in parts (_parts.py: runs of elements,
    part k > 0 group layer + k * STRIDE), so that the buffer bounds what
    a step holds of them, not the largest layer."""

    def __init__(self, gswap):
        self.gswap = gswap
        # written behind: a write that fails keeps the master resident
        # and dirty, and the next wait (a step's drain, a checkpoint)
        # raises it; the next eviction writes it again
        self.swap = nvswap.OptimizerSwapper(gswap, pipeline_write=True,
                                            id_base=MASTER_BASE)
        self.index = {}  # layer -> indexes of its parameters with a master
        self.shapes = {}  # layer -> their shapes
        self.cuts = {}  # layer -> its parts [[(index, first, end)]], if >1
        self.saved = None  # a resumed record's cuts: laid out as saved

    def add(self, layer, names, data):
        """data: the layer's tensors as given (fp32 keeps every bit of an
        fp32 source; a bf16 one is widened)."""
        idx = [i for i, d in enumerate(data) if d.is_floating_point()]
        if not idx:
            return
        parts = self._plan(layer, names, [(i, data[i].numel()) for i in idx])
        full = {i: data[i].float().contiguous() for i in idx}
        for k, part in enumerate(parts):
            self.swap.add_group(_parts.group(layer, k), [
                _parts.piece(full[i], a, b) for i, a, b in part])
        self.index[layer] = idx
        self.shapes[layer] = [data[i].shape for i in idx]
        if len(parts) > 1:
            self.cuts[layer] = parts

    def _plan(self, layer, names, sizes):
        """The parts of a layer's masters (sizes: [(index, numel)]): as
        saved when resuming, else planned for this pool's buffers;
        nvswap.Error(EFBIG) naming the layer where they cannot be."""
        bs = self.gswap.stats()["buffer_size"]
        what = (f"the fp32 master weights of layer {layer} "
                f"({', '.join(names)})")
        if self.saved is not None:
            saved = self.saved.get(str(layer))
            parts = ([[(i, 0, n) for i, n in sizes]] if saved is None else
                     [[(int(i), int(a), int(b)) for i, a, b in part]
                      for part in saved])
            got = {}
            for i, a, b in (r for part in parts for r in part):
                got[i] = got.get(i, 0) + b - a
            if got != dict(sizes):
                raise ValueError("nvswap.torch: resuming a model whose "
                                 f"layer {layer} ({', '.join(names)}) is "
                                 "not the saved one (its fp32 masters were "
                                 "saved in other sizes)")
            need = max(sum(_parts.up((b - a) * 4) for _, a, b in part)
                       for part in parts)
            _parts.refuse_saved("nvswap.torch.offload", what, need, bs)
            return parts
        got = _parts.plan([(i, "master", n, 4) for i, n in sizes], bs)
        _parts.refuse("nvswap.torch.offload", what, got, bs, layer)
        return [[(i, a, b) for i, _, a, b in part] for part in got]

    def runs(self, layer):
        """The parts of the layer's masters, or None where they are one
        group of whole tensors."""
        return self.cuts.get(layer)

    def parts(self, layer):
        """[[(index, first, end)]]: the layer's masters by part."""
        got = self.cuts.get(layer)
        if got is not None:
            return got
        return [[(i, 0, s.numel()) for i, s in
                 zip(self.index.get(layer, ()), self.shapes.get(layer, ()))]]

    def part_of(self, layer, i, a):
        """The part holding element a of parameter i's master (the part
        listing it, for a parameter of no elements)."""
        for k, part in enumerate(self.parts(layer)):
            if any(j == i and (lo <= a < hi or lo == hi == a)
                   for j, lo, hi in part):
                return k
        raise KeyError((layer, i, a))

    def swap_in(self, layer, k=0):
        """Part k of the layer's masters: {parameter index: (first, end,
        its master's elements [first, end), a pool buffer: the
        parameter's shape where that is all of it, else flat)}."""
        part = self.parts(layer)[k] if layer in self.index else []
        if not part:
            return {}
        got = self.swap.swap_in(_parts.group(layer, k))
        return {i: (a, b, t) for (i, a, b), t in zip(part, got)}

    def swap_out(self, layer, k=0):
        if layer in self.index:
            self.swap.swap_out(_parts.group(layer, k))

    def update(self, layer, value):
        """Set the layer's masters part by part, through a pool buffer:
        value(index) is the whole fp32 value of that parameter's master
        (any dtype and shape of its numel), or None to keep it."""
        for k in range(len(self.parts(layer))):
            got = self.swap_in(layer, k)
            try:
                with torch.no_grad():
                    for i, (a, b, t) in got.items():
                        src = value(i)
                        if src is not None:
                            t.view(-1).copy_(src.reshape(-1)[a:b])
            finally:
                del got
                self.swap_out(layer, k)

    def read(self, layer):
        """Copies of the layer's masters: {parameter index: tensor}, read
        without a pool buffer and without writing anything."""
        idx = self.index.get(layer)
        if idx is None:
            return {}
        cut = self.cuts.get(layer)
        if cut is None:
            return dict(zip(idx, read_packed(
                self.gswap, MASTER_BASE + (layer << 20),
                [(torch.float32, s) for s in self.shapes[layer]])))
        out = {i: torch.empty(s, dtype=torch.float32)
               for i, s in zip(idx, self.shapes[layer])}
        for k, part in enumerate(cut):
            got = read_packed(
                self.gswap, MASTER_BASE + (_parts.group(layer, k) << 20),
                [(torch.float32, (b - a,)) for _, a, b in part])
            for (i, a, b), t in zip(part, got):
                out[i].view(-1)[a:b].copy_(t)
        return out

    def encode(self):
        """The layers whose masters are in parts, for a durable record."""
        return {str(layer): [[list(r) for r in part] for part in parts]
                for layer, parts in self.cuts.items()}

    def close(self):
        self.swap.close()


def master_state(eng, index):
    """{optimizer parameter index: fp32 master (a copy)} of every floating
    parameter (index: parameter -> its index in the optimizer)."""
    out = {}
    for layer in sorted(eng.masters.index):
        for i, t in eng.masters.read(layer).items():
            p = eng.layers[layer][i]
            if p in index:
                out[index[p]] = t
    return dict(sorted(out.items()))


def check_masters(eng, saved):
    """{layer: [(index in the layer, fp32 CPU tensor)]} of a loaded
    'master' entry ([(key, parameter, tensor)], keys resolved by the
    caller); ValueError, before anything is written, for a model without
    masters, a parameter without a master, or a value that is not a
    floating tensor of the parameter's shape holding data (every value is
    converted here, so that none can fail while they are written)."""
    if eng.masters is None:
        raise ValueError("loaded state dict has fp32 master weights "
                         "('master'), but the model was offloaded without "
                         "a compute dtype (offload(dtype=))")
    per_layer = {}
    for key, p, t in saved:
        rec = p._nvswap
        if rec.index not in eng.masters.index.get(rec.layer, ()):
            raise ValueError(f"loaded master {key!r}: '{rec.name}' has no "
                             f"fp32 master (a {p.dtype} parameter)")
        what = f"loaded master {key!r} of '{rec.name}'"
        if not torch.is_tensor(t) or tuple(t.shape) != tuple(p.shape):
            got = (f"has shape {tuple(t.shape)}" if torch.is_tensor(t)
                   else f"is a {type(t).__name__}")
            raise ValueError(f"{what} {got}: it must be a tensor of the "
                             f"parameter's shape {tuple(p.shape)}")
        per_layer.setdefault(rec.layer, []).append(
            (rec.index, to_state(t, torch.float32, what)))
    return per_layer


def to_state(t, dtype, what):
    """t as a contiguous CPU tensor of dtype for the optimizer set;
    ValueError naming what for a tensor without data (meta) or not of a
    floating dtype."""
    if t.is_meta:
        raise ValueError(f"{what} is on the meta device: it has no values "
                         "to load")
    if not t.is_floating_point():
        raise ValueError(f"{what} is a {t.dtype} tensor: optimizer state "
                         "and masters are floating point")
    return t.detach().to("cpu", dtype).contiguous()


def load_masters(eng, per_layer):
    """Write checked masters (check_masters()) into the master groups."""
    for layer, entries in sorted(per_layer.items()):
        eng.masters.update(layer, dict(entries).get)
