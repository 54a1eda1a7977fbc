# SPDX-License-Identifier: MIT
"""offload(weights=): pretrained weights straight into the swap layers.

bind() matches the file's keys to the model's state_dict() before
anything is written, as load_state_dict(strict=True) would, and names
what does not match. Loader then registers each layer from its
parameters' shapes (typed zeros, no I/O), acquires it, reads its tensors
from the file straight into the pinned pool buffer and releases it dirty:
its write to the swap file goes behind while the next layers are read.
Up to buffer_count - 1 layers are being read at once, so the memory used
is the pools', whatever the model's size. An embedding read by rows
(_rows.py) has no pool buffer: its rows go from the file to its table a
piece at a time (Table.fill), so its size does not count either. A
layer that lies whole in a weights file as the pool would hold it is
not read at all: the C swapper reads it from that file at each use
(Loader._sources, "Read in place" in docs/torch.md).
"""
import re

import torch

from ._common import nbytes

# Weights in place for the layers a model streams (see Loader._sources).
# False: every layer copied into the swap file, as before
# (bench/serve_inplace.py compares the two in one run).
IN_PLACE = True

from ._plan import (_check_filled, _fill_buffers, _meta_buffers, _resetter,
                    materialize)
from ._weights import open_weights


class Binding:
    """What the weights give a model: params {id(param): file key},
    buffers [(module, name, key)], and what they leave to init: init_params
    (ids of meta parameters whose keys are ignored as missing) and
    supplied (ids of the tensors the file gives)."""

    def __init__(self, weights):
        self.weights = weights
        self.params = {}
        self.buffers = []
        self.init_params = set()
        self.supplied = set()


def _patterns(model, attr, extra=()):
    pats = list(getattr(model, attr, None) or ()) + list(extra)
    return re.compile("|".join(f"({p})" for p in pats)) if pats else None


def _hf_extras(model):
    """Hugging Face's loader also ignores two legacy buffers in files:
    per-layer rotary_emb.inv_freq and persistent position_ids."""
    if not (callable(getattr(model, "_init_weights", None)) and
            hasattr(model, "config")):
        return ()
    names = [n for n, _ in model.named_buffers()]
    out = []
    if any(n.endswith("rotary_emb.inv_freq") for n in names):
        out.append(r"rotary_emb\.inv_freq")
    if any(n.endswith("position_ids") for n in names):
        out.append(r"(^|\.)position_ids$")
    return out


def _state(model):
    """{id(tensor): [state_dict keys]} in state_dict() order, the tensor
    and whether it is a parameter; and {id(tensor): [(module, name)]}."""
    sd = model.state_dict(keep_vars=True)
    params, where = set(), {}
    for _, m in model.named_modules(remove_duplicate=False):
        for n, p in m._parameters.items():
            if p is not None:
                params.add(id(p))
                where.setdefault(id(p), []).append((m, n))
        for n, t in m._buffers.items():
            if t is not None and n not in m._non_persistent_buffers_set:
                where.setdefault(id(t), []).append((m, n))
    groups = {}
    for k, v in sd.items():
        if id(v) not in where:
            raise ValueError(f"nvswap.torch.offload: state_dict() entry "
                             f"'{k}' is neither a parameter nor a "
                             "persistent buffer of the model (a state_dict "
                             "hook made it): weights= cannot load it")
        groups.setdefault(id(v), (v, id(v) in params, []))[2].append(k)
    return groups, where


def bind(model, weights, dtype=None):
    """The Binding of weights (an open Weights) to model; ValueError
    listing every missing or unexpected key and every shape or dtype
    mismatch (as load_state_dict(strict=True) does), or naming tied keys
    the file holds with different bytes. Reads nothing but the bytes of
    tied keys held twice. dtype: offload(dtype=)'s compute dtype: then a
    floating tensor may come from any floating dtype of the file (cast:
    the fp32 masters take the file's values, the layer them rounded)."""
    ign_missing = _patterns(model, "_keys_to_ignore_on_load_missing")
    ign_unexp = _patterns(model, "_keys_to_ignore_on_load_unexpected",
                          _hf_extras(model))
    groups, where = _state(model)
    b = Binding(weights)
    missing, shapes, dtypes, twice = [], [], [], []
    known = set()
    for tid, (t, is_param, keys) in groups.items():
        known.update(keys)
        have = [k for k in keys if k in weights]
        if not have:
            if ign_missing is not None and all(ign_missing.search(k)
                                               for k in keys):
                if is_param and t.is_meta:
                    b.init_params.add(tid)
                continue
            missing.append(keys[0] + (f" (tied: {', '.join(keys[1:])})"
                                      if keys[1:] else ""))
            continue
        bad = False
        for k in have:
            fs = weights.shape(k)
            if fs != tuple(t.shape):
                shapes.append(f"{k}: {list(fs)} in the file, "
                              f"{list(t.shape)} in the model")
                bad = True
            elif weights.dtype(k) != t.dtype and not (
                    dtype is not None and t.is_floating_point() and
                    weights.dtype(k) is not None and
                    weights.dtype(k).is_floating_point):
                dtypes.append(f"{k}: {weights.dtype_name(k)} in the file, "
                              f"{t.dtype} in the model")
                bad = True
        if bad:
            continue
        if len(have) > 1:
            twice.append(have)
        b.supplied.add(tid)
        if is_param:
            b.params[tid] = have[0]
        else:
            b.buffers.extend((m, n, have[0]) for m, n in where[tid])
    unexpected = [k for k in weights.keys() if k not in known and not (
        ign_unexp is not None and ign_unexp.search(k))]
    errs = []
    for what, keys in (("Missing key(s)", missing),
                       ("Unexpected key(s)", unexpected),
                       ("Shape mismatch", shapes),
                       ("Dtype mismatch (no cast: the file's dtype must be "
                        "the parameter's, or floating with offload(dtype=))",
                        dtypes)):
        if keys:
            errs.append(f"{what}: " + ", ".join(f'"{k}"' for k in keys))
    if errs:
        raise ValueError(f"nvswap.torch.offload: error(s) loading "
                         f"{weights.path} into {type(model).__name__}:\n\t"
                         + ".\n\t".join(errs) + ".")
    for keys in twice:
        for k in keys[1:]:
            if not weights.equal(keys[0], k):
                raise ValueError(
                    f"nvswap.torch.offload: {weights.path} holds the tied "
                    f"parameter both as '{keys[0]}' and as '{k}', with "
                    "different values (a tied parameter is one tensor: "
                    "keep one of them)")
    return b


def prepare(model, path, dtype=None):
    """open_weights(path) bound to model (see bind())."""
    w = open_weights(path)
    try:
        return bind(model, w, dtype)
    except BaseException:
        w.close()
        raise


class Loader:
    """Fills the layers of an offload from a Binding; see the file's
    comment. renamed: offload()'s map of the meta parameters replaced
    (their ids -> the new ones). read=False (a resumed checkpoint): the
    layers are registered (and adopted from the checkpoint), nothing is
    read."""

    def __init__(self, eng, binding, init, device, renamed, read=True):
        self.eng, self.b, self.w = eng, binding, binding.weights
        self.init, self.device, self.read = init, device, read
        self.cap = max(1, eng.pswap.stats()["buffer_count"] - 1)
        if eng.masters is not None:  # each layer's masters take a buffer
            self.cap = max(1, min(self.cap,
                                  eng.gswap.stats()["buffer_count"] - 1))
        self.inflight = []  # [(layer, [op], {index: fp32 master})]
        self.files = {}  # weights file -> its index in the parameter pool
        self.paths = {}  # and back
        self.extents = []  # (path, offset, bytes) of each tensor in place
        self.checksum = eng.pswap.stats()["checksum"]
        # a persistent set's manifests name no outside file: copied
        self.scratch = not eng.persistent
        self.undo = []  # (module._buffers, name, buffer as given)
        self.model = None
        self.renamed = renamed  # id(parameter as given) -> its successor
        self.given = {}  # id -> a parameter as given, replaced
        self.own = {}  # module -> its parameters, when init must run
        self.done_init = set()

    # ------------------------------------------------------ buffers
    def _set_buffer(self, m, n, t):
        self.undo.append((m._buffers, n, m._buffers[n]))
        m._buffers[n] = t

    def buffers(self, model, plan):
        """Before the layers: the persistent buffers from the file, and
        the meta buffers the file does not give from init (or
        reset_parameters()), one call per module; the modules whose
        parameters init must set are left to add()."""
        self.model = model
        need_init = {m for _, m, chunk in plan
                     if any(id(p) in self.b.init_params for _, p in chunk)}
        for _, m, chunk in plan:  # all of a module's layers
            if m in need_init:
                self.own.setdefault(m, []).extend(chunk)
        for mname, m in model.named_modules():
            if m in self.own:
                continue
            need = [n for n in _meta_buffers(m)
                    if id(m._buffers[n]) not in self.b.supplied]
            if not need:
                continue
            for n in _meta_buffers(m):
                self.undo.append((m._buffers, n, m._buffers[n]))
            names = _fill_buffers(m, self.device)
            _resetter(m, self.init)(m)
            _check_filled(m, mname, [n for n in names if n in need],
                          self.device)
        self.file_buffers()

    def file_buffers(self, only=None):
        loaded = {}
        for m, n, key in self.b.buffers:
            if only is not None and m is not only:
                continue
            if key not in loaded:
                t = self.w.tensor(key)
                loaded[key] = t if self.device is None else \
                    t.to(self.device)
            cur = m._buffers[n]
            if cur is not None and not cur.is_meta and \
                    cur.device == loaded[key].device:
                with torch.no_grad():
                    cur.copy_(loaded[key])
            else:
                self._set_buffer(m, n, loaded[key])

    # ------------------------------------------------------- layers
    def add(self, mname, m, chunk):
        """Register one layer of the plan and start reading it; returns
        (layer, the chunk with the parameters now in the model)."""
        if m in self.own:  # init sets some: the materialized path
            return self._add_init(mname, m, chunk)
        out, keep = [], {}
        for name, p in chunk:
            if p.is_meta:
                q = torch.nn.Parameter(
                    torch.empty((), dtype=p.dtype).expand(p.shape),
                    requires_grad=p.requires_grad)
                m._parameters[name.rpartition(".")[2]] = q
                self.given[id(p)] = p
                self.renamed[id(p)] = q
                p = q
            elif id(p) not in self.b.params:  # ignored as missing: kept
                keep[id(p)] = p.data
            out.append((name, p))
        sources = self._sources(out, chunk, keep)
        layer = self.eng.add_layer_from(out, sources)
        if sources is not None:
            self.eng.hold_dirs(layer, {self.paths[f] for f, _ in sources})
        if not self.read or sources is not None:
            return layer, out
        table = self.eng.rows.get(layer)
        if table is not None:  # an embedding read by rows: piece by piece
            orig = chunk[0][1]
            if id(orig) in keep:
                table.write_all(keep[id(orig)])
            else:
                key = self.b.params[id(orig)]
                table.fill(lambda start, dest:
                           self.w.read_rows(key, start, dest))
            return layer, out
        if self.eng.masters is not None and \
                self.eng.masters.runs(layer) is not None:
            self._add_cut(layer, out, chunk, keep)
            return layer, out
        self.eng.acquire(layer, host=True)
        ops, masters = [], {}
        try:
            # With fp32 masters the file's values go to the master, and
            # the layer takes them rounded once they are in (_finish).
            if self.eng.masters is not None:
                masters = {i: t for i, (_, _, t) in
                           self.eng.masters.swap_in(layer).items()}
            for i, ((_, p), (_, orig)) in enumerate(zip(out, chunk)):
                dest = masters.get(i, p.data)
                if id(orig) in keep:
                    dest.copy_(keep[id(orig)])
                else:
                    ops += self.w.submit_into(self.b.params[id(orig)], dest)
        finally:
            self.inflight.append((layer, ops, masters))
        while len(self.inflight) >= self.cap:
            self._finish(self.inflight[0])
        return layer, out

    def _sources(self, out, chunk, keep):
        """Weights in place: for a layer the model streams, on the CPU,
        unconverted and unchecked (no dtype=, no fp32 masters, no
        checksum), in a scratch pool, whose every tensor lies whole in a
        weights file in the model's dtype, each tensor's (file, offset)
        in the parameter pool's files (added on first use; nothing is
        read or written: the layer is read from there at each use until
        a step changes it, whose dirty write-back moves it into the swap
        file: a served model's never moves, a frozen layer's neither).
        Else None: the layer is read into a pool buffer and written to
        the swap file."""
        eng, w = self.eng, self.w
        layer = len(eng.layers)
        if (not IN_PLACE or not self.read or keep or not self.scratch or
                eng.dtype is not None or eng.masters is not None or
                eng.read_only or eng.device is not None or
                self.checksum or not hasattr(w, "in_place") or
                (eng.in_cpu is not None and layer in eng.in_cpu) or
                (eng.in_cpu is None and eng.max_in_cpu) or
                (len(out) == 1 and out[0][0] in eng.by_rows)):
            return None
        src = []
        for (_, p), (_, orig) in zip(out, chunk):
            key = self.b.params.get(id(orig))
            where = w.in_place(key) if key is not None else None
            # 64-byte aligned in the file, else copied: read in place it
            # would be staged at every use (the C library keeps it 64-byte
            # aligned in the buffer: torch rounds differently off a cache
            # line), costing a copy per forward that the swap file's
            # aligned copy is read without (bench/serve_set.py)
            if where is None or where[1] % 64 or where[2] != nbytes(p) \
                    or where[3] != p.dtype:
                return None
            src.append(where)
        self.extents += [(path, off, n) for path, off, n, _ in src]
        return [(self._file(path), off) for path, off, _, _ in src]

    def _file(self, path):
        """path's index among the parameter pool's files, added once with
        its header's bytes as the head the C library checks it by, and
        checked to be the file the weights' headers came from."""
        f = self.files.get(path)
        if f is None:
            head = getattr(self.w, "heads", {}).get(path, 0)
            f = self.eng.pswap.add_file(path, head)
            self.w.same_file(path)
            self.files[path] = f
            self.paths[f] = path
        return f

    def _add_cut(self, layer, out, chunk, keep):
        """A layer whose fp32 masters are in parts (_mixed.Masters): the
        file's values read into one part of them at a time, the layer
        given them rounded, then the next; its other parameters read
        whole. Not pipelined: the layers before it are finished first,
        their buffers free."""
        while self.inflight:
            self._finish(self.inflight[0])
        eng, filled = self.eng, False
        ps = eng.layers[layer]

        def fill(i, a, dest):
            orig = chunk[i][1]
            if id(orig) in keep:
                dest.copy_(keep[id(orig)].reshape(-1)[a:a + dest.numel()])
            else:
                self.w.read_span(self.b.params[id(orig)], a, dest)
        eng.acquire(layer, host=True)
        try:
            with torch.no_grad():
                for i in range(len(out)):
                    if i not in eng.masters.index[layer]:
                        fill(i, 0, ps[i].data.view(-1))
                for k in range(len(eng.masters.parts(layer))):
                    got = eng.masters.swap_in(layer, k)
                    try:
                        for i, (a, b, t) in got.items():
                            fill(i, a, t.view(-1))
                            ps[i].data.view(-1)[a:b].copy_(t.view(-1))
                    finally:
                        del got
                        eng.masters.swap_out(layer, k)
            filled = True
        finally:
            eng.release(layer, filled)

    def _add_init(self, mname, m, chunk):
        """A module some of whose parameters the file lacks (keys the
        model ignores as missing): init(module) sets all of them in CPU
        memory, then the file's overwrite theirs, as from_pretrained
        does."""
        renamed = self.renamed
        if m not in self.done_init:
            self.done_init.add(m)
            own = self.own[m]
            self.given.update((id(p), p) for _, p in own)
            for n in _meta_buffers(m):
                self.undo.append((m._buffers, n, m._buffers[n]))
            materialize(mname, m, own, self.init, renamed, self.device)
            self.file_buffers(only=m)
            with torch.no_grad():
                for name, p in own:
                    key = self.b.params.get(id(p))
                    if key is not None:
                        self.w.read_into(key, renamed.get(id(p), p).data)
        chunk = [(n, renamed.get(id(p), p)) for n, p in chunk]
        return self.eng.add_layer(chunk), chunk

    def _finish(self, entry):
        layer, ops, masters = entry
        self.inflight.remove(entry)
        try:
            for op in ops:
                op.wait()
            ps = self.eng.layers[layer]
            for i, t in masters.items():
                ps[i].data.copy_(t)  # rounded, as cast() does
        except BaseException:
            self._drop(layer, masters)
            raise
        self._drop(layer, masters, True)  # the write-behinds start

    def _drop(self, layer, masters, filled=False):
        if masters:
            masters.clear()
            try:
                self.eng.masters.swap_out(layer)
            except BaseException:
                if filled:
                    self.eng.release(layer)
                    raise
        self.eng.release(layer, filled)

    def finish(self):
        """Wait for the last reads; the layers go to their swap files."""
        while self.inflight:
            self._finish(self.inflight[0])
        self.w.close()

    def abort(self):
        """A failed load: reads collected, layers let go, the model's own
        tensors (on the meta device) put back, the engine's layers
        forgotten (nothing to read back)."""
        for layer, ops, masters in self.inflight:
            for op in ops:
                try:
                    op.wait()
                except Exception:
                    pass
            try:
                self._drop(layer, masters)
            except Exception:
                pass
        self.inflight = []
        for d, n, t in reversed(self.undo):
            d[n] = t
        self.undo = []
        back = {id(q): self.given[i] for i, q in self.renamed.items()
                if i in self.given}
        for m in (self.model.modules() if self.model is not None else ()):
            for n, q in m._parameters.items():
                if q is not None and id(q) in back:
                    m._parameters[n] = back[id(q)]
        for ps in self.eng.layers:
            for p in ps:
                p.__dict__.pop("_nvswap", None)
        self.eng.layers = []
        self.w.close()
