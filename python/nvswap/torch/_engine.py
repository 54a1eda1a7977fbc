# SPDX-License-Identifier: MIT
"""The offload engine behind nvswap.torch.offload(): one per model.

It owns the model's layers (a module's own parameters, packed into one
nvswap.ParamSwapper layer per pool buffer), their acquire and release
(and the staging copies of a model on a device), state reads and stats.
The forward and saved-tensor hooks are in _passes.py, the gradient
write-behind into a nvswap.GradSwapper in _grads.py (mixins of Engine).
Prefetch order, write-behind and buffer reuse are the C library's: the
engine only says which layer is needed when, and hands the traced walk
to ParamSwapper.set_walk().
"""
import errno
import os
import time
import weakref
from collections import OrderedDict

import torch

import nvswap

from . import _infer, _rows
from ._common import (ALIGN, GRAD_BASE, MAX_TENSORS, STATE_BASE, error,
                      nbytes, packed, read_packed, storage_ptr)
from ._grads import Grads
from ._mixed import Masters, cast
from ._passes import Passes
from ._wfile import Hold

__all__ = ["ALIGN", "GRAD_BASE", "MAX_TENSORS", "STATE_BASE", "Engine",
           "ParamDict", "check_layer_fits", "engine_of", "error"]

# The processes serving one model in place share the disk (hold_dirs);
# False: each at the whole queue depth (bench/serve_procs.py compares).
SHARE_DISK = True


class Rec:
    """What an offloaded parameter carries as p._nvswap."""

    __slots__ = ("engine", "layer", "index", "name", "placeholder")

    def __init__(self, engine, layer, index, name, placeholder):
        self.engine, self.layer, self.index = engine, layer, index
        self.name, self.placeholder = name, placeholder


def _placeholder(p, device=None, dtype=None):
    """What an offloaded parameter holds between uses: its shape, dtype and
    device, one element of memory (NaN for floating types, so that a use
    outside any forward shows), and in-place writes refused."""
    dtype = dtype or p.dtype
    fill = float("nan") if dtype.is_floating_point else 0
    return torch.full((), fill, dtype=dtype, device=device).expand(p.shape)


class ParamDict(OrderedDict):
    """Module._parameters of an offloaded module. A parameter read by
    attribute inside a forward (a parent using a child's weight, as
    MultiheadAttention does with out_proj) is acquired on the spot and held
    until the running module's forward ends; one read in backward outside
    any forward (a checkpointed function's recomputation) is held until
    its layer's gradients are complete."""

    def __getitem__(self, key):
        p = dict.__getitem__(self, key)
        rec = getattr(p, "_nvswap", None)
        if rec is not None:
            eng = rec.engine
            if eng.frames:
                eng.need(rec.layer)
            elif eng.in_backward():
                # Read outside any module's forward during backward: a
                # checkpointed function recomputing with the module's
                # own weight. Held like a layer a saved tensor needs.
                eng.hold_for_backward(rec.layer)
        return p


class Engine(Passes, Grads):
    def __init__(self, pswap, params, gswap, opts, device=None, dtype=None):
        # device: where the model computes (a CUDA device), or None: the
        # parameters are the pool's pinned buffers themselves. With a
        # device, the pool buffers stage them: a layer acquired for
        # forward or backward is copied to the device (asynchronously, on
        # the current stream) and the parameters point there; the
        # optimizer steps on the pool buffers in CPU memory.
        self.device = device
        self.staged = {}  # layer -> (pool tensors, copy done event)
        self.pswap = pswap  # nvswap.Swapper for the parameters
        self.params = params  # nvswap.ParamSwapper
        # nvswap.Swapper for gradients + optimizer state; None for an
        # inference model (offload(inference=True), _infer.py)
        self.gswap = gswap
        self.grads = (nvswap.GradSwapper(gswap, id_base=GRAD_BASE)
                      if gswap is not None else None)
        # dtype: the compute dtype of floating parameters (bf16) with fp32
        # masters in the optimizer set (_mixed.py), or None; an inference
        # model is cast without masters
        self.dtype = dtype
        self.masters = (Masters(gswap) if dtype is not None and
                        gswap is not None else None)
        self.opts = opts
        self.gswap_options = opts.get(
            "optimizer", {"pipeline_read": False, "pipeline_write": None})
        self.layers = []  # layer -> [param]
        self.layer_bytes = []  # layer -> its bytes in a pool buffer
        self.forwards = 0  # top-level forwards run (not recomputations)
        self.progress = None  # _progress._Progress: nvt.progress(model)
        self.last_forward_read = 0  # parameter bytes the last one read
        self.fwd_read0 = 0
        self.lookahead = None  # the ParamSwapper's read-ahead (offload())
        self.names = []  # layer -> [qualified name]
        self.grad_off = []  # layer -> [byte offset in the gradient region]
        self.refs = []  # layer -> acquire count
        self.dirty = set()  # acquired layers some acquire changed
        self.mod_layers = {}  # module -> layers its _parameters need
        # inference on the CPU (_infer.bind): layers acquired for good,
        # and module -> the layers its forward still acquires
        self.bound = set()
        # streamed layers kept for good in the pool buffer they were read
        # into (_depth.Tuner's choice; in bound too)
        self.kept_streamed = []
        self.tuner = None  # _depth.Tuner of an inference model, or None
        self.in_cpu = None  # memory=: the layers kept resident (_infer)
        self.max_in_cpu = 0  # offload()'s: what C keeps when in_cpu is None
        # layers streamed from the weights file in place (_load.py), the
        # directories of their files, and a shared flock on each
        # (_wfile.Hold: nvswap's save_pretrained() keeps out)
        self.in_place = set()
        self.place_dirs = {}  # layer -> {directory}
        # the thread reading them into the page cache (_warm.warm_cache)
        self.warming = None
        # save_on_nvme's store the saved activations go to (offload(
        # activations=)); closed with the engine when offload() made it
        self.act, self.act_owned = None, False
        self.holds = {}  # directory -> _wfile.Hold
        self.unmoved = set()  # layers read in place not seen moved yet
        self.holds_checked = None  # self.steps at drop_holds' last look
        # served from a persistent training set: nothing may be written,
        # and the layers kept resident are copies (_infer._copy_layer)
        self.read_only = False
        self.copy_in_cpu, self.copied = set(), set()
        # inference on the CPU: layer -> the _rows.Table of an embedding
        # read by rows (not in the ParamSwapper); by_rows: the qualified
        # names of the weights offload() chose for that
        self.rows, self.by_rows, self.row_handle = {}, set(), None
        self.backend, self.page_cache = None, False  # offload()'s
        self.fwd_layers = self.mod_layers
        self.live = {}  # storage pointer -> parameter, while acquired
        # forward stack: [module, [layers held], saved-tensor hooks it set]
        self.frames = []
        self.trace, self.walk = [], None  # this forward's acquires; the walk
        self.fwd_trace, self.bw_trace = [], []  # the last step's acquires
        self.recomputing = False  # a checkpoint recomputes in backward
        self.bw_recomputed = False  # this backward recomputed
        self.recomputes = 0  # recomputation passes
        self.recompute_open = False  # one is running (until _unpack)
        self.recompute_acquires = 0  # layers they acquired
        self.unpacking = 0  # inside a checkpoint's unpack
        self.bw_active = False
        self.bw_held = {}  # layer -> param indexes still owed a gradient
        self.bw_kept = set()  # recomputed, left resident, not yet held
        self.bw_cap = max(1, pswap.stats()["buffer_count"] - 1)
        self.bw_got = {}  # layer -> param indexes that got one
        self.written = {}  # layer -> param indexes with a gradient since zero
        self.backlog = []  # (layer, index, gradient) not written yet
        self.stash = {}  # step_in_backward: layer -> {index: gradient}
        self.bw_stepped = False  # this backward stepped layers
        self.unflushed = set()  # layers whose flush failed
        self.retry = False  # a gradient write-behind failed
        # clipping (_clip.py): norm kinds (norm_type, kernel) taken in
        # backward, learned from clip calls; {(layer, i): {kind: norm}}
        # of complete gradients; {layer: {i}} accumulated gradients whose
        # norms are taken at the flush; deferred clips [(keys, op)]
        self.norm_kinds, self.norms, self.norm_stale = set(), {}, {}
        self.grad_ops = []
        self.handles = []  # torch hook handles
        self.keep = []  # AccumulateGrad nodes (torch < 2.1)
        self.exposed_ns = 0  # time spent in acquire calls (Python side)
        self.steps = 0
        # a deferred step's layer update is running (set by the
        # optimizer's pend(), the one flag for it: its acquires neither
        # start another update nor count in the walk); the time spent in
        # such updates
        self.settling = False
        self.pending_ns = 0
        self.closed = False
        self.optimizer = None
        self.grad_hook = None  # offload(grad_hook=): fn(name, grad)
        self.persistent = False  # the pools are persistent swap sets
        self.ckpt_seq = 0  # nvswap.torch checkpoints made (or resumed)
        self.resume_record = None  # what a resumed optimizer takes
        self.resumed = None  # {tag, steps, generations} when resumed

    # ---------------------------------------------------------- layers
    def add_layer(self, items, data=None, sources=None):
        """items: [(name, param)] whose data is materialized; or data:
        what the layer is registered from instead (add_layer_from);
        sources: each tensor's (file, offset) in a file added to the
        parameter pool, the layer streamed from there in place."""
        layer = len(self.layers)
        if data is None:
            data = [p.data if p.data.is_contiguous() else
                    p.data.contiguous() for _, p in items]
            if self.device is not None:
                data = [d.to("cpu") for d in data]
        if self.masters is not None:
            self.masters.add(layer, [n for n, _ in items], data)
        if self.dtype is not None:
            data = [cast(d, self.dtype) for d in data]
        if len(items) == 1 and items[0][0] in self.by_rows:
            if self.read_only:  # served from a checkpoint: its table
                data = self.read_out(layer, data, [items[0][0]])
            if self.row_handle is None:
                self.row_handle = _rows.handle(self.backend)
            self.rows[layer] = _rows.Table(
                self.row_handle, self.pswap.dirs[0], items[0][0], data[0],
                direct=not self.page_cache)
        elif sources is not None:
            self.params.add_layer(layer, data, in_cpu=False, sources=sources)
            self.in_place.add(layer)
        else:
            self.params.add_layer(layer, data, in_cpu=self.in_cpu is None
                                  or layer in self.in_cpu)
        dtypes = [d.dtype for d in data]
        offs, off = packed([nbytes(d) for d in data])
        del data
        self.layer_bytes.append(max(off, ALIGN))
        if self.grads is not None:
            self._add_grad_group(layer, items, max(off, ALIGN))
        self.layers.append([p for _, p in items])
        self.names.append([n for n, _ in items])
        self.grad_off.append(offs)
        self.refs.append(0)
        for i, (name, p) in enumerate(items):
            ph = _placeholder(p, self.device, dtypes[i])
            p._nvswap = Rec(self, layer, i, name, ph)
            p.data = ph
        return layer

    def read_out(self, layer, like, names=None):
        """The saved tensors of layer (the shapes and dtypes of like's),
        read from the parameter set into memory of their own without a
        pool buffer (Swapper.read: any size)."""
        gid = layer << 20  # the ParamSwapper's id of the layer's group
        try:
            return read_packed(self.pswap, gid,
                               [(t.dtype, t.shape) for t in like])
        except nvswap.Error as e:
            raise self._layer_error(layer, e, names) from e

    def _add_grad_group(self, layer, items, size):
        """The layer's gradient region in the optimizer pool; one larger
        than a buffer is refused naming the keyword that sizes it (the
        C library's sentence names only an internal tensor id)."""
        have = self.gswap.stats()["buffer_size"]
        if size > have:
            raise error(errno.EFBIG,
                        f"nvswap.torch.offload: layer {layer} (parameters "
                        f"{items[0][0]}...) has a gradient region of {size}"
                        f" bytes, larger than an optimizer pool buffer "
                        f"({have} bytes): raise optimizer_buffer_size= "
                        "(offload_optimizer.buffer_size) to at least "
                        f"{size}, or leave it unset")
        self.grads.add_group(layer, size)

    def add_layer_from(self, items, sources=None):
        """items: [(name, param)] of which only the shapes and dtypes
        count (the parameters may be on the meta device, they are not
        read): the layer is registered as typed zeros, without I/O (a
        resumed persistent set adopts its saved contents instead). Fill
        it by acquire(layer, host=True), writing the parameters' pool
        tensors (p.data), and release(layer, True). With sources (see
        add_layer) it reads from files in place instead: nothing to
        fill."""
        return self.add_layer(items, [
            torch.empty(p.shape, dtype=p.dtype, device="meta")
            for _, p in items], sources)

    def refresh_masters(self, layer, given=None):
        """The fp32 masters of an acquired layer from given ({index:
        tensor}, any dtype, in full precision) or, for the rest, from the
        layer itself (widened): after a write into the layer outside the
        optimizer, which would otherwise round the old masters back over
        it at the next step."""
        if self.masters is None or layer not in self.masters.index:
            return
        ps, given = self.layers[layer], given or {}
        self.masters.update(layer, lambda i: ps[i].data
                            if given.get(i) is None else given[i])

    def _set_live(self, layer, tensors):
        for p, t in zip(self.layers[layer], tensors):
            p.data = t
            self.live[storage_ptr(t)] = p

    def acquire(self, layer, host=False):
        """host: the caller (the optimizer, a state dict) wants the pool
        buffers themselves even when the model computes on a device."""
        opt = self.optimizer
        if opt is not None and (opt._pending is not None or
                                opt._spec is not None) and \
                not self.settling:
            opt.pend(layer)  # a deferred step's update comes first
        stage = self.device is not None and not host
        if self.refs[layer] == 0 and layer in self.rows:
            # an embedding read by rows, used whole (a state dict, or a
            # module reading it in its forward): a copy of its own
            self._set_live(layer, [self.rows[layer].read_all()])
        elif self.refs[layer] == 0 and layer not in self.bound:
            t0 = time.perf_counter_ns()
            try:
                tensors = self.params.acquire_layer(layer)
            except nvswap.Error as e:
                raise self._layer_error(layer, e) from e
            t1 = time.perf_counter_ns()
            self.exposed_ns += t1 - t0
            if self.tuner is not None and self.frames and \
                    not self.recomputing:
                self.tuner.acquired(layer, t0, t1)
            if stage:
                tensors = self._to_device(layer, tensors)
            self._set_live(layer, tensors)
            # the walk: the C acquires of forward, and of backward (not
            # a deferred step's, which comes just before the layer's own)
            if self.settling:
                pass
            elif self.recomputing:
                self.recompute_acquires += 1
                self.bw_trace.append(layer)
            elif self.frames:
                self.trace.append(layer)
            elif self.bw_active:
                self.bw_trace.append(layer)
        elif stage != (layer in self.staged):
            raise error(errno.EBUSY,
                        f"nvswap.torch: layer {layer} is held in "
                        f"{'CPU' if stage else 'device'} memory by another "
                        "use (an optimizer step inside a forward or "
                        "backward of a model on a device?)")
        self.refs[layer] += 1

    def hold_dirs(self, layer, paths):
        """layer is read in place from paths: their directories held
        (a shared flock each, _wfile.Hold) while any layer still reads
        from them (drop_holds, at each forward of a training model); a
        served model's first one's holders share the disk
        (Swapper.share_disk: the queue depth split among them)."""
        dirs = {os.path.dirname(os.path.realpath(p)) for p in paths}
        self.place_dirs[layer] = dirs
        self.unmoved.add(layer)
        me = weakref.ref(self)  # the registry must not keep us alive
        for d in sorted(dirs):
            if d not in self.holds:
                h = Hold(d, lambda d=d: me()._reading(d) if me() else [])
                self.holds[d] = h
                weakref.finalize(self, h.close)  # collected unclosed
                if h.fd >= 0 and len(self.holds) == 1 and SHARE_DISK \
                        and self.gswap is None:
                    # the processes serving from it share the disk: each
                    # its share of the queue depth, counted by the flocks
                    # (a training model moves its layers at its first
                    # step: its launcher's ranks split the depth)
                    self.pswap.share_disk(d)

    def drop_holds(self):
        """The holds on directories no layer reads from any more (a
        training model's layers moved into the swap file by its steps)
        released: another process may save there again. Looked at once
        per optimizer step, over the layers not seen moved yet (a frozen
        layer never moves: it is asked about once a step)."""
        if self.holds_checked == self.steps:
            return
        self.holds_checked = self.steps
        read = {d for i in self._unmoved_now() for d in self.place_dirs[i]}
        for d in [d for d in self.holds if d not in read]:
            self.holds.pop(d).close()

    def _unmoved_now(self):
        """The layers read in place that a step has not moved into the
        swap file yet (nvs_tensor_info.backed), asked again."""
        if self.closed:
            return set()
        self.unmoved = {i for i in self.unmoved
                        if self.pswap.info(i << 20)["backed"]}
        return self.unmoved

    def _reading(self, directory):
        """The layers still read from files in directory, named."""
        out = []
        for layer in sorted(self._unmoved_now()):
            if directory in self.place_dirs[layer]:
                out.append(self.describe(layer))
        return out

    def _layer_error(self, layer, e, names=None, what=None):
        """e, from the C library (which names an internal tensor id and
        the file), with the layer and its parameters named first; what:
        the layer's tensors read (its parameters when None)."""
        names = names or self.names[layer]
        which = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        of = f"the {what} of " if what else ""
        return error(e.errno, f"nvswap.torch: reading {of}layer {layer} "
                     f"({which}): {e.strerror}")

    def _to_device(self, layer, pool):
        """Copies of a layer's pool buffers on the device, made on the
        current stream; the pool buffers stay acquired until the copies
        are done (release() waits for them)."""
        out = [torch.empty(t.shape, dtype=t.dtype, device=self.device)
               for t in pool]
        for d, t in zip(out, pool):
            d.copy_(t, non_blocking=True)
        done = None
        if self.device.type == "cuda":
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
        self.staged[layer] = (pool, done)
        return out

    def _from_device(self, layer, dirty):
        """Before the pool buffers go back: the copies made from them are
        finished, and a layer changed on the device is copied back."""
        pool, done = self.staged.pop(layer)
        if dirty:
            for p, t in zip(self.layers[layer], pool):
                t.copy_(p.data)  # synchronous: the buffer is written now
        elif done is not None:
            done.synchronize()

    def refuse_writes(self, what):
        """EROFS for what would change a model served read-only."""
        if self.read_only:
            raise error(errno.EROFS, f"nvswap.torch: {what} on a model "
                        "served from a persistent training set "
                        "(inference=True): it is served read-only, the set "
                        "stays as training left it (restore() the model, "
                        "or offload it again to train)")

    def release(self, layer, dirty=False, evict=True):
        """End one acquire; the layer is written back (dirty) when any of
        its acquires changed it, whichever releases last. evict=False
        leaves a last release's buffer resident (the next acquire, a
        step of the layer in backward, reads nothing)."""
        if dirty:
            self.dirty.add(layer)
        self.refs[layer] -= 1
        if self.refs[layer] == 0 and layer in self.bound:
            # an inference model's layer kept in CPU memory: read-only,
            # acquired for good (_infer.bind)
            self.dirty.discard(layer)
        elif self.refs[layer] == 0 and layer in self.rows:
            p = self.layers[layer][0]
            self.live.pop(storage_ptr(p.data), None)
            data, p.data = p.data, p._nvswap.placeholder
            if layer in self.dirty:
                self.dirty.discard(layer)
                self.rows[layer].write_all(data)
        elif self.refs[layer] == 0:
            dirty = layer in self.dirty
            self.dirty.discard(layer)
            if layer in self.staged:
                self._from_device(layer, dirty)
            for p in self.layers[layer]:
                self.live.pop(storage_ptr(p.data), None)
                p.data = p._nvswap.placeholder
            self.params.release_layer(layer, dirty)
            # Give the buffer back now (a changed layer's write-back
            # starts): the C read-ahead fills free buffers only, and a pool
            # full of released layers would leave every acquire a
            # synchronous read. A failed write submit keeps the layer
            # resident and dirty, and its next eviction or wait() raises
            # (raising here would make a retried step() step it twice).
            try:
                if evict:
                    self.params.evict_layer(layer)
            except nvswap.Error:
                pass
            if self.tuner is not None:
                self.tuner.released(layer)

    def write_back(self, retry=False):
        """Write back every changed parameter layer nothing holds and wait
        for all of the model's I/O; raises the first failure. retry: the
        failures already reported are written again first (a failed
        write-back leaves its tensor resident and dirty: nothing is lost
        until the disk has room again)."""
        pools = [sw for sw in (self.pswap, self.gswap) if sw is not None]
        if retry:
            for sw in pools:
                try:  # the failures being retried now: reported before
                    sw.wait_all()
                except nvswap.Error:
                    pass
        for layer, refs in enumerate(self.refs):
            if not refs and layer not in self.bound and \
                    layer not in self.rows:
                self.params.evict_layer(layer)
        if retry and self.gswap is not None:
            self.evict_dirty(self.gswap)
        for sw in pools:
            sw.wait_all()

    @staticmethod
    def evict_dirty(sw):
        """Start the write of every dirty tensor of sw nothing holds."""
        for i in sw.ids():
            info = sw.info(i)
            if info["dirty"] and not info["acquired"]:
                sw.evict(i)

    def collect(self):
        """Wait for the model's writes behind; one that failed and no
        call reported yet (its data kept resident and dirty) is written
        again now, and raises while the failure lasts."""
        try:
            for sw in (self.pswap, self.gswap):
                if sw is not None:
                    sw.wait_all()
        except nvswap.Error:
            self.write_back(retry=True)

    def step_begin(self, name):
        """A step changes the layers one by one: until step_end(), both
        sets refuse checkpoints and close saves none of it (nvswap
        Swapper.step_begin), so no generation holds a step in part."""
        self.pswap.step_begin(name)
        self.gswap.step_begin(name)

    def step_end(self):
        self.pswap.step_end()
        self.gswap.step_end()

    def _spec_stats(self):
        opt = self.optimizer
        st = (opt._spec_stats if opt is not None else
              {"speculated_steps": 0, "redone_steps": 0, "redo_ns": 0})
        return {"speculated_steps": st["speculated_steps"],
                "redone_steps": st["redone_steps"],
                "redo_s": st["redo_ns"] / 1e9,
                "speculating": bool(opt is not None and
                                    opt._spec is not None)}

    def settle(self):
        """A deferred optimizer step applied in full (its failure raises;
        the next call retries)."""
        opt = self.optimizer
        if opt is not None and opt._pending is not None and \
                not self.settling:
            opt.settled("finishing the deferred step")

    # ----------------------------------------------------------- state
    def read_layer(self, layer, indexes=None):
        """Copies of a layer's parameters (all, or those at indexes)."""
        ps = self.layers[layer]
        self.acquire(layer, host=True)
        try:
            return [ps[i].data.clone()
                    for i in (range(len(ps)) if indexes is None
                              else indexes)]
        finally:
            self.release(layer)

    def param_bytes_read(self):
        """Bytes read for the parameters: the pool's (from its swap files
        and, in place, from the weights files), and the rows of the
        embeddings read by rows."""
        rows = (self.row_handle.stats()["bytes_read"]
                if self.row_handle is not None else 0)
        ps = self.pswap.stats()
        return ps["bytes_read"] + ps["file_bytes_read"] + rows

    def stats(self):
        ps = self.pswap.stats()
        gs = (self.gswap.stats() if self.gswap is not None else
              dict.fromkeys(ps, 0))
        out = {
            "layers": len(self.layers),
            "layers_held": sum(1 for r in self.refs if r),
            "steps": self.steps,
            "parameters": sum(len(x) for x in self.layers),
            "parameter_bytes": sum(nbytes(p) for x in self.layers
                                   for p in x),
            "bytes_read": self.param_bytes_read() + gs["bytes_read"],
            "bytes_written": ps["bytes_written"] + gs["bytes_written"],
            "io_exposed_s": (ps["acquire_wait_ns"] + ps["buffer_wait_ns"] +
                             gs["acquire_wait_ns"] + gs["buffer_wait_ns"])
            / 1e9,
            "acquire_s": self.exposed_ns / 1e9,
            # deferred optimizer steps: the time the updates took where
            # they ran (in the next forward, or a reader that needed them)
            "deferred_step_s": self.pending_ns / 1e9,
            "step_pending": bool(self.optimizer is not None and
                                 self.optimizer._pending is not None),
            # speculative steps (taken in backward on the guess that
            # step() will not clip): how many, how many were undone and
            # redone, the time the undone ones cost, one waiting now
            **self._spec_stats(),
            "pool_bytes": ps["buffer_size"] * ps["buffer_count"] +
            gs["buffer_size"] * gs["buffer_count"],
            "pool_high_water": {"param": ps["pool_high_water"],
                                "optimizer": gs["pool_high_water"]},
            "dtype": self.dtype,
            "walk": list(self.walk or ()),
            "recomputes": self.recomputes,
            "recompute_acquires": self.recompute_acquires,
            "resumed": self.resumed,
            "checkpoints": self.ckpt_seq,
            "param": ps,
            "optimizer": gs if self.gswap is not None else None,
            "activations": (self.act.stats() if self.act is not None
                            and not self.act.swapper.closed else None),
        }
        out.update(_infer.stats(self))
        return out

    def checkpoint_close(self):
        """A persistent engine whose sets changed since their last
        checkpoint takes one, tagged "close" (its failure raised, nothing
        closed). A step half done is not saved (the sets, in a step, make
        no checkpoint at their close either): they stay at their last
        one."""
        opt = self.optimizer
        half = opt is not None and bool(opt._began() or opt._broken or
                                        opt._loading or
                                        opt._pending is not None)
        if self.persistent and self.gswap is not None and not half and \
                (self.pswap.unsaved() or self.gswap.unsaved()):
            from . import _durable
            _durable.checkpoint(self, "close").wait()

    def close(self, save=True):
        """save: a persistent engine with changes its last checkpoint
        lacks checkpoints them first (tag "close"), as nvs_swapper_destroy
        does, so a clean exit resumes where it stopped; not while an
        optimizer step is half done: the sets then stay at their last
        checkpoint, which holds none of it. A deferred step is finished
        first, to be saved whole: its failure raises with nothing closed
        (a close that dropped it would lose a step), and close() again
        retries it."""
        if self.closed:
            return
        if self.warming is not None:
            self.warming.stop.set()  # the page cache warm-up: no more
        err = None
        opt = self.optimizer
        if opt is not None and opt._spec is not None:
            try:  # a speculative step step() did not take: undone
                opt._spec_undo()
            except nvswap.Error as e:
                err = e
        if save and self.persistent and opt is not None and \
                opt._pending is not None and \
                not (opt._broken or opt._loading):
            opt.settled("closing the model's offload")
        if save:
            try:
                self.checkpoint_close()
            except nvswap.Error as e:
                err = e
        self.closed = True
        for h in self.handles:
            h.remove()
        self.handles, self.keep = [], []
        if self.optimizer is not None:
            self.optimizer._close()
        for layer in sorted(self.bound):
            for p in self.layers[layer]:
                rec = getattr(p, "_nvswap", None)  # restore() took it
                if rec is not None:
                    p.data = rec.placeholder
            if layer in self.copied:
                continue  # a copy: nothing held in the pool
            try:
                self.params.release_layer(layer, False)
            except nvswap.Error as e:
                err = err or e
        self.bound, self.copied = set(), set()
        for table in self.rows.values():
            table.close()
        if self.row_handle is not None:
            try:
                self.row_handle.close()
            except nvswap.Error as e:
                err = err or e
        for obj in (self.grads, self.masters, self.params, self.gswap,
                    self.pswap):
            if obj is None:
                continue
            try:
                obj.close()
            except nvswap.Error as e:
                err = err or e
        for h in self.holds.values():
            h.close()
        self.holds = {}
        if self.act is not None and self.act_owned:
            try:
                self.act.close()
            except nvswap.Error as e:
                err = err or e
        if err is not None:
            raise err


def engine_of(obj):
    """The offload engine of an offloaded model (or of a parameter)."""
    eng = getattr(obj, "_nvswap_engine", None)
    if eng is None:
        rec = getattr(obj, "_nvswap", None)
        eng = rec.engine if rec is not None else None
    if eng is None:
        raise ValueError("nvswap.torch: not an offloaded model or "
                         "parameter (call nvswap.torch.offload first)")
    if eng.closed:
        raise ValueError("nvswap.torch: the model's offload was closed "
                         "(restore() was called)")
    return eng


def check_layer_fits(items, buffer_size, size_of=nbytes):
    """Split a module's parameters into layers that fit a pool buffer;
    a parameter larger than one is refused with its name and both sizes.
    size_of(p): its bytes in the pool (the compute dtype's)."""
    chunks, cur, cur_bytes = [], [], 0
    for name, p in items:
        n = size_of(p)
        need = (n + ALIGN - 1) // ALIGN * ALIGN
        if need > buffer_size:
            raise error(errno.EFBIG,
                        f"nvswap.torch.offload: parameter '{name}' is "
                        f"{n} bytes, larger than a pool buffer "
                        f"({buffer_size} bytes): raise offload_param."
                        f"buffer_size to at least {need}")
        if cur and (cur_bytes + need > buffer_size or
                    len(cur) == MAX_TENSORS):
            chunks.append(cur)
            cur, cur_bytes = [], 0
        cur.append((name, p))
        cur_bytes += need
    if cur:
        chunks.append(cur)
    return chunks

