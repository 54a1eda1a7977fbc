# SPDX-License-Identifier: MIT
"""One layer's optimizer step (a mixin of OffloadedOptimizer, _optim.py):
the layer's parameters, gradient region and fp32 masters acquired, its
Adam state read part by part (_parts.py; most layers are one part), each
part lent to the private torch optimizer (_pieces.Lent) and stepped,
the state written back; a layer's first step registers its state
first."""
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
            try:
                masters = (self._read(layer, "fp32 masters",
                                      eng.masters.swap_in)
                           if eng.masters is not None else None)
                try:
                    self._step_lent(layer, items, region, grads, masters,
                                    ops, groups)
                finally:
                    changed = (layer in self._done or
                               layer in self._partial)
                    if masters is not None:
                        del masters
                        eng.masters.swap_out(layer)
            finally:
                if region is not None:
                    del region
                    eng.grads.release(layer)
        finally:
            eng.release(layer, changed)

    def _step_lent(self, layer, items, region, grads, masters, ops, groups):
        if layer not in self._keys and \
                not self._register_zeros(layer, items, groups):
            self._step_made(layer, items, region, grads, masters, ops,
                            groups)
        else:
            self._step_parts(layer, items, region, grads, masters, ops,
                             groups)

    def _stepped(self, layer, items, masters):
        """Torch's arithmetic ran over the whole layer: it is stepped
        (whatever the write-backs after raise), a bf16 layer given its
        fp32 masters rounded."""
        for _, i, p in items:
            if p in self._proxy:
                p.data.copy_(masters[i])  # rounded, as copy_ does
        self._done.add(layer)
        self._partial.pop(layer, None)

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
            state = self._read(layer, "optimizer state",
                               lambda _, g=gid: self._swap.swap_in(g))
            if k + 1 < len(parts):
                _parts.read_ahead(self, layer, k + 1)
            try:
                lent = self._lend(layer, items, region, state, parts[k],
                                  grads, masters, ops, groups, before)
                try:
                    self._run(layer)
                    if k + 1 < len(parts):
                        self._partial[layer] = (k + 1, before)
                    else:
                        self._stepped(layer, items, masters)
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
            old = [c.data.clone() for _, c, _ in lent]
            self._run(layer)
            try:
                self._register(layer, items)
            except BaseException:
                for (_, c, _), b in zip(lent, old):
                    c.data.copy_(b)
                raise
            self._stepped(layer, items, masters)
        finally:
            self._unlend(items, lent)

    def _run(self, layer):
        """torch's step of what is lent (the sets' step opened first)."""
        self._open_step()
        try:
            self._lending.step()
        except BaseException as e:
            # torch changes a layer's tensors one by one, in place:
            # this layer is part old, part new, and can be neither
            # finished nor undone
            self._done.add(layer)
            self._broken = (f"torch's step of layer {layer} raised "
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
        where torch makes the state, every parameter whole. Returns
        [(param, what was lent, whether it holds its first element)]."""
        eng, inner = self._eng, self._inner
        groups = groups or self.param_groups
        inner.state = defaultdict(dict)
        self._lending = lent = _pieces.Lent(inner, groups)
        held = {}  # param index -> (first, end, {key: its state piece})
        for slot, (i, key, a, b) in enumerate(part or ()):
            held.setdefault(i, (a, b, {}))[2][key] = state[slot]
        out = []
        for gi, i, p in items:
            if state is not None:
                if p not in self._key_order:
                    raise error(errno.EINVAL,
                                f"nvswap.torch.{type(self).__name__}: "
                                f"'{eng.names[layer][i]}' got its first "
                                "gradient after its layer's first step; "
                                "its state cannot join the layer's swapped "
                                "group (every parameter of a layer must "
                                "get a gradient on the first step)")
                if i not in held:
                    continue  # in another part
            src = (grads[i] if grads is not None else
                   eng.grad_view(region, layer, i))
            t = self._proxy.get(p, p)
            if t is not p:  # the fp32 master, stepped with g in fp32
                t.data = masters[i]
            c, first = t, True
            if state is not None:
                a, b, tens = held[i]
                if a or b != p.numel():
                    c, first = t.data.view(-1)[a:b], a == 0
                    src = src.reshape(-1)[a:b]
                inner.state[c] = {k: tens[k] if k in tens else
                                  _copy(before[p][k])
                                  for k in self._key_order[p]}
            lent.add(gi, c, src, self._grad_of(layer, i, t is not p,
                                               grads is None, ops))
            out.append((p, c, first))
        return out

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
        for p, c, first in lent:
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
