# SPDX-License-Identifier: MIT
"""One layer's optimizer step (a mixin of OffloadedOptimizer, _optim.py):
the layer's parameters and gradient region acquired, its Adam state read
part by part (_parts.py; most layers are one part) with the part of its
fp32 masters that part lies in (_MasterParts; most layers' are one
part), each part lent to the private torch optimizer (_pieces.Lent) and
stepped, the masters rounded into the layer, the state written back; a
layer's first step registers its state first."""
import errno
from collections import defaultdict

import torch

import nvswap

from . import _parts, _pieces
from ._engine import error

_EMPTY = torch.empty(0)  # what a stand-in holds between steps


def _copy(v):
    """A scalar state's value of its own (torch adds to a step count in
    place)."""
    return v.clone() if torch.is_tensor(v) else v


class _MasterParts:
    """The fp32 masters of the layer being stepped, one part of them
    held at a time (_mixed.Masters; most layers' are one part): a part
    is read when the step first needs it and written back when the step
    moves past it (close() for the last)."""

    def __init__(self, opt, layer):
        self.opt, self.layer = opt, layer
        self.masters = opt._eng.masters
        self.k, self.held = None, {}

    def piece(self, i, a, b, held=False):
        """(tensor, lo, hi): the master of parameter i over elements
        [lo, hi) from a pool buffer, holding [a, b); the parameter's
        shape where that is all of it. held: pieces of the part held now
        are lent (it cannot be given back)."""
        k = self.masters.part_of(self.layer, i, a)
        if k != self.k:
            if held and self.k is not None:
                raise error(errno.EINVAL,
                            "nvswap.torch: a part of the optimizer state "
                            f"of layer {self.layer} spans two parts of its"
                            " fp32 masters")
            self.close()
            self.held = self.opt._read(
                self.layer, "fp32 masters",
                lambda layer: self.masters.swap_in(layer, k))
            self.k = k
        lo, hi, t = self.held[i]
        if b > hi:
            raise error(errno.EINVAL,
                        "nvswap.torch: a part of the optimizer state of "
                        f"layer {self.layer} spans two parts of its fp32 "
                        "masters")
        return t, lo, hi

    def ready(self, part):
        """Hold the masters' part that state part (of the layer's Adam
        state) is stepped with, before the state is read (and the next
        part read ahead into a free buffer)."""
        for i, _, a, b in part:
            if i in self.masters.index.get(self.layer, ()):
                self.piece(i, a, b)
                return

    def close(self):
        if self.k is not None:
            k, self.k, self.held = self.k, None, {}
            self.masters.swap_out(self.layer, k)


class LayerStep:
    """The step of one layer (OffloadedOptimizer's)."""

    def _step_layer(self, layer, items, ops=None, groups=None, grads=None):
        """Step one layer; grads: {param index: gradient} given in
        backward (step_in_backward), else the layer's gradient region.
        With fp32 masters torch steps them, and the layer takes their
        values rounded to its dtype. Once torch's arithmetic ran the
        layer is stepped (in self._done) and released dirty, whatever
        the write-backs after it raise. ops, groups: a deferred step's
        clips and hyper-parameters, taken at its step()."""
        eng = self._eng
        eng.acquire(layer, host=True)  # steps in CPU memory
        changed = False
        try:
            region = (self._read(layer, "gradient region",
                                 eng.grads.acquire)
                      if grads is None else None)
            masters = (_MasterParts(self, layer)
                       if eng.masters is not None else None)
            try:
                try:
                    self._step_lent(layer, items, region, grads, masters,
                                    ops, groups)
                finally:
                    changed = (layer in self._done or
                               layer in self._partial)
                    if masters is not None:
                        masters.close()
            finally:
                if region is not None:
                    del region
                    eng.grads.release(layer)
        finally:
            eng.release(layer, changed)

    def _step_lent(self, layer, items, region, grads, masters, ops, groups):
        if layer not in self._keys and \
                not self._register_zeros(layer, items, groups):
            if masters is not None and \
                    self._eng.masters.runs(layer) is not None:
                raise error(errno.EFBIG,
                            f"nvswap.torch.{type(self).__name__}: this "
                            "optimizer's first step makes a state "
                            "nvswap.torch lends torch whole, and the fp32 "
                            f"masters of layer {layer} "
                            f"({', '.join(self._eng.names[layer])}) are "
                            "in parts, larger than an optimizer pool "
                            "buffer: raise offload_optimizer.buffer_size "
                            "(optimizer_buffer_size=)")
            self._step_made(layer, items, region, grads, masters, ops,
                            groups)
        else:
            self._step_parts(layer, items, region, grads, masters, ops,
                             groups)

    def _stepped(self, layer):
        """Torch's arithmetic ran over the whole layer: it is stepped
        (whatever the write-backs after raise)."""
        self._done.add(layer)
        self._partial.pop(layer, None)

    def _round(self, layer, lent):
        """What torch stepped of fp32 masters, rounded into the bf16
        layer (as copy_ rounds); interrupted, the layer is part old,
        part new, as when torch's step is (_run)."""
        def copy():
            for p, c, _, a, b in lent:
                if p in self._proxy:
                    p.data.view(-1)[a:b].copy_(c.reshape(-1))
        self._in_place(layer, "rounding the fp32 masters into", copy)

    def _step_parts(self, layer, items, region, grads, masters, ops,
                    groups):
        """The layer's step, one part of its state at a time (_parts.py;
        most layers are one part). A failure after a part's arithmetic
        keeps the layer's progress (self._partial): the retry steps the
        parts left, from the step counts as they were before the step."""
        parts = _parts.layout(self, layer)
        start, before = self._partial.get(layer, (0, None))
        if before is None:
            before = {p: {k: _copy(v) for k, v in
                          self._scalars.get(p, {}).items()}
                      for _, _, p in items}
        for k in range(start, len(parts)):
            gid = _parts.group(layer, k)
            if masters is not None:
                masters.ready(parts[k])
            state = self._read(layer, "optimizer state",
                               lambda _, g=gid: self._swap.swap_in(g))
            if k + 1 < len(parts):
                _parts.read_ahead(self, layer, k + 1)
            try:
                lent = self._lend(layer, items, region, state, parts[k],
                                  grads, masters, ops, groups, before)
                try:
                    self._run(layer)
                    self._round(layer, lent)
                    if k + 1 < len(parts):
                        self._partial[layer] = (k + 1, before)
                    else:
                        self._stepped(layer)
                finally:
                    self._unlend(items, lent)
            finally:
                del state
                self._swap.swap_out(gid)

    def _step_made(self, layer, items, region, grads, masters, ops, groups):
        """A layer's first step where torch makes the state (a form
        _pieces.first_state does not know): lent whole, then registered;
        a failure to register puts the values back."""
        lent = self._lend(layer, items, region, None, None, grads, masters,
                          ops, groups, None)
        try:
            old = [c.data.clone() for _, c, _, _, _ in lent]
            self._run(layer)
            try:
                self._register(layer, items)
            except BaseException:
                for (_, c, _, _, _), b in zip(lent, old):
                    c.data.copy_(b)
                raise
            self._round(layer, lent)
            self._stepped(layer)
        finally:
            self._unlend(items, lent)

    def _run(self, layer):
        """torch's step of what is lent (the sets' step opened first)."""
        self._open_step()
        self._in_place(layer, "torch's step of", self._lending.step)

    def _in_place(self, layer, what, change):
        """change(), which changes the layer's tensors one by one, in
        place: if it raises, the layer is part old, part new, and can be
        neither finished nor undone (the optimizer is broken)."""
        try:
            change()
        except BaseException as e:
            self._done.add(layer)
            self._broken = (f"{what} layer {layer} raised "
                            f"{type(e).__name__} ({e}) with its "
                            "values partly changed")
            raise

    def _read(self, layer, what, acquire):
        """acquire(layer): the layer's what from the optimizer set; its
        failure names the layer and what (the library's sentence names
        an internal tensor id)."""
        try:
            return acquire(layer)
        except nvswap.Error as e:
            raise self._eng._layer_error(layer, e, what=what) from e

    def _lend(self, layer, items, region, state, part, grads, masters,
              ops, groups, before):
        """Lend torch what part (of the layer's state, read as state)
        holds: each parameter whole, or its run of elements as a
        parameter of its own, with its state there and a copy of its
        step count before the step (before). state None: a first step
        where torch makes the state, every parameter whole. masters: the
        layer's fp32 masters (_MasterParts), or None. Returns [(param,
        what was lent, whether it holds its first element, first
        element, end)]."""
        eng, inner = self._eng, self._inner
        groups = groups or self.param_groups
        inner.state = defaultdict(dict)
        self._lending = _pieces.Lent(inner, groups)
        held = {}  # param index -> (first, end, {key: its state piece})
        for slot, (i, key, a, b) in enumerate(part or ()):
            held.setdefault(i, (a, b, {}))[2][key] = state[slot]
        out = []
        try:
            for gi, i, p in items:
                if state is not None:
                    if p not in self._key_order:
                        raise error(
                            errno.EINVAL,
                            f"nvswap.torch.{type(self).__name__}: "
                            f"'{eng.names[layer][i]}' got its first "
                            "gradient after its layer's first step; its "
                            "state cannot join the layer's swapped group "
                            "(every parameter of a layer must get a "
                            "gradient on the first step)")
                    if i not in held:
                        continue  # in another part
                out.append(self._lend_one(
                    layer, gi, i, p, held.get(i, (0, p.numel(), None)),
                    region, grads, masters, ops, before,
                    any(q in self._proxy for q, *_ in out)))
        except BaseException:  # a read of a master part, a bad gradient
            self._unlend(items, out)
            raise
        return out

    def _lend_one(self, layer, gi, i, p, span, region, grads, masters, ops,
                  before, held):
        """Lend parameter i's elements span (first, end, {key: its state
        piece}, or None where torch makes the state) with its gradient
        there (a piece of the region or of what backward gave); held:
        masters are lent already (from the part held)."""
        a, b, tens = span
        src = (grads[i] if grads is not None else
               self._eng.grad_view(region, layer, i))
        t, lo, hi = self._proxy.get(p, p), 0, p.numel()
        if t is not p:  # the fp32 master, stepped with g in fp32
            t.data, lo, hi = masters.piece(i, a, b, held)
        c = t  # t holds elements [lo, hi) of the parameter
        if (a, b) != (lo, hi):
            c = t.data.view(-1)[a - lo:b - lo]
        if (a, b) != (0, p.numel()):
            src = src.reshape(-1)[a:b]
        if tens is not None:
            self._inner.state[c] = {k: tens[k] if k in tens else
                                    _copy(before[p][k])
                                    for k in self._key_order[p]}
        self._lending.add(gi, c, src, self._grad_of(
            layer, i, t is not p, grads is None, ops))
        return (p, c, a == 0, a, b)

    def _grad_of(self, layer, i, master, clip, ops):
        """How the gradient of parameter i (or a piece of it) is lent: the
        step's clips applied (not to gradients given in backward), in
        fp32 for an fp32 master."""
        eng = self._eng

        def grad_of(g):
            if clip:
                g = eng.clipped(layer, i, g, ops)
            return g.float() if master else g
        return grad_of

    def _unlend(self, items, lent):
        """Take back what _lend lent: a parameter's step count is the one
        torch left on the piece holding its first element."""
        for p, c, first, _, _ in lent:
            c.grad = None
            st = (self._lending.state_of(c)
                  if first and self._lending is not None else None)
            if st and p in self._key_order:
                for k, v in st.items():
                    if k in self._scalars.get(p, {}):
                        self._scalars[p][k] = v
        for _, _, p in items:
            t = self._proxy.get(p, p)
            t.grad = None
            if t is not p:
                t.data = _EMPTY
        self._lending = None
        self._inner.state = defaultdict(dict)
        self._inner.param_groups = []

    def _register_zeros(self, layer, items, groups):
        """A layer's first step: its state registered before it, as
        torch's first step would make it (zeros, a step count of 0;
        _pieces.first_state), without memory or I/O (the pool buffer reads
        as zeros until written), so that the step runs as any other: in
        pieces, nothing to take back if registering fails. False where
        torch makes another form (it then makes the state itself, and
        _register takes it)."""
        groups = groups or self.param_groups
        made = []
        for gi, i, p in sorted(items, key=lambda it: it[1]):
            # (an fp32 master's stand-in is empty between steps)
            dtype = p.dtype if p not in self._proxy else torch.float32
            st = _pieces.first_state(self._inner, p.shape, dtype,
                                     groups[gi])
            if not st:
                return False
            made.append((i, p, st))
        self._add_state(layer, made)
        return True

    def _register(self, layer, items):
        """A layer's first step where torch made the state (a form
        _register_zeros does not know): register it."""
        self._add_state(layer, [
            (i, p, self._lending.state_of(self._proxy.get(p, p)))
            for _, i, p in sorted(items, key=lambda it: it[1])])

    def _add_state(self, layer, states):
        """Layer's state registered from [(param index, param, its
        state)], in index order: the tensors of the parameter's shape go
        to the state group (or its parts, _parts.py, where it is larger
        than a pool buffer), the rest (the step count) stays in memory."""
        values, keys, scalars = {}, [], {}
        for i, p, st in states:
            scalars[p] = {}
            for k, v in st.items():
                if torch.is_tensor(v) and k != "step" and v.shape == p.shape:
                    keys.append((i, k))
                    values[(i, k)] = v.contiguous()
                else:
                    scalars[p][k] = v
        _parts.add(self, layer, keys, values)
        for i, p, st in states:
            self._key_order[p] = list(st)
            self._scalars[p] = scalars[p]
