# SPDX-License-Identifier: MIT
"""A deferred optimizer step: what step() took, applied later.

step() (the default, defer=True) does not update the layers. It takes
what the step depends on at the call, as torch would read it then: the
layers with a gradient and which of their parameters have one, the
clips pending on those gradients, and the hyper-parameters of every
group (an LR scheduler's next value must not reach this step). Each
layer is then updated by OffloadedOptimizer.pend() when something first
needs it: the next forward's acquire (forward runs the layers in the
step's order), or a reader that finishes the whole step (state dicts,
checkpoints, backward, exit).

While a layer is updated the next one's gradient region, Adam state and
fp32 masters (their first parts, where in parts) are read ahead into
free optimizer-pool buffers (the parameters are read ahead by the
forward's walk), and its writes go
behind, so the disk works while the forward computes. zero_grad() in the
meantime leaves the regions of the layers not yet stepped alone until
they are.
"""
import contextlib

import torch

import nvswap

from ._common import GRAD_BASE, STATE_BASE
from ._mixed import MASTER_BASE



def _frozen(value):
    """A hyper-parameter as step() saw it: a tensor (a tensor lr an LR
    scheduler fills in place) copied."""
    if torch.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, tuple):
        return tuple(_frozen(v) for v in value)
    return value


class Pending:
    """The deferred step of opt: items {layer: [(group, index, param)]}
    in step order."""

    def __init__(self, opt, items):
        eng = opt._eng
        self.opt = opt
        self.items = items
        self.order = list(items)
        self.ops = list(eng.grad_ops)
        self.groups = [{k: _frozen(v) for k, v in g.items() if k != "params"}
                       for g in opt.param_groups]
        self.number = eng.steps + 1  # the step it is (step() counts it)
        self.zero = set()  # layers zero_grad() zeroed before their update

    def left(self):
        return [la for la in self.order if la not in self.opt._done]

    def read_ahead(self, layer):
        """Start the reads of the layer after `layer` in step order (the
        first one for None): into free buffers only, never waiting. A
        read that cannot start is left to the update that needs the data
        (its acquire reads again and raises its own failure); one that
        fails in flight is kept by the swapper for that acquire, which
        raises it (and the next one reads again)."""
        opt, eng = self.opt, self.opt._eng
        nxt = None
        at = -1 if layer is None else self.order.index(layer)
        for la in self.order[at + 1:]:
            if la not in opt._done:
                nxt = la
                break
        if nxt is None:
            return
        ids = [GRAD_BASE + (nxt << 20)]
        if nxt in opt._keys:
            ids.append(STATE_BASE + (nxt << 20))
        if eng.masters is not None and nxt in eng.masters.index:
            ids.append(MASTER_BASE + (nxt << 20))
        for i in ids:
            try:
                if not eng.gswap.try_prefetch(i):
                    break  # the pool is full: the acquire reads it
            except nvswap.Error:
                break  # reported again by the acquire that needs it

    @contextlib.contextmanager
    def context(self):
        """The update runs as step() would: no autograd, no autocast, not
        in inference mode (whatever the forward that reached the layer
        runs under)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            if hasattr(torch, "inference_mode"):
                stack.enter_context(torch.inference_mode(False))
            for dev in ("cpu", "cuda"):
                if dev == "cuda" and not torch.cuda.is_available():
                    continue
                stack.enter_context(torch.autocast(dev, enabled=False))
            yield

    def stepped(self, layer):
        """layer is updated: a zero_grad() that came meanwhile zeroes its
        gradient region now."""
        if layer in self.zero:
            self.zero.discard(layer)
            try:
                self.opt._eng.grads.zero(layer)
            except nvswap.Error:
                pass  # nothing reads it: the next gradient is assigned
