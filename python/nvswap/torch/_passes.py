# SPDX-License-Identifier: MIT
"""The forward side of the offload engine: forward hooks that acquire a
module's layers while it runs, and the saved-tensor hooks that keep
autograd from holding pool memory between forward and backward (a tensor
saved from a pool buffer is kept as its parameter and geometry, and
rebuilt on the parameter's buffer of the moment in backward).

Activation checkpointing (torch.utils.checkpoint) brings saved-tensor
hooks of its own. Ours sit on top of whatever hooks are set when an
offloaded module's forward starts, and hand every tensor that is not pool
memory down to them: so a checkpointed region still saves nothing from
the pools, the checkpoint sees the same tensors in the forward and in its
recomputation, and the recomputation in backward acquires the layers it
runs again (a pass of its own, learned into the walk).
"""
import threading

import torch

import nvswap

from ._common import GRAPH_TASK, storage_ptr

# The pair of saved-tensor hooks in force, (pack, unpack) or None. torch
# >= 2.1 says; on older torch the context manager is followed instead.
_TOP = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


def _follow_hooks():
    """torch < 2.1 cannot say which saved-tensor hooks are set: keep a
    per-thread stack of the saved_tensors_hooks contexts entered (what
    torch.utils.checkpoint uses)."""
    cls = torch.autograd.graph.saved_tensors_hooks
    if getattr(cls, "_nvswap_followed", False):
        return
    tls = threading.local()
    enter, exit_ = cls.__enter__, cls.__exit__

    def __enter__(self):
        out = enter(self)
        tls.__dict__.setdefault("stack", []).append(
            (self.pack_hook, self.unpack_hook))
        return out

    def __exit__(self, *exc):
        stack = tls.__dict__.get("stack")
        if stack:
            stack.pop()
        return exit_(self, *exc)

    cls.__enter__, cls.__exit__ = __enter__, __exit__
    cls._nvswap_followed = True
    cls._nvswap_stack = tls


def top_hooks():
    if _TOP is not None:
        return _TOP(True)
    stack = torch.autograd.graph.saved_tensors_hooks._nvswap_stack.__dict__
    stack = stack.get("stack")
    return stack[-1] if stack else None


if _TOP is None:
    _follow_hooks()


class Saved:
    """A tensor autograd saved that lives in a pool buffer: kept by its
    geometry and rebuilt on the parameter's buffer of the moment."""

    __slots__ = ("param", "size", "stride", "offset")

    def __init__(self, param, t):
        self.param = param
        self.size, self.stride = t.size(), t.stride()
        self.offset = t.storage_offset()


class Delegated:
    """A tensor handed to the hooks below ours (a checkpoint's): what
    their pack returned and their unpack."""

    __slots__ = ("packed", "unpack")

    def __init__(self, packed, unpack):
        self.packed, self.unpack = packed, unpack


class Hooks:
    """Our saved-tensor hooks over `below`, the pair set before them."""

    __slots__ = ("engine", "below")

    def __init__(self, engine, below):
        self.engine, self.below = engine, below

    def pack(self, t):
        return self.engine._pack(t, self.below)


class Passes:
    """Engine's forward and saved-tensor hooks (a mixin of Engine)."""

    def need(self, layer):
        """A layer used inside the running forward, held until that
        module's forward ends."""
        frame = self.frames[-1]
        if layer not in frame[1] and layer not in self.bound:
            self.acquire(layer)
            frame[1].append(layer)

    def in_backward(self):
        if GRAPH_TASK is not None:
            return GRAPH_TASK() != -1
        return self.bw_active or self.unpacking > 0

    def pre_forward(self, module, args):
        if not self.frames:
            self.stale_backward()
            self._enter()
            if self.holds and self.gswap is not None and \
                    not self.recomputing:
                self.drop_holds()  # trained layers moved into swap
        ctx = None
        top = top_hooks()
        own = getattr(top[0], "__self__", None) if top else None
        if not (isinstance(own, Hooks) and own.engine is self):
            if top is None and self.act is not None and \
                    not self.recomputing:  # activations=, not recomputed
                top = (self.act.pack, self.act.unpack)
            hooks = Hooks(self, top)
            ctx = torch.autograd.graph.saved_tensors_hooks(hooks.pack,
                                                           self._unpack)
            ctx.__enter__()
        frame = [module, [], ctx]
        self.frames.append(frame)
        layers = self.fwd_layers.get(module)
        if layers and self.act is not None and not self.recomputing:
            # the tensors saved from here on are this layer's (refused by
            # the store when more than its pool)
            self.act._mark(lambda: self.describe(layers[0]))
        try:
            for layer in self.fwd_layers.get(module, ()):
                self.need(layer)
        except BaseException:
            self.post_forward(module, args, None)
            raise

    def post_forward(self, module, args, out):
        if not self.frames:
            return
        frame = self.frames.pop()
        try:
            # A recomputation's layers stay resident (clean: the pool
            # takes the buffer back if it needs one first): backward
            # unpacks their saved weights right after, and an eviction
            # here read each of them again (hold_for_backward). Those
            # backward does not hold are evicted when the next
            # recomputation starts, or backward ends (_evict_kept).
            for layer in reversed(frame[1]):
                self.release(layer, evict=not self.recomputing)
                if self.recomputing:
                    self.bw_kept.add(layer)
        finally:
            if frame[2] is not None:
                frame[2].__exit__(None, None, None)
            if not self.frames:
                # out None: a forward that raised (unwind(), torch's
                # always-call hooks), whose exception must not wait for
                # a deferred step's I/O, nor be replaced by its failure
                self._exit(settle=out is not None)

    def describe(self, layer):
        """'layer 3 (model.h.0.attn.q.weight, ...)', for errors."""
        names = self.names[layer]
        return (f"layer {layer} ({', '.join(names[:2])}"
                f"{', ...' if len(names) > 2 else ''})")

    def unwind(self):
        """Release what a forward that raised left held (torch < 2.1 has no
        always-called forward hooks)."""
        while self.frames:
            self.post_forward(None, None, None)

    def _enter(self):
        """A pass starts: a forward, or in backward the recomputation of a
        checkpointed region."""
        self.recomputing = self.in_backward()
        if self.recomputing:
            # One recomputation may run several top-level modules (a
            # checkpointed block without parameters of its own): a new
            # one starts after backward went on (_unpack).
            self.bw_recomputed = True
            if not self.recompute_open:
                self._evict_kept()
                self.recompute_open = True
                self.recomputes += 1
            return
        # The previous step is over: learn its walk (forward, and the
        # backward too when it recomputed; without recomputation backward
        # is the forward reversed, which the C walk knows by itself).
        if self.bw_recomputed and self.fwd_trace:
            self._set_walk(self.fwd_trace + self.bw_trace)
        self.bw_trace, self.bw_recomputed = [], False
        self.trace = []
        self.fwd_read0 = self.param_bytes_read()
        if self.tuner is not None:
            self.tuner.forward_begins()

    def _exit(self, settle=True):
        if self.recomputing:
            self.recomputing = False
            return
        if self.act is not None:
            self.act._mark(None)  # what is saved after: no layer's
        trace, self.trace = self.trace, []
        self.forwards += 1
        self.last_forward_read = self.param_bytes_read() - self.fwd_read0
        if trace:
            self.fwd_trace = trace
            if self.walk is None or self.walk[:len(trace)] != trace:
                self._set_walk(trace)
            if self.tuner is not None:
                self.tuner.forward_ends()
        # a deferred step's layers this forward did not reach (not after
        # its update failed: what needs it next retries it)
        opt = self.optimizer
        if settle and opt is not None and opt._pending is not None and \
                opt._failure is None and not opt._broken:
            self.settle()
        if self.progress is not None and self.gswap is None:
            # serving: a line per forward, last (what it calls may raise)
            self.progress.tick("forward")

    def _set_walk(self, walk):
        if walk != self.walk:
            self.walk = walk
            self.params.set_walk(walk)

    def _pack(self, t, below):
        if self.live:
            try:
                p = self.live.get(storage_ptr(t))
            except (RuntimeError, NotImplementedError):
                p = None
            if p is not None:
                if t.dtype == p.dtype:
                    return Saved(p, t)
                t = t.clone()  # a reinterpretation: kept as a copy
        if below is None:
            return t
        return Delegated(below[0](t), below[1])

    def _unpack(self, s):
        if isinstance(s, Delegated):
            # The checkpoint's unpack: may recompute its region here.
            self._backward_started()
            self.unpacking += 1
            try:
                return s.unpack(s.packed)
            finally:
                self.unpacking -= 1
        if not isinstance(s, Saved):
            return s
        self.recompute_open = False
        p = s.param
        self.hold_for_backward(p._nvswap.layer)
        return p.data.as_strided(s.size, s.stride, s.offset)

    def _evict_kept(self):
        """Give back the buffers of layers the last recomputation left
        resident that backward did not hold (a weight autograd did not
        save): the read-ahead fills free buffers only."""
        kept, self.bw_kept = self.bw_kept, set()
        for layer in sorted(kept):
            if self.refs[layer] or layer in self.rows or \
                    layer in self.bound:
                continue
            try:
                self.params.evict_layer(layer)
            except nvswap.Error:
                pass  # as release(): the next wait or eviction raises

    def hold_for_backward(self, layer):
        """Acquire a layer backward needs, held until its gradients are
        complete, or, oldest first, let go to keep a pool buffer free (a
        module used twice has its gradients complete only after both
        uses' backward). A node unpacks its saved tensors before it
        computes, so only a finished node's layer is let go."""
        self._backward_started()
        self.bw_kept.discard(layer)
        if layer in self.bw_held:
            return
        while len(self.bw_held) >= self.bw_cap:
            oldest = next(iter(self.bw_held))
            del self.bw_held[oldest]
            self.release(oldest)
        self.acquire(layer)
        got = self.bw_got.get(layer, set())
        self.bw_held[layer] = {
            i for i, q in enumerate(self.layers[layer])
            if q.requires_grad and i not in got}
