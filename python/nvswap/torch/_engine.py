# SPDX-License-Identifier: MIT
"""The offload engine behind nvswap.torch.offload(): one per model.

It owns the model's layers (a module's own parameters, packed into one
nvswap.ParamSwapper layer per pool buffer), the forward hooks that acquire
a layer while its module runs, the saved-tensor hooks that keep autograd
from holding pool memory between forward and backward, and the gradient
write-behind into a nvswap.GradSwapper. Prefetch order, write-behind and
buffer reuse are the C library's: this file only says which layer is
needed when, and hands the traced walk to ParamSwapper.set_walk().
"""
import errno
import time
from collections import OrderedDict

import torch

import nvswap

ALIGN = 64  # nvswap/offload.h packs a group's tensors at 64-byte offsets
MAX_TENSORS = 64  # NVS_OFFLOAD_MAX_TENSORS
GRAD_BASE = 1 << 40  # id_base of the gradient regions in the optimizer swapper
STATE_BASE = 2 << 40  # id_base of the optimizer state groups

_HAS_POST_ACC = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")


def _packed(nbytes):
    return sum((n + ALIGN - 1) // ALIGN * ALIGN for n in nbytes)


def _nbytes(t):
    return t.numel() * t.element_size()


def _storage_ptr(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def error(code, text):
    """An nvswap.Error (the errno subclass where Python has one)."""
    return nvswap.Error(code, text)


class Rec:
    """What an offloaded parameter carries as p._nvswap."""

    __slots__ = ("engine", "layer", "index", "name", "placeholder")

    def __init__(self, engine, layer, index, name, placeholder):
        self.engine, self.layer, self.index = engine, layer, index
        self.name, self.placeholder = name, placeholder


class Saved:
    """A tensor autograd saved that lives in a pool buffer: kept by its
    geometry and rebuilt on the parameter's buffer of the moment."""

    __slots__ = ("param", "size", "stride", "offset")

    def __init__(self, param, t):
        self.param = param
        self.size, self.stride = t.size(), t.stride()
        self.offset = t.storage_offset()


def _placeholder(p, device=None):
    """What an offloaded parameter holds between uses: its shape, dtype and
    device, one element of memory (NaN for floating types, so that a use
    outside any forward shows), and in-place writes refused."""
    fill = float("nan") if p.dtype.is_floating_point else 0
    return torch.full((), fill, dtype=p.dtype,
                      device=device).expand(p.shape)


class ParamDict(OrderedDict):
    """Module._parameters of an offloaded module. A parameter read by
    attribute inside a forward (a parent using a child's weight, as
    MultiheadAttention does with out_proj) is acquired on the spot and held
    until the running module's forward ends."""

    def __getitem__(self, key):
        p = dict.__getitem__(self, key)
        rec = getattr(p, "_nvswap", None)
        if rec is not None and rec.engine.frames:
            rec.engine.need(rec.layer)
        return p


class Engine:
    def __init__(self, pswap, params, gswap, opts, device=None):
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
        self.gswap = gswap  # nvswap.Swapper for gradients + optimizer state
        self.grads = nvswap.GradSwapper(gswap, id_base=GRAD_BASE)
        self.opts = opts
        self.gswap_options = opts.get(
            "optimizer", {"pipeline_read": False, "pipeline_write": False})
        self.layers = []  # layer -> [param]
        self.names = []  # layer -> [qualified name]
        self.grad_off = []  # layer -> [byte offset in the gradient region]
        self.refs = []  # layer -> acquire count
        self.dirty = set()  # acquired layers some acquire changed
        self.mod_layers = {}  # module -> layers its _parameters need
        self.live = {}  # storage pointer -> parameter, while acquired
        self.frames = []  # forward stack: [module, [layers held]]
        self.ctx = None  # saved-tensor hooks while a forward runs
        self.trace, self.walk = [], None
        self.bw_active = False
        self.bw_held = {}  # layer -> param indexes still owed a gradient
        self.bw_cap = max(1, pswap.stats()["buffer_count"] - 1)
        self.bw_got = {}  # layer -> param indexes that got one
        self.written = {}  # layer -> param indexes with a gradient since zero
        self.backlog = []  # (layer, index, gradient) not written yet
        self.stash = {}  # step_in_backward: layer -> {index: gradient}
        self.bw_stepped = False  # this backward stepped layers
        self.unflushed = set()  # layers whose flush failed
        self.retry = False  # a gradient write-behind failed
        self.handles = []  # torch hook handles
        self.keep = []  # AccumulateGrad nodes (torch < 2.1)
        self.exposed_ns = 0  # time spent in acquire calls (Python side)
        self.steps = 0
        self.closed = False
        self.optimizer = None
        self.grad_hook = None  # offload(grad_hook=): fn(name, grad)
        self.persistent = False  # the pools are persistent swap sets
        self.ckpt_seq = 0  # nvswap.torch checkpoints made (or resumed)
        self.resume_record = None  # what a resumed optimizer takes
        self.resumed = None  # {tag, steps, generations} when resumed

    # ---------------------------------------------------------- layers
    def add_layer(self, items, data=None):
        """items: [(name, param)] whose data is materialized; or data:
        what the layer is registered from instead (add_layer_from)."""
        layer = len(self.layers)
        if data is None:
            data = [p.data if p.data.is_contiguous() else
                    p.data.contiguous() for _, p in items]
            if self.device is not None:
                data = [d.to("cpu") for d in data]
        self.params.add_layer(layer, data)
        del data
        offs, off = [], 0
        for _, p in items:
            offs.append(off)
            off += (_nbytes(p) + ALIGN - 1) // ALIGN * ALIGN
        self.grads.add_group(layer, max(off, ALIGN))
        self.layers.append([p for _, p in items])
        self.names.append([n for n, _ in items])
        self.grad_off.append(offs)
        self.refs.append(0)
        for i, (name, p) in enumerate(items):
            ph = _placeholder(p, self.device)
            p._nvswap = Rec(self, layer, i, name, ph)
            p.data = ph
        return layer

    def add_layer_from(self, items):
        """items: [(name, param)] of which only the shapes and dtypes
        count (the parameters may be on the meta device, they are not
        read): the layer is registered as typed zeros, without I/O (a
        resumed persistent set adopts its saved contents instead). Fill
        it by acquire(layer, host=True), writing the parameters' pool
        tensors (p.data), and release(layer, True)."""
        return self.add_layer(items, [
            torch.empty(p.shape, dtype=p.dtype, device="meta")
            for _, p in items])

    def _set_live(self, layer, tensors):
        for p, t in zip(self.layers[layer], tensors):
            p.data = t
            self.live[_storage_ptr(t)] = p

    def acquire(self, layer, host=False):
        """host: the caller (the optimizer, a state dict) wants the pool
        buffers themselves even when the model computes on a device."""
        stage = self.device is not None and not host
        if self.refs[layer] == 0:
            t0 = time.perf_counter_ns()
            tensors = self.params.acquire_layer(layer)
            self.exposed_ns += time.perf_counter_ns() - t0
            if stage:
                tensors = self._to_device(layer, tensors)
            self._set_live(layer, tensors)
            if self.frames:
                self.trace.append(layer)  # the walk: the C acquires
        elif stage != (layer in self.staged):
            raise error(errno.EBUSY,
                        f"nvswap.torch: layer {layer} is held in "
                        f"{'CPU' if stage else 'device'} memory by another "
                        "use (an optimizer step inside a forward or "
                        "backward of a model on a device?)")
        self.refs[layer] += 1

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

    def release(self, layer, dirty=False):
        """End one acquire; the layer is written back (dirty) when any of
        its acquires changed it, whichever releases last."""
        if dirty:
            self.dirty.add(layer)
        self.refs[layer] -= 1
        if self.refs[layer] == 0:
            dirty = layer in self.dirty
            self.dirty.discard(layer)
            if layer in self.staged:
                self._from_device(layer, dirty)
            for p in self.layers[layer]:
                self.live.pop(_storage_ptr(p.data), None)
                p.data = p._nvswap.placeholder
            self.params.release_layer(layer, dirty)
            # Give the buffer back now (a changed layer's write-back
            # starts): the C read-ahead fills free buffers only, and a pool
            # full of released layers would leave every acquire a
            # synchronous read. A failed write submit keeps the layer
            # resident and dirty, and its next eviction or wait() raises
            # (raising here would make a retried step() step it twice).
            try:
                self.params.evict_layer(layer)
            except nvswap.Error:
                pass

    def need(self, layer):
        """A layer used inside the running forward, held until that
        module's forward ends."""
        frame = self.frames[-1]
        if layer not in frame[1]:
            self.acquire(layer)
            frame[1].append(layer)

    # --------------------------------------------------------- forward
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

    # --------------------------------------------------------- autograd
    def _pack(self, t):
        if not self.live:
            return t
        try:
            p = self.live.get(_storage_ptr(t))
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

    def _backward_started(self):
        if not self.bw_active:
            self.bw_active = True
            torch.autograd.Variable._execution_engine.queue_callback(
                self._backward_done)

    def _backward_done(self):
        self.bw_active = False
        err = None
        for layer in sorted(self.stash, reverse=True):
            try:  # layers with a parameter that got no gradient
                self._step_stashed(layer)
            except nvswap.Error as e:
                err = err or e
        if self.bw_stepped:  # step() must come before the next backward
            self.bw_stepped = False
            self.optimizer._unconsumed = True
        held, self.bw_held = self.bw_held, {}
        self.bw_got = {}
        for layer in held:
            try:
                self.release(layer)
            except nvswap.Error as e:
                err = err or e
        for layer in self.written:
            self._flush(layer)
        if err is not None:
            raise err

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
        owed = self.bw_held.get(layer)
        if owed is not None:
            owed.discard(i)
            if not owed:
                del self.bw_held[layer]
                self.release(layer)
        if len(got) == sum(q.requires_grad for q in self.layers[layer]):
            self._flush(layer)

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
        if self.optimizer._unconsumed:
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
        if not self.backlog:
            try:
                self.grads.flush(layer)
            except nvswap.Error:
                self.unflushed.add(layer)  # retried by drain()

    def drain(self):
        """Before a step: collect the gradient write-behind; where a write
        failed or backward kept gradients in memory, retry (evict the
        regions, write the kept gradients) and wait. Raises while the
        failure lasts; nothing is lost, and the next call retries."""
        try:
            self.gswap.wait_all()
        except nvswap.Error:
            self.retry = True
        if not (self.retry or self.backlog or self.unflushed):
            return
        for layer in sorted(set(self.written) | self.unflushed):
            self.gswap.evict(GRAD_BASE + (layer << 20))
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
        if not g.is_contiguous():
            g = g.contiguous()
        if g.device.type != "cpu":
            g = g.to("cpu")  # the gradient pool is CPU memory
        off = self.grad_off[layer][i]
        seen = self.written.setdefault(layer, set())
        if i not in seen:
            self.grads.write(layer, off, g, "assign")
        elif g.dtype == torch.float32:
            self.grads.write(layer, off, g, "accumulate_f32")
        else:
            self.grads.flush(layer)
            region = self.grads.acquire(layer)
            cur = region[off:off + _nbytes(g)].view(g.dtype).view(g.shape)
            total = cur + g
            del cur, region
            self.grads.release(layer)
            self.grads.write(layer, off, total, "assign")
        seen.add(i)

    def zero_grads(self):
        self.backlog, self.unflushed = [], set()
        for layer in self.written:
            self.grads.zero(layer)
        self.written = {}

    def grad_view(self, region, layer, i):
        p = self.layers[layer][i]
        off = self.grad_off[layer][i]
        n = p.numel() * p.element_size()
        return region[off:off + n].view(p.dtype).view(p.shape)

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

    def stats(self):
        ps, gs = self.pswap.stats(), self.gswap.stats()
        out = {
            "layers": len(self.layers),
            "layers_held": sum(1 for r in self.refs if r),
            "steps": self.steps,
            "parameters": sum(len(x) for x in self.layers),
            "parameter_bytes": sum(_nbytes(p) for x in self.layers
                                   for p in x),
            "bytes_read": ps["bytes_read"] + gs["bytes_read"],
            "bytes_written": ps["bytes_written"] + gs["bytes_written"],
            "io_exposed_s": (ps["acquire_wait_ns"] + ps["buffer_wait_ns"] +
                             gs["acquire_wait_ns"] + gs["buffer_wait_ns"])
            / 1e9,
            "acquire_s": self.exposed_ns / 1e9,
            "pool_bytes": ps["buffer_size"] * ps["buffer_count"] +
            gs["buffer_size"] * gs["buffer_count"],
            "pool_high_water": {"param": ps["pool_high_water"],
                                "optimizer": gs["pool_high_water"]},
            "walk": list(self.walk or ()),
            "resumed": self.resumed,
            "checkpoints": self.ckpt_seq,
            "param": ps,
            "optimizer": gs,
        }
        return out

    def close(self, save=True):
        """save: a persistent engine with changes its last checkpoint
        lacks checkpoints them first (tag "close"), as nvs_swapper_destroy
        does, so a clean exit resumes where it stopped."""
        if self.closed:
            return
        err = None
        if save and self.persistent and (self.pswap.unsaved() or
                                         self.gswap.unsaved()):
            from . import _durable
            try:
                _durable.checkpoint(self, "close").wait()
            except nvswap.Error as e:
                err = e
        self.closed = True
        for h in self.handles:
            h.remove()
        self.handles, self.keep = [], []
        if self.optimizer is not None:
            self.optimizer._close()
        for obj in (self.grads, self.params, self.gswap, self.pswap):
            try:
                obj.close()
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


def check_layer_fits(items, buffer_size):
    """Split a module's parameters into layers that fit a pool buffer;
    a parameter larger than one is refused with its name and both sizes."""
    chunks, cur, cur_bytes = [], [], 0
    for name, p in items:
        n = _nbytes(p)
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

