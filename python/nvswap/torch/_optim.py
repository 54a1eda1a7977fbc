# SPDX-License-Identifier: MIT
"""nvswap.torch.Adam / AdamW: torch's own optimizer, one layer at a time,
with its per-parameter state in an nvswap.OptimizerSwapper.

For each layer the step acquires the parameters (ParamSwapper), the
gradient region (GradSwapper) and the state group (OptimizerSwapper), lends
them to a private instance of the torch optimizer as p, p.grad and
state[p], calls its step(), and releases all three (the parameters and
the state written back). The arithmetic is therefore torch's, whatever its
version. A layer's step is _layerstep.py's: its state is registered
before its first step, as torch's first step would make it, and cut in
parts where it is larger than a pool buffer (_parts.py); scalar state
(the step count) stays in memory. This module holds when layers are
stepped (step(), deferred, speculated, in backward) and what waits.
"""
import errno
import time

import torch

import nvswap

from . import _durable, _optstate, _pending, _spec
from . import _layerstep, _parts
from ._common import itemsize
from ._engine import STATE_BASE, error

# state tensors per parameter, for the pool-size check
_STATE_TENSORS = {"Adam": 2, "AdamW": 2}


class OffloadedOptimizer(_spec.Speculating, _layerstep.LayerStep,
                         torch.optim.Optimizer):
    """Base of Adam and AdamW: `impl` is the torch.optim class run."""

    impl = None

    def __init__(self, params, *args, pipeline_read=None,
                 pipeline_write=None, step_in_backward=False, defer=True,
                 speculate=True, **kwargs):
        cls = type(self).__name__
        params = list(params)
        if not params:
            raise ValueError(f"nvswap.torch.{cls}: empty parameter list")
        dummy = torch.zeros(1, requires_grad=True)
        inner = self.impl([dummy], *args, **kwargs)  # checks the values
        super().__init__(params, inner.defaults)
        self._inner = inner
        eng, where = None, {}
        for gi, group in enumerate(self.param_groups):
            for p in group["params"]:
                rec = getattr(p, "_nvswap", None)
                if rec is None:
                    raise ValueError(
                        f"nvswap.torch.{cls}: a parameter of shape "
                        f"{tuple(p.shape)} is not offloaded: call "
                        "nvswap.torch.offload(model) first (or use "
                        f"torch.optim.{self.impl.__name__})")
                if eng is None:
                    eng = rec.engine
                elif rec.engine is not eng:
                    raise ValueError(f"nvswap.torch.{cls}: parameters of "
                                     "two offloaded models")
                where.setdefault(rec.layer, []).append((gi, rec.index, p))
        if eng.closed:
            raise ValueError(f"nvswap.torch.{cls}: the model's offload "
                             "was closed")
        if eng.gswap is None:
            raise ValueError(f"nvswap.torch.{cls}: the model was offloaded "
                             "with inference=True: it has no gradients or "
                             "optimizer pool to step (offload it without "
                             "inference=True to train)")
        if eng.optimizer is not None and not eng.optimizer._closed:
            raise ValueError(f"nvswap.torch.{cls}: the model already has "
                             "an nvswap optimizer")
        if step_in_backward and eng.device is not None:
            raise ValueError(f"nvswap.torch.{cls}: step_in_backward steps "
                             "a layer in CPU memory while backward holds "
                             f"it on {eng.device}: not supported for a "
                             "model offloaded from a device")
        # With fp32 masters (offload(dtype=)) torch steps a stand-in
        # parameter per floating parameter, lent the master and the
        # gradient in fp32; its state is keyed by the stand-in.
        self._proxy = {} if eng.masters is None else {
            p: torch.nn.Parameter(torch.empty(0))
            for layer, items in where.items() for _, _, p in items
            if p.is_floating_point()}
        self._keys = {}  # layer -> [(param index, key)] of state tensors
        self._parts = {}  # layer -> its state's parts, if more than one
        self._check_fit(eng, where, kwargs.get("amsgrad", False))
        # A layer's step holds its state group, its gradient region (not
        # with step_in_backward) and its fp32 masters at once.
        need = 1 + (not step_in_backward) + (eng.masters is not None)
        have = eng.gswap.stats()["buffer_count"]
        if have < need:
            raise ValueError(
                f"nvswap.torch.{cls}: a step holds a layer's Adam state"
                f"{'' if step_in_backward else ', gradient region'}"
                f"{' and fp32 masters' if eng.masters is not None else ''}"
                f" at once: {need} optimizer pool buffers, the pool has "
                f"{have} (raise offload_optimizer.buffer_count, "
                "optimizer_buffer_count=)")
        # A deferred step (the default; not with step_in_backward) is
        # applied layer by layer as the next forward reaches each layer
        # (_pending.py): its state writes go behind unless the config
        # says otherwise.
        self.defer = bool(defer) and not step_in_backward
        opt = eng.gswap_options
        if pipeline_read is None:
            pipeline_read = bool(opt["pipeline_read"])
        if pipeline_write is None:
            pipeline_write = (self.defer if opt["pipeline_write"] is None
                              else bool(opt["pipeline_write"]))
        self._swap = nvswap.OptimizerSwapper(
            eng.gswap, pipeline_read, pipeline_write, id_base=STATE_BASE)
        self._eng, self._where = eng, where
        self._key_order = {}  # param -> its state keys in torch's order
        self._scalars = {}  # param -> {key: value} kept in memory
        self._lending = None  # the layer step's Lent (_pieces.py)
        # The step in progress (all or nothing, see step()): the layers it
        # stepped, the failure that stopped it, whether the write-backs
        # of a step that raised are to be retried
        self._done = set()
        self._partial = {}  # layer -> (its parts stepped, step counts before)
        self._failure = None
        self._retry = False
        self._open = False  # the sets' step is open (Swapper.step_begin)
        # a sentence when the step cannot be finished (torch's arithmetic
        # raised inside a layer; a step_in_backward backward failed after
        # stepping layers), else None
        self._broken = None
        self._loading = False  # a load_state_dict() failed while writing
        self._pending = None  # a deferred step not applied in full yet
        self._closed = False
        self.step_in_backward = bool(step_in_backward)
        self._unconsumed = False  # a backward stepped; step() not yet
        # a step taken in backward on the guess that step() will not
        # clip, kept or redone exactly (_spec.py); with defer only
        self._spec_init(speculate)
        eng.optimizer = self
        if eng.resume_record is not None:
            # Resumed: the saved state is this optimizer's (once; a
            # refused one leaves it for the next).
            try:
                _durable.restore_optimizer(self, eng.resume_record)
            except BaseException:
                self._close()
                eng.optimizer = None
                raise
            eng.resume_record = None

    def _state_dtype(self, p):
        """Adam's state of p: fp32 beside an fp32 master, else p's."""
        return torch.float32 if p in self._proxy else p.dtype

    def _check_fit(self, eng, where, amsgrad):
        """Every layer's state fits the optimizer pool's buffers, in parts
        where it is larger than one (_parts.check raises EFBIG)."""
        n = _STATE_TENSORS.get(type(self).__name__, 2) + bool(amsgrad)
        bs = eng.gswap.stats()["buffer_size"]
        for layer, items in where.items():
            if layer in self._keys:  # registered (resumed): as laid out
                _parts.check_saved(self, layer, bs)
                continue
            _parts.check(self, eng, layer, [
                (i, k, p.numel(), itemsize(self._state_dtype(p)))
                for _, i, p in sorted(items, key=lambda it: it[1])
                for k in range(n)], bs)

    # ------------------------------------------------------------- step
    def _order(self):
        eng, seen, out = self._eng, set(), []
        for layer in list(eng.walk or ()) + list(range(len(eng.layers))):
            if layer not in seen and layer in self._where:
                seen.add(layer)
                out.append(layer)
        return out

    @torch.no_grad()
    def step(self, closure=None):
        """One optimizer step over every layer with a gradient.

        Speculative (the default when the last step clipped nothing and
        this backward is the last of its step; docs/optimizer.md): the
        layers were stepped in backward, and step() keeps that step when
        no clip since changed a gradient and the hyper-parameters are
        the same; otherwise it is undone, bit for bit, and the step is
        deferred. Deferred: the step takes its gradients, clips and
        hyper-parameters (lr from a scheduler, betas, weight decay) now,
        and returns; each layer is updated when the next forward reaches
        it (its state and gradient read ahead meanwhile; a layer held
        now, inside gathered() or a forward, at once), the rest at the
        end of that forward, and anything that reads parameters or
        optimizer state (gathered() its layers; state dicts,
        checkpoint(), save_pretrained(), restore(), nvt.wait(), a
        backward, clipping, the next step() the whole step) finishes it
        first. A layer's update that fails (an I/O error, a full disk)
        raises from what needed it; the next such call retries it, so
        each layer is stepped once (step() then takes its own step
        after, as torch steps again with the gradients it has).
        defer=False: every layer now.

        All or nothing (defer=False): a failure raises with the layers
        stepped so far kept in memory (a write-back that failed leaves
        its data resident; nothing is lost), and calling step() again
        writes those back and finishes the step, each layer stepped
        once (without running the closure: its backward began the
        step).
        Until the step is whole, checkpoint() refuses, close() and a
        kill leave a persistent set at its last checkpoint. torch's own
        step raising inside a layer leaves a step that cannot be
        finished (the layer part old, part new): refused likewise,
        step() too, never committed. A gradient write-behind that failed
        is raised first, before anything changes.
        With nvt.progress(model), a line after each."""
        loss = self._step(closure)
        if self._eng.progress is not None:
            self._eng.progress.tick("step")
        return loss

    def _step(self, closure):
        loss = None
        self._live()
        # a backward that raised: finish it (step() never runs inside one)
        self._eng.stale_backward(sure=True)
        self._spec_learn()
        if self.spec_verdict(closure):  # taken in backward, and it holds
            self._eng.steps += 1
            return None
        if self._broken or self._loading:
            self.settled("step()")
        if self._pending is not None:
            self._finish()  # the last step first (a failure raises)
        if closure is not None and not self._began():
            # (a retry finishes the step the closure's backward began;
            # its backward is never speculated: this step() decides)
            self._in_closure = True
            try:
                with torch.enable_grad():
                    loss = closure()
            finally:
                self._in_closure = False
        eng = self._eng
        try:
            if self._retry:  # what the failed step wrote, written again
                eng.write_back(retry=True)
                self._retry = False
            if self.step_in_backward:
                # The layers were stepped in backward: wait for their
                # write-back (a failure raises here) and allow the next
                # backward.
                eng.pswap.wait_all()
                eng.gswap.wait_all()
                self._unconsumed = False
            elif self.defer and not self._began():
                self._defer()
                eng.steps += 1
                return loss
            else:
                self._step_all()
        except BaseException as e:
            self._failed(e)
            raise
        self._close_step()
        self._done, self._partial, self._failure = set(), {}, None
        eng.steps += 1
        return loss

    def _open_step(self):
        if not self._open:
            self._eng.step_begin(
                f"nvswap.torch optimizer step {self._eng.steps + 1}")
            self._open = True

    def _close_step(self):
        if self._open:
            self._eng.step_end()
            self._open = False

    def _writes_done(self):
        """Before a step: the gradient write-behind collected, and a
        parameter write-back that failed after the last step written
        again (raises, before anything changes, while a failure
        lasts)."""
        eng = self._eng
        eng.drain()
        try:
            eng.pswap.wait_all()
        except nvswap.Error:
            # its data is still resident: write it again now
            eng.write_back(retry=True)

    def _items(self):
        """{layer: [(group, index, param)] with a gradient}, in step
        order (the forward's)."""
        eng, out = self._eng, {}
        for layer in self._order():
            got = eng.written.get(layer, ())
            items = [it for it in self._where[layer] if it[1] in got]
            if items:
                out[layer] = items
        return out

    def _step_all(self):
        self._writes_done()
        for layer, items in self._items().items():
            if layer not in self._done:
                self._step_layer(layer, items)

    def _defer(self):
        """step(), deferred: what the step needs is taken now; the layers
        are stepped by pend() as they are needed."""
        self._writes_done()
        items = self._items()
        if not items:
            return
        self._pending = _pending.Pending(self, items)
        self._open_step()
        # layers held now (step() inside gathered() or a forward): their
        # holder reads or writes them next, after the update
        for layer in items:
            if self._eng.refs[layer]:
                self.pend(layer)
        if self._pending is not None:
            self._pending.read_ahead(None)

    def pend(self, layer):
        """The deferred step's update of layer, if it has one left: before
        anything reads the layer (Engine.acquire). A failure raises (the
        next call retries), an nvswap.Error naming the step and the
        layer; the last layer ends the step. Engine.settling says an
        update runs (its acquires do not pend, nor count in the walk)."""
        pend, eng = self._pending, self._eng
        spec = self._spec
        if spec is not None and not eng.settling and \
                (not spec.running or layer in spec.stepped):
            # read before step(), or by the backward after its step (a
            # layer used again: reentrant checkpointing): not taken
            self._spec_undo()
        if pend is None or eng.settling or layer in self._done or \
                layer not in pend.items:
            return
        if self._broken or self._loading:
            self.settled(f"reading layer {layer}")
        eng.settling = True
        t0 = time.perf_counter_ns()
        try:
            if self._retry:
                eng.write_back(retry=True)
                self._retry = False
            with pend.context():
                self._step_layer(layer, pend.items[layer], pend.ops,
                                 pend.groups)
            # the next layer's reads go on while the forward computes
            pend.read_ahead(layer)
        except BaseException as e:
            self._retry = True
            self._failure = f"{type(e).__name__}: {e}"
            if isinstance(e, nvswap.Error):
                raise self._stopped(pend, layer, e) from e
            raise
        finally:
            eng.settling = False
            eng.pending_ns += time.perf_counter_ns() - t0
            if layer in self._done:  # its arithmetic ran
                pend.stepped(layer)
            self._complete()

    def _stopped(self, pend, layer, e):
        """e, raised by the deferred step's update of layer, with the
        step and the layer named first, and what comes next."""
        cause = e.strerror or str(e)
        if cause.startswith("nvswap.torch: "):
            cause = cause[len("nvswap.torch: "):]
        if layer in self._done:
            then = ("the layer is updated; what failed to be written is "
                    "written again by the next call that waits for the "
                    "writes (nvt.wait(), checkpoint(), step())")
        else:
            then = ("the next call that needs the step retries it, each "
                    "layer once")
        return error(e.errno, f"nvswap.torch: optimizer step {pend.number} "
                     f"(deferred) stopped at layer {layer}: {cause}; {then}")

    def _complete(self):
        """A deferred step whose every layer is stepped is whole (a
        write-back that failed is written again by the next step() or
        checkpoint); not one that cannot be finished."""
        pend = self._pending
        if pend is None or self._broken or \
                not all(la in self._done for la in pend.items):
            return
        self._pending = None
        self._close_step()
        self._done, self._partial, self._failure = set(), {}, None

    def _finish(self):
        """Every layer the deferred step has left, now (in step order)."""
        pend = self._pending
        if pend is None or self._eng.settling:
            return
        for layer in list(pend.items):
            self.pend(layer)  # the last one ends the step (_complete)

    def _failed(self, e):
        """A step raised e: its layers stepped stay stepped (the retry
        writes them back first); one that stepped none is no step."""
        self._retry = True
        self._failure = f"{type(e).__name__}: {e}"
        if not self._began() and not self._broken:
            self._close_step()
            self._failure = None

    def settled(self, what):
        """Before what reads, saves or undoes parameters or optimizer
        state: no step in part. A deferred step is finished (its failure
        raises, naming the step and the layer; the next call retries);
        a step half done (some layers stepped, others not: a step() that
        raised with defer=False, one that cannot be finished, a
        load_state_dict() that failed while writing) raises
        nvswap.Error(EBUSY) for what."""
        if self._closed:
            return
        if self._spec is not None:
            if self._spec.running:
                return  # the speculating backward's own gradients
            self._spec_undo()  # before step(): the step is not taken
        if self._pending is not None and not (self._broken or
                                              self._loading):
            self._finish()  # a deferred step: finished, or its failure
            return
        if not (self._began() or self._broken or self._loading):
            return
        if self.step_in_backward and not (self._open or self._broken or
                                          self._loading):
            return  # a backward stepped every layer: whole, step() waits
        why = f" (it stopped on {self._failure})" if self._failure else ""
        if self._loading:
            raise error(errno.EBUSY,
                        f"nvswap.torch: {what} after a load_state_dict() "
                        f"that failed while writing{why}: the optimizer "
                        "holds part of the state loaded; call "
                        "load_state_dict() again")
        eng = self._eng
        done = self._began()
        if self._broken:
            how = (f"it cannot be finished: {self._broken}; the sets keep "
                   "their last checkpoint: exit this process and offload "
                   "again with persist='resume' (a scratch offload's "
                   "training state is lost)")
        elif self.step_in_backward and not self._failure:
            how = "call step() after backward, as step_in_backward wants"
        else:
            how = ("call step() again to finish it (it writes back what "
                   "was stepped and steps the rest, each layer once)")
        left = "" if self.step_in_backward else ", {} not".format(
            [layer for layer in self._order()
             if layer not in self._done and eng.written.get(layer)])
        raise error(errno.EBUSY,
                    f"nvswap.torch: {what} while an optimizer step is half "
                    f"done: layers {done} are stepped{left}{why}; {how}")

    def _backward_step(self, layer, grads):
        """step_in_backward: the layer's gradients are complete (its
        parameters are still in memory): step it now."""
        items = [it for it in self._where.get(layer, ()) if it[1] in grads]
        if items and not self._closed:
            try:
                self._step_layer(layer, items, grads=grads)
            except BaseException as e:
                if self._done and not self._broken:
                    self._broken = (
                        f"the backward that stepped layers "
                        f"{sorted(self._done)} raised {type(e).__name__} "
                        f"({e}) before the others were stepped, and "
                        "their gradients are gone")
                self._failed(e)
                raise

    def zero_grad(self, set_to_none=True):
        """Every gradient reads as zero again: no I/O (nothing at all with
        step_in_backward, where gradients are never kept)."""
        self._live()
        if self._pending is None or self._broken or self._loading:
            self.settled("zero_grad()")
        self._eng.zero_grads()  # a deferred step keeps what it needs

    # ------------------------------------------------------------ state
    def _index(self):
        index, i = {}, 0
        for group in self.param_groups:
            for p in group["params"]:
                index.setdefault(p, i)
                i += 1
        return index

    def state_dict(self):
        """torch's layout ({'state': {index: {...}}, 'param_groups'}) with
        the state tensors read back from NVMe (copies; nothing is written,
        so a full disk does not stop it); for a model with fp32 masters
        (offload(dtype=)) also 'master': {index: fp32 master weight}."""
        self._live()
        self.settled("state_dict()")
        return _optstate.state_dict(self)

    def load_state_dict(self, state_dict):
        """Hyper-parameters into the groups, state tensors written to
        NVMe (cast to the parameter's dtype, as torch does; fp32 beside
        fp32 masters, which a 'master' entry replaces). Entries are
        matched to parameters through the saved groups' 'params', as
        torch does. Every entry is checked and converted before anything
        is written: a refused state dict (ValueError naming the key,
        the parameter and the rule) changes nothing."""
        self._live()
        if not self._loading:  # else: the retry of a failed load
            self.settled("load_state_dict()")
        _optstate.load_state_dict(self, state_dict)

    def _began(self):
        """The layers the step in progress changed, sorted: stepped, or
        some parts of them (_parts.py); empty when none."""
        return sorted(set(self._done) | set(self._partial))

    def _live(self):
        if self._closed:
            raise ValueError(f"nvswap.torch.{type(self).__name__}: closed "
                             "(the model was restored)")

    def _close(self):
        if not self._closed:
            self._closed = True
            self._swap.close()


class Adam(OffloadedOptimizer):
    """torch.optim.Adam with its state on NVMe: same arguments, same
    result bit for bit; plus pipeline_read / pipeline_write (default: the
    config's offload_optimizer values), defer (False: the step taken in
    step()), speculate (False: never stepped in backward on a guess) and
    step_in_backward (each layer stepped during backward once its
    gradients are complete: no gradient I/O; call step() after every
    backward). docs/optimizer.md says when each layer is updated."""

    impl = torch.optim.Adam


class AdamW(OffloadedOptimizer):
    """torch.optim.AdamW with its state on NVMe (see Adam)."""

    impl = torch.optim.AdamW
