# SPDX-License-Identifier: MIT
"""Mixed precision, ZeRO-Infinity's layout: offload(..., dtype=bf16) keeps
each floating parameter in the parameter pool in that dtype (forward and
backward read half the bytes of fp32), and its fp32 master copy in the
optimizer set, one group per layer beside the Adam state. The optimizer
steps the fp32 master with the gradient taken to fp32, then writes the
rounded copy back into the layer: what torch.optim.AdamW over fp32
master copies of a bf16 model gives, bit for bit."""
import errno

import torch

import nvswap

from ._common import ALIGN, error, itemsize, read_packed

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
    an OptimizerSwapper over the optimizer set."""

    def __init__(self, gswap):
        self.gswap = gswap
        # written behind: a write that fails keeps the master resident
        # and dirty, and the next wait (a step's drain, a checkpoint)
        # raises it; the next eviction writes it again
        self.swap = nvswap.OptimizerSwapper(gswap, pipeline_write=True,
                                            id_base=MASTER_BASE)
        self.index = {}  # layer -> indexes of its parameters with a master
        self.shapes = {}  # layer -> their shapes

    def add(self, layer, names, data):
        """data: the layer's tensors as given (fp32 keeps every bit of an
        fp32 source; a bf16 one is widened)."""
        idx = [i for i, d in enumerate(data) if d.is_floating_point()]
        if not idx:
            return
        need = sum((data[i].numel() * 4 + ALIGN - 1) // ALIGN * ALIGN
                   for i in idx)
        size = self.gswap.stats()["buffer_size"]
        if need > size:
            raise error(errno.EFBIG,
                        "nvswap.torch.offload: the fp32 master weights of "
                        f"layer {layer} ({', '.join(names)}) are {need} "
                        "bytes, larger than an optimizer pool buffer "
                        f"({size} bytes): raise offload_optimizer."
                        "buffer_size (optimizer_buffer_size=)")
        self.swap.add_group(layer, [data[i].float().contiguous()
                                    for i in idx])
        self.index[layer] = idx
        self.shapes[layer] = [data[i].shape for i in idx]

    def swap_in(self, layer):
        """{parameter index: its fp32 master (a pool buffer)}"""
        idx = self.index.get(layer)
        if idx is None:
            return {}
        return dict(zip(idx, self.swap.swap_in(layer)))

    def swap_out(self, layer):
        if layer in self.index:
            self.swap.swap_out(layer)

    def read(self, layer):
        """Copies of the layer's masters: {parameter index: tensor}, read
        without a pool buffer and without writing anything."""
        idx = self.index.get(layer)
        if idx is None:
            return {}
        return dict(zip(idx, read_packed(
            self.gswap, MASTER_BASE + (layer << 20),
            [(torch.float32, s) for s in self.shapes[layer]])))

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
        got = eng.masters.swap_in(layer)
        try:
            for i, t in entries:
                got[i].copy_(t)
        finally:
            del got
            eng.masters.swap_out(layer)
