# SPDX-License-Identifier: MIT
"""save_pretrained(): an offloaded model written out as safetensors the
way Hugging Face's save_pretrained writes them (shards, index, tied
weights once, config), one layer in memory at a time (of an embedding
read by rows, a piece of its table)."""
import json
import os
import re

import nvswap

from ._stformat import build_header, st_dtype

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
SHARD = "model-{:05d}-of-{:05d}.safetensors"
_SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
DEFAULT_MAX_SHARD = "50GB"  # transformers 5's save_pretrained default
_UNITS = {"TB": 10**12, "GB": 10**9, "MB": 10**6, "KB": 10**3}


def parse_shard_size(size):
    """Bytes of max_shard_size: an int, or "5GB"-style text in Hugging
    Face's decimal units (TB, GB, MB, KB)."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise ValueError("nvswap.torch.save_pretrained: max_shard_size "
                             f"must be positive, not {size}")
        return size
    if isinstance(size, str):
        s = size.strip()
        unit = s[-2:].upper()
        try:
            if unit in _UNITS and float(s[:-2]) > 0:
                return int(float(s[:-2]) * _UNITS[unit])
        except ValueError:
            pass
    raise ValueError("nvswap.torch.save_pretrained: max_shard_size must be "
                     "a positive int (bytes) or text such as '5GB' (units "
                     f"TB, GB, MB, KB), not {size!r}")


def _walk(m, prefix, out):
    """state_dict()'s entries without reading them: parameters, then
    persistent buffers, then the children, as Module.state_dict orders
    them (a tied tensor under each of its names)."""
    for n, p in m._parameters.items():
        if p is not None:
            out.append((prefix + n, p))
    for n, b in m._buffers.items():
        if b is not None and n not in m._non_persistent_buffers_set:
            out.append((prefix + n, b))
    for n, c in m._modules.items():
        if c is not None:
            _walk(c, prefix + n + ".", out)
    return out


def _tied_patterns(model):
    """The names Hugging Face drops from a tied group when saving: the
    keys of each module's _tied_weights_keys (a dict in transformers 5,
    a list before), prefixed by the module's name."""
    out = []
    for name, m in model.named_modules():
        tied = getattr(m, "_tied_weights_keys", None) or {}
        keys = tied.keys() if isinstance(tied, dict) else tied
        out.extend(f"{name}.{k}" if name else k for k in keys)
    return out


def entries(model):
    """[(key, tensor)] to save: state_dict()'s order, each tensor once (a
    tied group keeps the name Hugging Face keeps: the ones its
    _tied_weights_keys declare are dropped; else the first), less the
    model's _keys_to_ignore_on_save."""
    all_ = _walk(model, "", [])
    skip = set(getattr(model, "_keys_to_ignore_on_save", None) or ())
    all_ = [(k, t) for k, t in all_ if k not in skip]
    groups = {}
    for k, t in all_:
        groups.setdefault(id(t), []).append(k)
    pats = _tied_patterns(model)
    keep = {}
    for tid, names in groups.items():
        left = [n for n in names if not any(re.search(p, n) for p in pats)]
        keep[tid] = left[0] if left else names[0]
    return [(k, t) for k, t in all_ if keep[id(t)] == k]


def shards(items, max_bytes):
    """Hugging Face's split (huggingface_hub's split_state_dict_into_
    shards_factory): in order, a new shard when the next tensor would
    pass max_bytes; a tensor larger than that alone in its own."""
    out, cur, size = [], [], 0
    for k, t in items:
        n = t.numel() * t.element_size()
        if n > max_bytes:
            out.append([(k, t)])
            continue
        if cur and size + n > max_bytes:
            out.append(cur)
            cur, size = [], 0
        cur.append((k, t))
        size += n
    if cur:
        out.append(cur)
    return out


class _Layers:
    """One offloaded layer held at a time, in the order asked."""

    def __init__(self, eng):
        self.eng, self.layer = eng, None

    def data(self, p):
        rec = getattr(p, "_nvswap", None)
        if rec is None:
            return p.detach()
        if self.layer != rec.layer:
            self.let_go()
            self.eng.acquire(rec.layer, host=True)
            self.layer = rec.layer
        return p.data  # the pool buffer, while acquired

    def table(self, p):
        """The row table of p, an embedding read by rows that nothing
        holds now (_rows.py): it is written a piece at a time, not
        acquired whole. None for any other tensor."""
        rec = getattr(p, "_nvswap", None)
        if rec is None or self.eng.refs[rec.layer]:
            return None
        return self.eng.rows.get(rec.layer)

    def let_go(self):
        if self.layer is not None:
            layer, self.layer = self.layer, None
            self.eng.release(layer)


def _write(path, part, layers):
    head, nbytes = build_header(
        [(k, st_dtype(t.dtype), tuple(t.shape)) for k, t in part],
        {"format": "pt"})
    w = nvswap.CkptWriter(path, size_hint=len(head) + nbytes)
    try:
        w.write(head)
        for k, t in part:
            if t.is_meta:
                raise ValueError("nvswap.torch.save_pretrained: "
                                 f"'{k}' is on the meta device: nothing "
                                 "to save")
            if t.numel() == 0:
                continue
            table = layers.table(t)
            if table is not None:
                layers.let_go()
                for piece in table.pieces():
                    w.write(piece)
                continue
            d = layers.data(t)
            if d.device.type != "cpu":
                d = d.to("cpu")
            w.write(d if d.is_contiguous() else d.contiguous())
    except BaseException:
        w.abort()
        raise
    w.close()


def save_pretrained(model, directory, max_shard_size=DEFAULT_MAX_SHARD):
    """Write model's state_dict() into directory as Hugging Face's
    save_pretrained does: model.safetensors, or shards
    model-00001-of-0000N.safetensors of at most max_shard_size (default
    "50GB", transformers 5's; HF's split: in state_dict order, a tensor
    larger than that alone) with model.safetensors.index.json
    (metadata.total_size, weight_map); a tied parameter once, under the
    name Hugging Face keeps; persistent buffers included; header metadata
    {"format": "pt"}; and model.config (and generation_config) when the
    model has them. from_pretrained(directory) loads it; so does
    offload(weights=directory).

    An offloaded model is never gathered: each layer is acquired in turn
    and its tensors are copied into nvswap.CkptWriter's staging buffers
    (O_DIRECT, each file under its name only once complete; an embedding
    read by rows goes from its table 8 MiB of rows at a time); a model
    in memory works too. Call it between steps. Shard files of an earlier
    save that this one does not rewrite are removed, and the index is
    written last: a failure leaves the shards already written and no
    index of this save. Returns the paths written.

    Raises ValueError (max_shard_size, a tensor on the meta device or of
    a dtype safetensors lacks) and the writer's nvswap.Error (ENOSPC,
    EIO...)."""
    max_bytes = parse_shard_size(max_shard_size)
    directory = os.fspath(directory)
    items = entries(model)
    for k, t in items:
        st_dtype(t.dtype)  # refused before anything is written
    parts = shards(items, max_bytes)
    os.makedirs(directory, exist_ok=True)
    eng = getattr(model, "_nvswap_engine", None)
    layers = _Layers(eng)
    names = ([SINGLE] if len(parts) <= 1 else
             [SHARD.format(i + 1, len(parts)) for i in range(len(parts))])
    written = []
    try:
        for name, part in zip(names, parts or [[]]):
            path = os.path.join(directory, name)
            _write(path, part, layers)
            written.append(path)
    finally:
        layers.let_go()
    for f in os.listdir(directory):
        stale = (_SHARD_RE.fullmatch(f) and f not in names) or (
            f in (SINGLE, INDEX) and f not in names)
        if stale and os.path.isfile(os.path.join(directory, f)):
            os.unlink(os.path.join(directory, f))
    if len(parts) > 1:
        index = {"metadata": {
            "total_parameters": sum(p.numel() for p in model.parameters()),
            "total_size": sum(t.numel() * t.element_size()
                              for _, t in items)},
            "weight_map": {k: n for n, part in zip(names, parts)
                           for k, _ in part}}
        path = os.path.join(directory, INDEX)
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        written.append(path)
    cfg = getattr(model, "config", None)
    if callable(getattr(cfg, "save_pretrained", None)):
        cfg.save_pretrained(directory)
        gen = getattr(model, "generation_config", None)
        can = getattr(model, "can_generate", None)
        if gen is not None and callable(can) and can():
            gen.save_pretrained(directory)
    return written

