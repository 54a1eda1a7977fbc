# SPDX-License-Identifier: MIT
"""The forward side of the offload engine: forward hooks that acquire a
module's layers while it runs, and the saved-tensor hooks that keep
autograd from holding pool memory between forward and backward (a tensor
saved from a pool buffer is kept as its parameter and geometry, and
rebuilt on the parameter's buffer of the moment in backward)."""
import torch

from ._common import storage_ptr


class Saved:
    """A tensor autograd saved that lives in a pool buffer: kept by its
    geometry and rebuilt on the parameter's buffer of the moment."""

    __slots__ = ("param", "size", "stride", "offset")

    def __init__(self, param, t):
        self.param = param
        self.size, self.stride = t.size(), t.stride()
        self.offset = t.storage_offset()



class Passes:
    """Engine's forward and saved-tensor hooks (a mixin of Engine)."""

    def need(self, layer):
        """A layer used inside the running forward, held until that
        module's forward ends."""
        frame = self.frames[-1]
        if layer not in frame[1]:
            self.acquire(layer)
            frame[1].append(layer)

    def pre_forward(self, module, args):
        if not self.frames:
            self._enter()
        frame = [module, []]
        self.frames.append(frame)
        try:
            for layer in self.mod_layers.get(module, ()):
                self.need(layer)
        except BaseException:
            self.post_forward(module, args, None)
            raise

    def post_forward(self, module, args, out):
        if not self.frames:
            return
        frame = self.frames.pop()
        for layer in reversed(frame[1]):
            self.release(layer)
        if not self.frames:
            self._exit()

    def unwind(self):
        """Release what a forward that raised left held (torch < 2.1 has no
        always-called forward hooks)."""
        while self.frames:
            self.post_forward(None, None, None)

    def _enter(self):
        self.trace = []
        self.ctx = torch.autograd.graph.saved_tensors_hooks(self._pack,
                                                            self._unpack)
        self.ctx.__enter__()

    def _exit(self):
        ctx, self.ctx = self.ctx, None
        if ctx is not None:
            ctx.__exit__(None, None, None)
        if self.trace and self.trace != self.walk:
            self.walk = self.trace
            self.params.set_walk(self.walk)
        self.trace = []

    def _pack(self, t):
        if not self.live:
            return t
        try:
            p = self.live.get(storage_ptr(t))
        except (RuntimeError, NotImplementedError):
            return t
        if p is None:
            return t
        if t.dtype != p.dtype:
            return t.clone()
        return Saved(p, t)

    def _unpack(self, s):
        if not isinstance(s, Saved):
            return s
        p = s.param
        layer = p._nvswap.layer
        self._backward_started()
        if layer not in self.bw_held:
            # Layers held for backward are released when their gradients
            # are complete, or, oldest first, to keep a pool buffer free
            # (a module used twice has its gradients complete only after
            # both uses' backward). A node unpacks its saved tensors before
            # it computes, so only a finished node's layer is let go.
            while len(self.bw_held) >= self.bw_cap:
                oldest = next(iter(self.bw_held))
                del self.bw_held[oldest]
                self.release(oldest)
            self.acquire(layer)
            got = self.bw_got.get(layer, set())
            self.bw_held[layer] = {
                i for i, q in enumerate(self.layers[layer])
                if q.requires_grad and i not in got}
        return p.data.as_strided(s.size, s.stride, s.offset)
