# SPDX-License-Identifier: MIT
"""Checkpoint and resume of an offloaded model where its state lies.

With persist='persistent' (or 'resume') the model's two Swappers are
persistent swap sets: nvswap.torch.checkpoint() saves the engine's and
the optimizer's small state (step counts, hyper-parameters, which state
tensors each layer holds) as a JSON record in the optimizer set, and a
copy in the parameter set (for a model served from it alone,
_pools.served_record), then checkpoints both sets under one tag
"nvswap.torch:<seq>:<tag>". Only the dirty resident tensors are written:
everything else is already on NVMe.

The two sets commit separately, so a crash can leave one a generation
ahead. Resuming therefore reopens both at the newest generation they
share (the same <seq>), which both keep (keep_generations >= 2); the set
that was ahead commits it again (_pools.open_pools), so that its next
checkpoint drops the generation ahead rather than the shared one.
"""
import errno
import json

import torch

import nvswap

from . import _parts
from ._engine import error

TAG_PREFIX = "nvswap.torch:"
META_BASE = 3 << 40  # ids of the JSON record's chunks in either set
RECORD_CHUNK = 4096  # their size in the parameter set
VERSION = 1


def _seq(tag):
    """The checkpoint number of an nvswap.torch tag, else None."""
    if not tag.startswith(TAG_PREFIX):
        return None
    head = tag[len(TAG_PREFIX):].partition(":")[0]
    return int(head) if head.isdigit() else None


def ours(swapper):
    """{seq: generation} of the set's nvswap.torch generations."""
    out = {}
    for g in swapper.generations():
        seq = _seq(g["tag"])
        if seq is not None and seq not in out:
            out[seq] = g["generation"]
    return out


def common_generation(pswap, gswap):
    """(seq, parameter generation, optimizer generation) of the newest
    checkpoint both sets hold, or None when neither holds one, or when
    one holds no generation at all and the other only its first
    checkpoint: a run killed between its first checkpoint's two commits
    saved nothing it can resume. Raises nvswap.Error(EBADMSG) when none
    is in common otherwise: a set that lost (or moved away from) its
    saved steps must not make the other's be written over."""
    p, g = ours(pswap), ours(gswap)
    if not p and not g:
        return None
    if not p or not g:
        empty, full = (pswap, g) if not p else (gswap, p)
        if not empty.generations() and len(full) == 1:
            return None
    both = sorted(set(p) & set(g))
    if not both:
        raise error(errno.EBADMSG,
                    "nvswap.torch: the parameter set holds checkpoints "
                    f"{sorted(p)} and the optimizer set {sorted(g)}: none "
                    "in common, so they cannot resume together")
    seq = both[-1]
    return seq, p[seq], g[seq]


# ---- JSON with tuples, tensors and dtypes kept -------------------------


def _enc(v):
    if isinstance(v, tuple):
        return {"tuple": [_enc(x) for x in v]}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        return {"dict": [[_enc(k), _enc(x)] for k, x in v.items()]}
    if torch.is_tensor(v):
        if v.numel() != 1:
            raise ValueError("nvswap.torch.checkpoint: a non-scalar tensor "
                             "in the optimizer's scalar state")
        return {"tensor": v.item(), "dtype": str(v.dtype).split(".")[1],
                "shape": list(v.shape)}
    if isinstance(v, torch.dtype):
        return {"torch_dtype": str(v).split(".")[1]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise ValueError(f"nvswap.torch.checkpoint: cannot save a "
                     f"{type(v).__name__} of the optimizer's state")


def _dec(v):
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "tuple" in v:
        return tuple(_dec(x) for x in v["tuple"])
    if "dict" in v:
        return {_dec(k): _dec(x) for k, x in v["dict"]}
    if "tensor" in v:
        return torch.tensor(v["tensor"],
                            dtype=getattr(torch, v["dtype"])).reshape(
                                v["shape"])
    return getattr(torch, v["torch_dtype"])


# ---- the record --------------------------------------------------------


def _record(eng, seq, tag):
    opt = eng.optimizer
    rec = {
        "version": VERSION, "seq": seq, "tag": tag, "steps": eng.steps,
        "layers": [list(n) for n in eng.names],
        "dtype": None if eng.dtype is None else str(eng.dtype),
        "written": {str(k): sorted(v) for k, v in eng.written.items()},
        # the layers whose fp32 masters are in parts, as laid out
        "master_parts": ({} if eng.masters is None else
                         eng.masters.encode()),
        "optimizer": None,
    }
    if opt is not None and not opt._closed:
        where = {id(p): (layer, i) for layer, ps in enumerate(eng.layers)
                 for i, p in enumerate(ps)}
        rec["optimizer"] = {
            "class": type(opt).__name__,
            "param_groups": [
                _enc({k: v for k, v in g.items() if k != "params"})
                for g in opt.param_groups],
            "keys": {str(layer): [[i, k] for i, k in keys]
                     for layer, keys in opt._keys.items()},
            "parts": _parts.encode(opt),
            "key_order": [[*where[id(p)], ks]
                          for p, ks in opt._key_order.items()],
            "scalars": [[*where[id(p)], _enc(sc)]
                        for p, sc in opt._scalars.items()],
        }
    return json.dumps(rec).encode()


def _write_record(swapper, blob, size=None):
    """The record as chunks of size bytes (None: one pool buffer) at
    META_BASE + k; the first chunk's tag says how many there are and the
    total length."""
    size = size or swapper.stats()["buffer_size"]
    old = [i for i in swapper.ids()
           if META_BASE <= i < META_BASE + (1 << 20)]
    for i in old:
        swapper.unregister(i)
    chunks = [blob[k:k + size] for k in range(0, len(blob), size)] or [b""]
    for k, c in enumerate(chunks):
        swapper.register(META_BASE + k, bytearray(c) if c else 1)
    swapper.set_tag(META_BASE, f"{len(chunks)} {len(blob)}")


def has_record(swapper):
    return META_BASE in swapper.ids()


def read_record(swapper, which="optimizer"):
    """The record of the generation swapper was opened at (a dict)."""
    try:
        head = swapper.get_tag(META_BASE).decode()
        count, total = (int(x) for x in head.split())
    except (nvswap.Error, ValueError) as e:
        raise error(errno.EBADMSG, f"nvswap.torch: the {which} set has "
                    f"no readable checkpoint record ({e})") from None
    parts = []
    for k in range(count):
        # copied out without a pool buffer: a resume with smaller buffers
        # than the set was saved with reads its record (and says what
        # no longer fits)
        buf = bytearray(swapper.info(META_BASE + k)["nbytes"])
        swapper.read(META_BASE + k, buf)
        parts.append(bytes(buf))
    rec = json.loads(b"".join(parts)[:total])
    if rec.get("version") != VERSION:
        raise error(errno.ENOTSUP, "nvswap.torch: a checkpoint record of "
                    f"version {rec.get('version')}, not {VERSION}")
    return rec


def check_dtype(rec, dtype):
    """The model being resumed computes in the saved model's dtype (before
    any layer is added: the layouts would differ)."""
    want = None if dtype is None else str(dtype)
    if rec.get("dtype") != want:
        raise ValueError("nvswap.torch: resuming a model offloaded with "
                         f"dtype={want}, saved with dtype={rec.get('dtype')}")


def check_layers(eng, rec):
    """The model being resumed has the saved model's layers."""
    if rec["layers"] != [list(n) for n in eng.names]:
        for i, (a, b) in enumerate(zip(rec["layers"], eng.names)):
            if a != list(b):
                raise ValueError("nvswap.torch: resuming a model whose "
                                 f"layer {i} holds {list(b)}, saved as {a}")
        raise ValueError("nvswap.torch: resuming a model of "
                         f"{len(eng.names)} layers, saved with "
                         f"{len(rec['layers'])}")


def restore_engine(eng, rec):
    eng.steps = rec["steps"]
    eng.written = {int(k): set(v) for k, v in rec["written"].items()}


def restore_optimizer(opt, rec):
    """A new optimizer over a resumed model takes the saved state: the
    saved hyper-parameters win over the ones given (as load_state_dict),
    and each layer's state group is adopted from NVMe, not read."""
    saved = rec.get("optimizer")
    if saved is None:
        return
    cls = type(opt).__name__
    if saved["class"] != cls:
        raise ValueError(f"nvswap.torch.{cls}: the model was saved with "
                         f"nvswap.torch.{saved['class']}")
    if len(saved["param_groups"]) != len(opt.param_groups):
        raise ValueError(f"nvswap.torch.{cls}: {len(opt.param_groups)} "
                         "parameter groups, saved with "
                         f"{len(saved['param_groups'])}")
    for g, s in zip(opt.param_groups, saved["param_groups"]):
        g.update(_dec(s))
    eng = opt._eng
    for layer, i, ks in saved["key_order"]:
        opt._key_order[eng.layers[layer][i]] = list(ks)
    for layer, i, sc in saved["scalars"]:
        opt._scalars[eng.layers[layer][i]] = _dec(sc)
    parts = saved.get("parts", {})  # (a record before parts: none)
    for layer, keys in saved["keys"].items():
        # The layout only: the saved bytes are adopted, nothing written.
        _parts.adopt(opt, int(layer), [(i, k) for i, k in keys],
                     parts.get(layer))
    bs = eng.gswap.stats()["buffer_size"]
    for layer in opt._keys:
        _parts.check_saved(opt, layer, bs)


class Checkpoint:
    """What nvswap.torch.checkpoint() returns: the generations it makes
    (param, optimizer) and wait(), which blocks until both are durable."""

    def __init__(self, eng, tag, generations):
        self._eng, self.tag, self.generations = eng, tag, generations
        self._done = False

    def wait(self):
        """Block until both sets committed this checkpoint; raises
        nvswap.Error (ENOSPC, EIO) when one failed: the set that failed
        stays at its previous generation, and resuming picks the newest
        checkpoint both hold."""
        if not self._done:
            got = (self._eng.pswap.checkpoint_wait(),
                   self._eng.gswap.checkpoint_wait())
            self._done = True
            # A later checkpoint waits for this one to commit: a newer
            # number also says this one is durable.
            if got[0] < self.generations[0] or got[1] < self.generations[1]:
                raise error(errno.EIO, "nvswap.torch: checkpoint "
                            f"{self.tag!r} committed as {got}, expected "
                            f"{self.generations}")
        return self.generations

    def done(self):
        return self._done

    def __repr__(self):
        return (f"<nvswap.torch.Checkpoint {self.tag!r} generations "
                f"{self.generations}>")


def checkpoint(eng, tag):
    if eng.gswap is None:
        raise error(errno.EROFS, "nvswap.torch.checkpoint: a model offloaded "
                    "with inference=True has nothing to save (it writes "
                    "nothing, not even to a set it is served from)")
    if not getattr(eng, "persistent", False):
        raise error(errno.EINVAL, "nvswap.torch.checkpoint: the model was "
                    "offloaded to scratch space: offload(..., "
                    "persist='persistent') or nvswap.persist in the config")
    if eng.frames or any(eng.refs):
        raise RuntimeError("nvswap.torch.checkpoint: layers are in use (a "
                           "forward, or gathered()): checkpoint between "
                           "steps")
    if eng.optimizer is not None:
        eng.optimizer.settled("nvswap.torch.checkpoint()")
    if tag is None:
        tag = f"step {eng.steps}"
    if not isinstance(tag, str):
        raise TypeError("nvswap.torch.checkpoint: tag must be a str")
    if "\0" in tag:
        raise ValueError("nvswap.torch.checkpoint: the tag holds a NUL "
                         f"character at {tag.index(chr(0))}: a tag is text "
                         "without NUL (the set would keep it cut there)")
    eng.drain()  # gradients written behind are part of the state
    eng.collect()  # a write behind that failed: written again first
    # Above any number either set holds: one set may be ahead of the
    # generation this run resumed from.
    seq = max([eng.ckpt_seq, *ours(eng.pswap), *ours(eng.gswap)]) + 1
    full = f"{TAG_PREFIX}{seq}:{tag}"
    if len(full.encode()) > 255:
        raise ValueError("nvswap.torch.checkpoint: tag too long (at most "
                         f"{255 - len(TAG_PREFIX) - 12} bytes)")
    blob = _record(eng, seq, tag)
    _write_record(eng.gswap, blob)
    # and in the parameter set, in chunks any pool buffer holds, for a
    # model served from it (_pools.served_record: no optimizer set)
    _write_record(eng.pswap, blob, RECORD_CHUNK)
    gp = eng.pswap.checkpoint(full)
    go = eng.gswap.checkpoint(full)
    eng.ckpt_seq = seq
    return Checkpoint(eng, full, (gp, go))
