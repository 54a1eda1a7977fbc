# SPDX-License-Identifier: MIT
"""The backward side of the offload engine: each parameter's gradient,
once complete, is written into its layer's region of the gradient swapper
(written behind when the layer has all of its gradients), kept in memory
where a write fails, or stepped at once (step_in_backward)."""
import errno

import torch

import nvswap

from ._clip import apply_op, tensor_norm
from ._common import GRAD_BASE, error, nbytes

_HAS_POST_ACC = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


class Grads:
    """Engine's gradient hooks and write-behind (a mixin of Engine)."""

    def _backward_started(self):
        if not self.bw_active:
            self.settle()  # a deferred step: whole before any gradient
            self.bw_active = True
            opt = self.optimizer
            if opt is not None and not opt._closed:
                opt.backward_begins()  # perhaps a speculative step
            torch.autograd.Variable._execution_engine.queue_callback(
                self._backward_done)

    def _backward_done(self, abandoned=False):
        """The end of a backward (autograd's callback); abandoned: a
        backward that raised, whose callback autograd dropped, found
        later (stale_backward()): what it held is let go, the gradients it
        wrote stay (as torch leaves them in p.grad), those step_in_backward
        kept are dropped."""
        self.bw_active = False
        self.recompute_open = False
        err = None
        if abandoned:
            self.stash = {}
        for layer in sorted(self.stash, reverse=True):
            try:  # layers with a parameter that got no gradient
                self._step_stashed(layer)
            except nvswap.Error as e:
                err = err or e
        if self.bw_stepped:  # step() must come before the next backward
            self.bw_stepped = False
            opt = self.optimizer
            # (one that stepped nothing, failing at its first layer, owes
            # no step())
            opt._unconsumed = bool(opt._began())
            if opt._began() and (abandoned or err is not None) and \
                    not opt._broken:
                opt._broken = (f"the backward that stepped layers "
                               f"{opt._began()} raised before the "
                               "others were stepped, and their gradients "
                               "are gone")
            elif opt._began() and not opt._broken:
                # every layer stepped: the step is whole in memory (step()
                # waits for its writes), a checkpoint may save it
                opt._close_step()
        held, self.bw_held = self.bw_held, {}
        self.bw_got = {}
        for layer in held:
            try:
                self.release(layer)
            except nvswap.Error as e:
                err = err or e
        self._evict_kept()
        for layer in self.written:
            self._flush(layer)
        opt = self.optimizer
        if opt is not None and opt._spec is not None:
            opt.backward_ends(abandoned)
        if err is not None and not abandoned:
            raise err

    def stale_backward(self, sure=False):
        """Finish a backward that raised (autograd then drops the callback
        that ends it, and the layers it held, the regions it left open
        would stay so): when torch says no backward runs, or sure (a call
        never made inside a backward: zero_grad)."""
        if self.bw_active and (sure or not self.in_backward()):
            self._backward_done(abandoned=True)

    def hook_grads(self, p):
        if _HAS_POST_ACC:
            self.handles.append(
                p.register_post_accumulate_grad_hook(self._on_grad))
            return
        with torch.enable_grad():
            node = p.expand_as(p).grad_fn.next_functions[0][0]
        self.handles.append(node.register_hook(lambda *_: self._on_grad(p)))
        self.keep.append(node)

    def _on_grad(self, p):
        g = p.grad
        p.grad = None
        if g is None:
            return
        rec = p._nvswap
        layer, i = rec.layer, rec.index
        if self.grad_hook is not None:
            g = self._hooked(rec.name, g)
        self._backward_started()
        opt = self.optimizer
        if opt is not None and opt.step_in_backward and not opt._closed:
            self._grad_in_backward(layer, i, g)
            return
        if opt is not None:  # a new gradient into a half-done step
            opt.settled(f"a gradient of '{rec.name}' (backward)")
            spec = opt._spec
            if spec is not None and spec.running and layer in spec.stepped:
                # a second gradient (reentrant checkpointing): the layer
                # was stepped on part of its gradient, the guess is void
                opt._spec_undo()
        if self.backlog:
            self.backlog.append((layer, i, g))
        else:
            try:
                self.write_grad(layer, i, g)
            except nvswap.Error:
                # A full disk, say: the gradient stays in memory and the
                # optimizer step raises (drain()) before changing anything.
                self.backlog.append((layer, i, g))
        got = self.bw_got.setdefault(layer, set())
        got.add(i)
        complete = len(got) == sum(q.requires_grad
                                   for q in self.layers[layer])
        spec = opt is not None and opt._spec is not None and complete
        owed = self.bw_held.get(layer)
        if owed is not None:
            owed.discard(i)
            if not owed:
                del self.bw_held[layer]
                # a layer stepped now stays resident for the step (no
                # read), which alone holds it: its change is known to the
                # sets at its release, whatever the step raises
                self.release(layer, evict=not spec)
        if complete:
            self._flush(layer)
            if spec:
                opt.spec_layer(layer)  # stepped now, on a guess

    def _hooked(self, name, g):
        """offload(grad_hook=fn): fn(name, grad) sees each gradient before
        it is written or stepped; a tensor it returns replaces it."""
        out = self.grad_hook(name, g)
        if out is None:
            return g
        if (not torch.is_tensor(out) or out.shape != g.shape or
                out.dtype != g.dtype):
            got = (f"{out.dtype} {tuple(out.shape)}" if torch.is_tensor(out)
                   else type(out).__name__)
            raise TypeError(f"nvswap.torch: grad_hook returned {got} for "
                            f"'{name}', whose gradient is {g.dtype} "
                            f"{tuple(g.shape)} (return a tensor like it, "
                            "or None to keep the gradient)")
        return out

    def _grad_in_backward(self, layer, i, g):
        """step_in_backward: gradients are kept in memory until their layer
        has all of them, then the layer is stepped at once, while its
        parameters are still resident; no gradient I/O at all."""
        opt = self.optimizer
        if opt._broken or opt._loading:
            opt.settled(f"a gradient of '{self.names[layer][i]}' "
                        "(backward)")
        if opt._unconsumed:
            raise error(errno.EINVAL,
                        "nvswap.torch: a second backward before step() "
                        "with step_in_backward: the first one's step was "
                        "already applied; call step() after each backward "
                        "(or use the default mode to accumulate gradients)")
        self.bw_stepped = True
        got = self.stash.setdefault(layer, {})
        if i in got:
            raise error(errno.EINVAL,
                        f"nvswap.torch: '{self.names[layer][i]}' got a "
                        "second gradient in one backward with "
                        "step_in_backward (use the default step mode to "
                        "accumulate gradients)")
        got[i] = g
        if len(got) == sum(q.requires_grad for q in self.layers[layer]):
            self._step_stashed(layer)

    def _step_stashed(self, layer):
        grads = self.stash.pop(layer)
        owed = self.bw_held.pop(layer, None)
        try:
            self.optimizer._backward_step(layer, grads)
        finally:
            if owed is not None:
                self.release(layer)

    def _flush(self, layer):
        """Write the layer's region behind; first take the norms of the
        gradients accumulated into it (stale), from the region itself."""
        if not self.backlog:
            try:
                stale = self.norm_stale.pop(layer, None)
                if stale:
                    self._region_norms(layer, stale, self.norm_kinds)
                else:
                    self.grads.flush(layer)
            except nvswap.Error:
                self.unflushed.add(layer)  # retried by drain()

    def drain(self):
        """Before a step: collect the gradient write-behind; where a write
        failed or backward kept gradients in memory, retry (evict the
        regions, write the kept gradients) and wait. Raises while the
        failure lasts; nothing is lost, and the next call retries."""
        self.stale_backward()
        if self.gswap is None:  # an inference model: no gradients
            return
        try:
            self.gswap.wait_all()
        except nvswap.Error:
            self.retry = True
        if not (self.retry or self.backlog or self.unflushed):
            return
        for layer in sorted(set(self.written) | self.unflushed):
            self.gswap.evict(GRAD_BASE + (layer << 20))
        # the failure may have been an optimizer state's or a master's
        # write behind: what is left dirty is written again (the wait
        # below raises while the failure lasts)
        self.evict_dirty(self.gswap)
        while self.backlog:
            layer, i, g = self.backlog[0]
            self.write_grad(layer, i, g)
            self.backlog.pop(0)
            self.unflushed.add(layer)
        while self.unflushed:
            layer = min(self.unflushed)
            self.grads.flush(layer)
            self.unflushed.discard(layer)
        self.gswap.wait_all()
        self.retry = False

    def write_grad(self, layer, i, g):
        """Add gradient g of parameter i to the layer's region, as torch
        adds into p.grad: the first since zero_grad is copied."""
        if self.grad_ops:
            self._materialize_ops(layer)
        if not g.is_contiguous():
            g = g.contiguous()
        off = self.grad_off[layer][i]
        seen = self.written.setdefault(layer, set())
        first = i not in seen
        self.norms.pop((layer, i), None)
        if first and self.norm_kinds:
            self._take_norms(layer, i, g)  # on its own device, as torch
        if g.device.type != "cpu":
            g = g.to("cpu")  # the gradient pool is CPU memory
        if first:
            self.grads.write(layer, off, g, "assign")
        elif g.dtype == torch.float32:
            self.grads.write(layer, off, g, "accumulate_f32")
            if self.norm_kinds:  # the sum is in the region: at the flush
                self.norm_stale.setdefault(layer, set()).add(i)
        else:
            self.grads.flush(layer)
            region = self.grads.acquire(layer)
            cur = region[off:off + nbytes(g)].view(g.dtype).view(g.shape)
            total = cur + g
            del cur, region
            self.grads.release(layer)
            self.grads.write(layer, off, total, "assign")
            if self.norm_kinds:
                self._take_norms(layer, i, total)
        seen.add(i)

    def zero_grads(self):
        self.stale_backward(sure=True)
        self.backlog, self.unflushed = [], set()
        opt = self.optimizer
        pend = opt._pending if opt is not None else None
        for layer in self.written:
            if pend is not None and layer in pend.left():
                pend.zero.add(layer)  # its update still reads it
            else:
                self.grads.zero(layer)
        self.written = {}
        self.norms, self.norm_stale, self.grad_ops = {}, {}, []

    # ---------------------------------------------- norms and clipping
    def has_grad(self, layer, i):
        return i in self.written.get(layer, ())

    def grad_device(self):
        """Where the gradients would be in memory: the compute device."""
        return self.device if self.device is not None else \
            torch.device("cpu")

    def _take_norms(self, layer, i, g, kinds=None):
        if g.device != self.grad_device():
            g = g.to(self.grad_device())
        got = self.norms.setdefault((layer, i), {})
        for nk in kinds or self.norm_kinds:
            got[nk] = tensor_norm(g, *nk)

    def _region_norms(self, layer, idx, kinds):
        """The norms of gradients idx of the layer, from its region
        (acquiring it flushes what was written)."""
        region = self.grads.acquire(layer)
        try:
            for i in idx:
                self._take_norms(layer, i, self.grad_view(region, layer, i),
                                 kinds)
        finally:
            del region
            self.grads.release(layer)

    def grad_norms(self, keys, norm_type, kind):
        """{(layer, index): norm} of the gradients keys, as torch's
        clip_grad_norm_ takes them (kind: 'vector' or 'foreach'). Taken
        in backward where this norm was asked for before; otherwise read
        back now, and taken in backward from now on."""
        nk = (norm_type, kind)
        self.norm_kinds.add(nk)
        if self.grad_ops:  # clipped before: the clipped gradients' norm
            for layer in sorted({layer for layer, _ in keys}):
                self._materialize_ops(layer)
        missing = {}
        for layer, i in keys:
            if nk not in self.norms.get((layer, i), {}):
                missing.setdefault(layer, []).append(i)
        for layer, idx in sorted(missing.items()):
            self.norm_stale.get(layer, set()).difference_update(idx)
            self._region_norms(layer, idx, [nk])
        return {k: self.norms[k][nk] for k in keys}

    def defer_grad_op(self, keys, op):
        """A clip of gradients keys ([(layer, index)]), applied in each
        optimizer step before the update (clipped()) until zero_grad."""
        self.grad_ops.append((frozenset(keys), op))
        for k in keys:
            self.norms.pop(k, None)

    def clipped(self, layer, i, g, ops=None):
        """Gradient g of parameter i with the deferred clips applied (ops:
        those a deferred step took, else the current ones)."""
        for keys, op in (self.grad_ops if ops is None else ops):
            if (layer, i) in keys:
                g = apply_op(g, op)
        return g

    def _materialize_ops(self, layer):
        """The layer's deferred clips written into its region: before a
        gradient is added to a clipped one, or a clipped norm is taken,
        as torch would see p.grad clipped in place."""
        idx = sorted({i for keys, _ in self.grad_ops for lay, i in keys
                      if lay == layer})
        if not idx:
            return
        region = self.grads.acquire(layer)
        try:
            new = {i: self.clipped(layer, i, self.grad_view(region, layer, i))
                   for i in idx}
        finally:
            del region
            self.grads.release(layer)
        for i, t in new.items():
            self.grads.write(layer, self.grad_off[layer][i], t.contiguous(),
                             "assign")
            self.norms.pop((layer, i), None)
            # done: never clipped twice, even when a later write fails
            done = {(layer, i)}
            self.grad_ops = [(keys - done, op) for keys, op in self.grad_ops
                             if keys - done]
        self.grads.flush(layer)

    def grad_view(self, region, layer, i):
        p = self.layers[layer][i]
        off = self.grad_off[layer][i]
        return region[off:off + nbytes(p)].view(p.dtype).view(p.shape)
