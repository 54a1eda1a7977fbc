# SPDX-License-Identifier: MIT
"""save_pretrained(): an offloaded model written out as safetensors the
way Hugging Face's save_pretrained writes them (shards, index, tied
weights once, config), one layer in memory at a time (of an embedding
read by rows, a piece of its table)."""
import os
import re
import stat

import nvswap

from ..checkpoint import _keep_mode
from . import _savedir, _sizes
from ._savedir import INDEX, SHARD, SINGLE
from ._stformat import build_header, st_dtype

DEFAULT_MAX_SHARD = "50GB"  # transformers 5's save_pretrained default


def parse_shard_size(size):
    """Bytes of max_shard_size: an int, or text by _sizes.RULE ("5GB"
    is 5 * 10^9 bytes, as Hugging Face reads it; "5G" and "5GiB" 5 *
    2^30)."""
    return _sizes.keyword("save_pretrained", "max_shard_size", size)


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


def _write(path, part, layers, like):
    """The safetensors file of part at path, through CkptWriter (under
    its name only once complete), with the mode and owner of like (a
    stat result; None: the default, 0666 less the umask)."""
    head, nbytes = build_header(
        [(k, st_dtype(t.dtype), tuple(t.shape)) for k, t in part],
        {"format": "pt"})
    w = nvswap.CkptWriter(path, size_hint=len(head) + nbytes,
                          mode=stat.S_IMODE(like.st_mode) if like else 0o666)
    try:
        if like is not None:
            _keep_mode(w, like)
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
    offload(weights=directory). max_shard_size: an int, or a size by the
    rule of every size keyword (docs/torch.md: "5GB" is 5 * 10^9 bytes,
    "5G" and "5GiB" 5 * 2^30).

    An offloaded model is never gathered: each layer is acquired in turn
    and its tensors are copied into nvswap.CkptWriter's staging buffers
    (O_DIRECT; an embedding read by rows goes from its table 8 MiB of
    rows at a time); a model in memory works too. Call it between steps.

    Over an earlier save it is atomic: whatever interrupts it (an
    exception, a kill, a crash), the directory loads as the old save
    whole or the new one whole (the switch: _savedir.py). The files of
    the earlier save this one does not use are removed after it, and so
    are the leftovers of a killed save, under the directory's flock: a
    second save into the same directory meanwhile raises nvswap.Error
    (EBUSY). A replaced file's mode (and owner, where permitted) is kept;
    new files take the earlier save's, else 0666 less the umask. Every
    file is created new (O_EXCL), never written through a link; the
    config files transformers writes go to a private folder first and
    are each renamed in just before the weights' commit (a kill between
    the two leaves the new config beside the old weights). A load by
    open_weights()/weights= waits for a save running in the directory
    (the flock, shared). Refused (EBUSY) while an optimizer step of the
    model is half done. A symbolic link to a directory is followed; the
    directory is made when missing. Returns the paths written.

    Raises ValueError (max_shard_size, a tensor on the meta device or of
    a dtype safetensors lacks), TypeError (max_shard_size neither an int
    nor a str) and nvswap.Error (ENOTDIR, ENOENT for a link to nothing,
    EBUSY, the writer's ENOSPC, EIO...)."""
    max_bytes = parse_shard_size(max_shard_size)
    directory = os.fspath(directory)
    items = entries(model)
    for k, t in items:
        st_dtype(t.dtype)  # refused before anything is written
    eng = getattr(model, "_nvswap_engine", None)
    if eng is not None and eng.optimizer is not None:
        eng.optimizer.settled("nvswap.torch.save_pretrained()")
    parts = shards(items, max_bytes)
    _savedir.prepare(directory)
    names = ([SINGLE] if len(parts) <= 1 else
             [SHARD.format(i + 1, len(parts)) for i in range(len(parts))])
    with _savedir.Switch(directory) as sw:
        layers = _Layers(eng)
        try:
            for name, part in zip(names, parts or [[]]):
                sw.write(name, lambda path, like, part=part: _write(
                    path, part, layers, like))
        finally:
            layers.let_go()
        cfg = getattr(model, "config", None)
        if callable(getattr(cfg, "save_pretrained", None)):
            sw.adopt(lambda folder: _configs(model, cfg, folder))
        if len(parts) <= 1:
            sw.commit_single()
        else:
            sw.commit_index({"metadata": {
                "total_parameters": sum(p.numel()
                                        for p in model.parameters()),
                "total_size": sum(t.numel() * t.element_size()
                                  for _, t in items)},
                "weight_map": {k: n for n, part in zip(names, parts)
                               for k, _ in part}})
        written = [os.path.join(directory, n) for n in names]
        if len(parts) > 1:
            written.append(os.path.join(directory, INDEX))
    return written


def _configs(model, cfg, folder):
    """model.config (and its generation_config) as transformers writes
    them, into folder."""
    cfg.save_pretrained(folder)
    gen = getattr(model, "generation_config", None)
    can = getattr(model, "can_generate", None)
    if gen is not None and callable(can) and can():
        gen.save_pretrained(folder)
