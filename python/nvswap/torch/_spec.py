# SPDX-License-Identifier: MIT
"""A speculative optimizer step: each layer stepped in backward, as soon
as its gradients are complete, on the guess that the step() to come
will not clip them; kept when the guess holds, redone exactly when not.

When it runs (OffloadedOptimizer.speculate_now(), at the start of a
backward; all must hold): the default step mode (defer=True, not
step_in_backward), a CPU model, every layer's Adam state made (not the
first step), the last step did not clip (no clip, or one whose
coefficient was 1: a clip that fired once is likely to fire again, and
then the deferred step is the faster), and this backward is the last of
its step (as many backwards since the last step() as before it: the
accumulation count is learned; a wrong guess costs time, never bits).

How: both sets open an undoable step (nvswap Swapper.step_begin(
undoable=True); the optimizer set's state and masters only, not the
gradient regions), so each layer's new parameters, Adam state and fp32
masters go to new places and the old ones stay. The gradients are
written as in the default mode (the redo reads them). The
hyper-parameters are taken at the start of backward.

The verdict, at step(): the step is kept (Swapper.step_end(): the old
versions are given back) when every clip recorded since is a multiply
by exactly 1 (a finite total norm under max_norm: g * 1 is g, bit for
bit), the hyper-parameters are those the layers were stepped with, the
same layers have gradients, and no closure is given. Otherwise, or
when anything reads the parameters or the optimizer state before
step() (a state dict, a checkpoint, gathered(), a forward, zero_grad(),
another backward), the step is undone (Swapper.step_undo(): every
layer back as it was, bit for bit, on disk and in memory; the step
counts and scalars restored here) and step() takes the ordinary
deferred step with the clipped gradients. A layer's speculative step
that fails (a full disk: the old versions take room too) undoes the
speculation and the backward goes on as in the default mode.
"""
import copy
import errno
import time

import torch

import nvswap

from ._common import GRAPH_TASK, STATE_BASE
from ._mixed import MASTER_BASE
from ._pending import _frozen

# the ids of an optimizer set that an undo covers: Adam state .. masters
_IDS = range(STATE_BASE, MASTER_BASE + (1 << 40))


def _same(a, b):
    if torch.is_tensor(a) or torch.is_tensor(b):
        return (torch.is_tensor(a) and torch.is_tensor(b) and
                a.shape == b.shape and a.dtype == b.dtype and
                bool(torch.equal(a, b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def groups_now(opt):
    return [{k: _frozen(v) for k, v in g.items() if k != "params"}
            for g in opt.param_groups]


def same_groups(a, b):
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
        for x, y in zip(a, b))


def identity_clips(ops):
    """Every clip is a multiply by exactly 1 (none fired)."""
    for _, op in ops:
        if op[0] != "mul":
            return False
        coef = op[1]
        if not bool(torch.as_tensor(coef).eq(1.0).all()):
            return False
    return True


class Speculation:
    """The speculative step of opt in the backward under way
    (running) or done (waiting for step()'s verdict)."""

    def __init__(self, opt):
        eng = opt._eng
        self.opt = opt
        self.groups = groups_now(opt)
        # the step counts and other scalars (keyed by the parameters
        # themselves: the values copied, not the keys)
        self.scalars = {p: {k: copy.deepcopy(v) for k, v in d.items()}
                        for p, d in opt._scalars.items()}
        self.order = opt._order()  # forward order; backward reverses it
        self.stepped = []  # layers, in the order stepped
        self.undone = []  # the swappers whose step is undone
        self.tried = []  # those an undo was started on
        self.running = True
        self.ns = 0  # time spent stepping
        name = f"nvswap.torch speculative step {eng.steps + 1}"
        eng.pswap.step_begin(name, undoable=True)
        try:
            eng.gswap.step_begin(name, undoable=True, ids=_IDS)
        except BaseException:
            eng.pswap.step_end()
            raise
        self.read_ahead()  # the first layer backward completes

    def step(self, layer, items):
        """Step the layer now (its gradients are complete)."""
        opt, eng = self.opt, self.opt._eng
        t0 = time.perf_counter_ns()
        eng.settling = True  # its acquires are no part of the walk
        try:
            opt._step_layer(layer, items, groups=self.groups)
        finally:
            eng.settling = False
            self.ns += time.perf_counter_ns() - t0
        self.stepped.append(layer)
        self.read_ahead()

    def read_ahead(self):
        """Start the reads of the Adam state (and fp32 masters) of the
        next layer backward will complete (the one before the last
        stepped, in forward order): into free optimizer-pool buffers
        only, never waiting (the step that needs them reads what is not
        there, and raises a read's failure)."""
        eng = self.opt._eng
        done = set(self.stepped)
        nxt = next((la for la in reversed(self.order) if la not in done),
                   None)
        if nxt is None:
            return
        ids = [STATE_BASE + (nxt << 20)]
        if eng.masters is not None and nxt in eng.masters.index:
            ids.append(MASTER_BASE + (nxt << 20))
        for i in ids:
            try:
                if not eng.gswap.try_prefetch(i):
                    break  # the pool is full
            except nvswap.Error:
                break  # raised again by the step that needs it

    def holds(self, items, closure):
        """step()'s verdict: the step taken in backward is the step."""
        eng = self.opt._eng
        return (closure is None and not self.running and not self.undone and
                identity_clips(eng.grad_ops) and
                same_groups(self.groups, groups_now(self.opt)) and
                set(items) == set(self.stepped))

    def undo(self):
        """Every layer back as it was before the backward: on disk and
        in memory, the step counts and scalars too. A failure or an
        interrupt raises with what is left to undo kept: the next call
        that needs the parameters or the state (the caller keeps the
        speculation) undoes the rest, and meanwhile the step is open in
        the sets (no checkpoint saves any of it)."""
        opt, eng = self.opt, self.opt._eng
        self.running = False
        t0 = time.perf_counter_ns()
        try:
            for sw in (eng.pswap, eng.gswap):
                if sw in self.undone:
                    continue
                try:
                    sw.step_undo()
                except nvswap.Error as e:
                    # an undo interrupted after the set's part of it:
                    # done (the set has no undoable step open any more)
                    if not (e.errno == errno.EINVAL and sw in self.tried):
                        raise
                finally:
                    self.tried.append(sw)
                self.undone.append(sw)
        finally:
            self.ns += time.perf_counter_ns() - t0
        opt._scalars = self.scalars
        opt._done, opt._failure, opt._open = set(), None, False
        opt._partial = {}
        opt._broken = None


class Speculating:
    """The optimizer's side of speculation (a mixin of
    OffloadedOptimizer): when to, each layer, the verdict, the undo."""

    def _spec_init(self, speculate):
        self.speculate = bool(speculate) and self.defer
        self._spec = None
        self._in_closure = False  # step(closure) runs its closure
        self._bw_count = 0  # backwards since the last step()
        self._bw_per_step = None  # as many as before the last step()
        self._last_clean = False  # the last step() clipped nothing
        # after a guess undone for another reason than a clip (a reader
        # before step(), a layer used again, a failure): the steps to
        # take without guessing, doubling while it recurs
        self._backoff = self._skip = 0
        self._spec_stats = {"speculated_steps": 0, "redone_steps": 0,
                            "redo_ns": 0}

    def _may_speculate(self):
        eng = self._eng
        return (self.speculate and not self._closed and
                GRAPH_TASK is not None and not self._in_closure and
                self._pending is None and not self._began() and
                not (self._failure or self._retry or self._broken or
                     self._loading or self._open) and
                eng.device is None and self._last_clean and
                self._bw_count == self._bw_per_step and
                all(layer in self._keys for layer in self._where) and
                not eng.grad_ops and
                not (eng.backlog or eng.unflushed or eng.retry))

    def backward_begins(self):
        """A backward starts (after a deferred step was finished): a
        guess still waiting was wrong (one more backward than learned)
        and is undone; this one may speculate."""
        if self._spec is not None:
            self._spec_undo()
        self._bw_count += 1
        if self._may_speculate():
            if self._skip:  # backing off: this step is not guessed
                self._skip -= 1
                return
            try:
                # the values at the open must be on disk: the last step's
                # writes behind are waited for (a failure is kept, dirty,
                # and raised by the step that needs it)
                self._eng.collect()
                self._spec = Speculation(self)
            except nvswap.Error:
                self._spec = None  # a value not on disk yet: not now
                return
            self._spec_stats["speculated_steps"] += 1

    def spec_layer(self, layer):
        """The layer's gradients are complete (flushed to its region) in
        a speculating backward: step it now. A failure undoes the
        speculation (the backward goes on, the gradients are kept); an
        interrupt is raised after the undo."""
        spec, eng = self._spec, self._eng
        if spec is None or not spec.running or layer in spec.stepped:
            return
        items = [it for it in self._where.get(layer, ())
                 if it[1] in eng.written.get(layer, ())]
        if not items:
            return
        if eng.backlog or layer in eng.unflushed:
            self._spec_undo()  # a gradient not in its region: no guess
            return
        try:
            spec.step(layer, items)
        except BaseException as e:
            self._spec_undo()
            if not isinstance(e, Exception):
                raise

    def backward_ends(self, abandoned=False):
        """The speculating backward is over: the layers left (with a
        parameter that got no gradient) stepped, then the guess waits
        for step(); a backward that raised undoes it."""
        spec = self._spec
        if spec is None or not spec.running:
            return
        if abandoned:
            self._spec_undo()
            return
        for layer in self._items():
            self.spec_layer(layer)
        if self._spec is not None:
            self._spec.running = False

    def _spec_waiting(self):
        return self._spec is not None and not self._spec.running

    def spec_verdict(self, closure):
        """step(): True when the speculation is the step (kept: the sets'
        old versions given back); else it is undone and step() goes on
        to take the step from the gradients kept."""
        spec = self._spec
        if spec is None:
            return False
        if spec.holds(self._items(), closure):
            self._backoff = 0
            self._spec = None
            self._eng.step_end()
            self._open = False
            self._done, self._partial, self._failure = set(), {}, None
            return True
        self._spec_undo(verdict=True)
        return False

    def _spec_undo(self, verdict=False):
        """Undo the speculation (a failure raises and keeps it, to be
        undone by the next call that needs the parameters or state)."""
        spec = self._spec
        if spec is None:
            return
        spec.undo()
        self._spec = None
        self._spec_stats["redone_steps"] += 1
        self._spec_stats["redo_ns"] += spec.ns
        if not verdict:
            self._backoff = min(2 * self._backoff or 1, 64)
            self._skip = self._backoff

    def _spec_learn(self):
        """step() is called: what the next steps guess from."""
        self._last_clean = identity_clips(self._eng.grad_ops)
        self._bw_per_step, self._bw_count = self._bw_count, 0

