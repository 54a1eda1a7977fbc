# SPDX-License-Identifier: MIT
"""Train a PyTorch model larger than memory: parameters, gradients and
optimizer state on NVMe, from plain PyTorch.

    import nvswap.torch as nvt
    model = nvt.offload(model, config="ds_config.json", rank=0)
    opt = nvt.Adam(model.parameters(), lr=1e-3)     # or nvt.AdamW
    for batch in data:
        loss = loss_fn(model(batch)); loss.backward(); opt.step(); opt.zero_grad()
    nvt.stats(model)
    nvt.checkpoint(model).wait()    # with persist="persistent": resumable

offload() writes every parameter to NVMe (one ParamSwapper layer per
module, split where a module does not fit a pool buffer) and leaves in its
place a placeholder of the right shape, dtype and device holding one
element. A module's parameters are in memory, on a pinned pool buffer,
while its forward runs and again while its backward needs them; the C
library reads ahead along the walk traced by the first forward.
Gradients go to NVMe as each parameter's gradient is complete (written
behind); p.grad stays None. nvt.Adam / nvt.AdamW run torch's own Adam /
AdamW on one layer at a time, with the state streamed through an
OptimizerSwapper, so the arithmetic (and the result) is torch's, bit for
bit. With persist='persistent' both pools are persistent swap sets:
checkpoint(model) saves the training state where it lies (only what is
dirty in memory is written), and offload(..., persist='resume') of the
same model picks it up again. See docs/torch.md.
"""
import contextlib
import ctypes
import errno
import inspect
import json
import os

import torch

import nvswap

from . import _durable, _engine
from ._engine import Engine, ParamDict, check_layer_fits
from ._optim import Adam, AdamW, OffloadedOptimizer

__all__ = ["offload", "stats", "wait", "gathered", "restore", "engine_of",
           "checkpoint", "Checkpoint", "Adam", "AdamW", "OffloadedOptimizer"]

Checkpoint = _durable.Checkpoint

# torch >= 2.1 runs a forward hook even when the forward raises.
_ALWAYS_CALL = "always_call" in inspect.signature(
    torch.nn.Module.register_forward_hook).parameters
_PLAIN_DICT = type(torch.nn.Module()._parameters)


def _config(config):
    """(nvswap.Config or None, the raw dict or None)"""
    if config is None:
        return None, None
    if isinstance(config, nvswap.Config):
        raw = None
        if config.source and os.path.exists(config.source):
            with open(config.source) as f:
                raw = json.load(f)
        return config, raw
    if isinstance(config, dict):
        return nvswap.Config.from_str(json.dumps(config)), config
    if isinstance(config, (str, bytes, os.PathLike)):
        cfg = nvswap.Config.load(config)
        with open(config) as f:
            return cfg, json.load(f)
    raise TypeError("nvswap.torch.offload: config must be a path, a dict or "
                    f"an nvswap.Config, not {type(config).__name__}")


def _raw_key(raw, *path):
    for k in path:
        if not isinstance(raw, dict) or k not in raw:
            return None
        raw = raw[k]
    return raw


def _persist(cfg, kw):
    """(persist, keep_generations) from the keywords, else the config."""
    nv = cfg.nvswap_options() if cfg is not None else {}
    persist = kw.get("persist") or nv.get("persist", "scratch")
    if persist not in ("scratch", "persistent", "resume"):
        raise ValueError("nvswap.torch.offload: persist must be 'scratch', "
                         f"'persistent' or 'resume', not {persist!r}")
    return persist, nv.get("keep_generations", 2)


def _swappers(cfg, raw, rank, kw, generations=(None, None)):
    """The parameter Swapper and the gradient/optimizer-state Swapper
    (each opened at the given generation of a persistent set)."""
    common = {k: kw[k] for k in ("backend",) if kw.get(k) is not None}
    persist, keep = _persist(cfg, kw)
    if persist != "scratch":
        common.update(persist=persist, keep_generations=keep)
    pkw = dict(common)
    if generations[0] is not None:
        pkw["generation"] = generations[0]
    for k in ("nvme_path", "buffer_size", "buffer_count"):
        if kw.get(k) is not None:
            pkw[k] = kw[k]
    if cfg is None:
        pkw.setdefault("buffer_count", 4)
        if "nvme_path" not in pkw:
            raise ValueError("nvswap.torch.offload: give config= or "
                             "nvme_path=")
        pswap = nvswap.Swapper(name="param", rank=rank, **pkw)
    else:
        pswap = nvswap.Swapper(cfg, kind="param", rank=rank, **pkw)
    try:
        ps = pswap.stats()
        okw = dict(common)
        if generations[1] is not None:
            okw["generation"] = generations[1]
        if kw.get("optimizer_buffer_size") is not None:
            okw["buffer_size"] = kw["optimizer_buffer_size"]
        if kw.get("optimizer_buffer_count") is not None:
            okw["buffer_count"] = kw["optimizer_buffer_count"]
        on_nvme = cfg is not None and cfg.offload("optimizer").get(
            "device") == "nvme"
        if on_nvme:
            if _raw_key(raw, "zero_optimization", "offload_optimizer",
                        "buffer_size") is None:
                okw.setdefault("buffer_size", 2 * ps["buffer_size"] +
                               2 * _engine.ALIGN * _engine.MAX_TENSORS)
            gswap = nvswap.Swapper(cfg, kind="optimizer", rank=rank, **okw)
        else:
            okw.setdefault("buffer_size", 2 * ps["buffer_size"] +
                           2 * _engine.ALIGN * _engine.MAX_TENSORS)
            okw.setdefault("buffer_count", 4)
            path = kw.get("nvme_path") or os.path.dirname(os.path.dirname(
                os.path.dirname(pswap.dirs[0])))
            gswap = nvswap.Swapper(nvme_path=path, name="optimizer",
                                   rank=rank, **okw)
    except BaseException:
        pswap.close()
        raise
    return pswap, gswap


def _resumable(cfg, raw, rank, kw):
    """The two Swappers; for a persistent set that holds checkpoints,
    both at the newest one they share, and its record."""
    pswap, gswap = _swappers(cfg, raw, rank, kw)
    persist = _persist(cfg, kw)[0]
    if persist == "scratch":
        return pswap, gswap, None
    try:
        common = _durable.common_generation(pswap, gswap)
        if common is None and persist == "resume":
            raise nvswap.Error(errno.ENOENT, "nvswap.torch.offload: "
                               f"nothing to resume in {pswap.dirs[0]}: no "
                               "nvswap.torch checkpoint was saved there")
        if common is not None:
            seq, gp, go = common
            if (pswap.generations()[0]["generation"] != gp or
                    gswap.generations()[0]["generation"] != go):
                # One set is ahead (a crash between the two commits).
                gswap.close()
                pswap.close()
                pswap = gswap = None
                pswap, gswap = _swappers(cfg, raw, rank, kw, (gp, go))
            rec = _durable.read_record(gswap)
            rec["generations"] = (gp, go)
            return pswap, gswap, rec
        # No checkpoint of ours: what a run that never saved left is not
        # a training state; start from the model given.
        for s in (pswap, gswap):
            for i in s.ids():
                s.unregister(i)
        return pswap, gswap, None
    except BaseException:
        for s in (gswap, pswap):
            if s is not None:
                s.close()
        raise


def _layer_plan(model, buffer_size):
    """[(owner name, owner module, [(qualified name, param)])] in
    named_modules order, each fitting a pool buffer; and the tied uses
    [(module, attribute, param)]. Raises before anything is written."""
    plan, tied, seen = [], [], set()
    for mname, m in model.named_modules():
        own = []
        for pname, p in m._parameters.items():
            if p is None:
                continue
            if id(p) in seen:
                tied.append((m, pname, p))
                continue
            seen.add(id(p))
            own.append((f"{mname}.{pname}" if mname else pname, p))
        for chunk in check_layer_fits(own, buffer_size):
            plan.append((mname, m, chunk))
    return plan, tied


def _materialize(module, chunk, init, renamed):
    """Parameters on the meta device become CPU parameters (new objects,
    put in the module; renamed maps the old ones' ids to them) and are
    initialized by init(module) or the module's reset_parameters()."""
    if not any(p.is_meta for _, p in chunk):
        return chunk
    out = []
    for name, p in chunk:
        if p.is_meta:
            q = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype),
                                   requires_grad=p.requires_grad)
            module._parameters[name.rpartition(".")[2]] = q
            renamed[id(p)] = q
            p = q
        out.append((name, p))
    if init is not None:
        init(module)
    elif hasattr(module, "reset_parameters"):
        module.reset_parameters()
    elif hasattr(module, "_reset_parameters"):
        module._reset_parameters()
    else:
        raise ValueError(f"nvswap.torch.offload: {type(module).__name__} "
                         "has parameters on the meta device and no "
                         "reset_parameters(): pass init=")
    return out


def _fix_mmap_threshold(nbytes):
    """glibc raises malloc's mmap threshold each time a large block is
    freed, after which layer-sized tensors come from the heap and their
    memory is kept: the peak then grows with the model. A fixed threshold
    (mallopt M_MMAP_THRESHOLD) returns them to the system on free."""
    if nbytes is None:
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return  # not glibc
    mallopt(-3, int(nbytes))  # M_MMAP_THRESHOLD


def offload(model, config=None, rank=None, *, nvme_path=None,
            buffer_size=None, buffer_count=None, lookahead=None,
            max_in_cpu=None,
            optimizer_buffer_size=None, optimizer_buffer_count=None,
            backend=None, init=None, malloc_mmap_threshold=1 << 20,
            persist=None, device=None, grad_hook=None):
    """Move model's parameters to NVMe; returns model (changed in place).

    config: a DeepSpeed-style JSON file, a dict or an nvswap.Config; its
    zero_optimization.offload_param section (nvme_path, buffer_count,
    buffer_size) makes the parameter pool, offload_optimizer the pool for
    gradients and optimizer state, nvswap.lookahead the read-ahead. Or no
    config and nvme_path=, buffer_size=, buffer_count=. Keywords override
    the config. rank: the swap directory is <nvme_path>/nvswap/<kind>/
    rank<rank>; None (the default) takes the config's nvswap.rank, else
    the launcher's (nvswap.launch(): torchrun's RANK, mpirun's...). max_in_cpu: bytes of whole layers kept in CPU memory
    (default 0; also read from offload_param.max_in_cpu when the config
    sets it, taken as elements as DeepSpeed does). Parameters on the meta
    device are materialized one module at a time (init(module), else its
    reset_parameters()) and written out before the next, so a model larger
    than memory can be built.

    malloc_mmap_threshold: on glibc, malloc's mmap threshold is fixed at
    this many bytes (default 1 MiB; None leaves malloc alone) so that the
    memory of freed layer-sized tensors goes back to the system and the
    peak stays independent of the model's size.

    persist: 'scratch' (the default, or the config's nvswap.persist),
    'persistent' or 'resume': both pools become persistent swap sets
    (<nvme_path>/nvswap/{param,optimizer}/rank<rank>), checkpoint(model)
    saves the training state, and a set that holds a checkpoint is
    resumed: the parameters (and, once an nvswap.torch optimizer is made
    over the model, its state and step counts) are the saved ones, read
    from NVMe only when used; the model given only says the layout, which
    must match. 'resume' requires a checkpoint (ENOENT otherwise).

    device: where the model computes. By default the device its
    parameters are on: a model on a CUDA device keeps computing there
    (ZeRO-Infinity's layout): each layer is read from NVMe into a pinned
    pool buffer and copied to the device while its module runs (the copy
    is asynchronous, on the current stream), gradients come back to the
    CPU gradient pool, and the optimizer steps in CPU memory; between
    uses a parameter holds a one-element placeholder on the device.
    step_in_backward is not available then. device='cpu' makes ordinary
    CPU copies the same way (the pool buffers stay private).

    grad_hook: fn(name, grad), called in backward with each parameter's
    gradient once autograd has summed its uses, before it is written to
    the gradient pool (or stepped, step_in_backward); a tensor it returns
    (same shape and dtype) is used instead, None keeps grad. Calls follow
    autograd's order, the same on every process running the same model:
    a data-parallel run averages gradients across ranks there
    (examples/python/ddp_offloaded.py). What it raises propagates out of
    backward() and that gradient is dropped.

    Raises ValueError (already offloaded, no path, another model than the
    one saved, parameters on several devices), nvswap.Error(EFBIG) naming a parameter larger than a pool
    buffer (nothing written then), and the Swapper's errors.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError("nvswap.torch.offload: model must be a "
                        f"torch.nn.Module, not {type(model).__name__}")
    for name, p in model.named_parameters():
        if getattr(p, "_nvswap", None) is not None:
            raise ValueError(f"nvswap.torch.offload: parameter '{name}' is "
                             "already offloaded (offload() was called on "
                             "this model or one sharing its parameters)")
    if grad_hook is not None and not callable(grad_hook):
        raise TypeError("nvswap.torch.offload: grad_hook must be callable, "
                        f"not {type(grad_hook).__name__}")
    device = _device(model, device)
    cfg, raw = _config(config)
    _fix_mmap_threshold(malloc_mmap_threshold)
    kw = dict(nvme_path=nvme_path, buffer_size=buffer_size,
              buffer_count=buffer_count, backend=backend,
              optimizer_buffer_size=optimizer_buffer_size,
              optimizer_buffer_count=optimizer_buffer_count,
              persist=persist)
    pswap, gswap, rec = _resumable(cfg, raw, rank, kw)
    try:
        bs = pswap.stats()["buffer_size"]
        plan, tied = _layer_plan(model, bs)
        if lookahead is None:
            lookahead = (cfg.nvswap_options()["lookahead"]
                         if cfg is not None else 1)
        if max_in_cpu is None:
            mic = _raw_key(raw, "zero_optimization", "offload_param",
                           "max_in_cpu")
            elem = max((p.element_size() for _, _, c in plan for _, p in c),
                       default=1)
            max_in_cpu = int(mic) * elem if mic is not None else 0
        params = nvswap.ParamSwapper(pswap, lookahead=lookahead,
                                     max_in_cpu=max_in_cpu)
        oo = (cfg.offload("optimizer") if cfg is not None else {})
        eng = Engine(pswap, params, gswap, {
            "rank": rank,
            "optimizer": {"pipeline_read": bool(oo.get("pipeline_read")),
                          "pipeline_write": bool(oo.get("pipeline_write"))}},
            device=device)
        eng.grad_hook = grad_hook
    except BaseException:
        gswap.close()
        pswap.close()
        raise
    try:
        layer_of, renamed = {}, {}
        for mname, m, chunk in plan:
            chunk = _materialize(m, chunk, init, renamed)
            layer = eng.add_layer(chunk)
            eng.mod_layers.setdefault(m, []).append(layer)
            for _, p in chunk:
                layer_of[id(p)] = layer
        for m, pname, p in tied:
            if id(p) in renamed:
                p = m._parameters[pname] = renamed[id(p)]
            layers = eng.mod_layers.setdefault(m, [])
            if layer_of[id(p)] not in layers:
                layers.append(layer_of[id(p)])
        eng.persistent = _persist(cfg, kw)[0] != "scratch"
        if rec is not None:
            _durable.check_layers(eng, rec)
            _durable.restore_engine(eng, rec)
            eng.resume_record = rec
            eng.ckpt_seq = rec["seq"]
            eng.resumed = {"tag": rec["tag"], "steps": rec["steps"],
                           "generations": rec["generations"]}
    except BaseException:
        _undo(model, eng)
        raise
    _install(model, eng)
    return model


def _device(model, device):
    """The device a model offloaded with device= computes on: given, or
    the one its parameters are on (None: CPU or meta, the pool buffers
    are the parameters)."""
    if device is not None:
        return torch.device(device)
    found = {p.device for p in model.parameters()
             if p.device.type != "meta"}
    if len(found) > 1:
        raise ValueError("nvswap.torch.offload: the model's parameters are "
                         f"on several devices ({sorted(map(str, found))}); "
                         "move them to one, or pass device=")
    dev = found.pop() if found else None
    return None if dev is None or dev.type == "cpu" else dev


def _undo(model, eng):
    """A failed offload: parameters already written are read back."""
    for layer, ps in enumerate(eng.layers):
        try:
            data = eng.read_layer(layer)
        except nvswap.Error:
            data = [torch.zeros(p.shape, dtype=p.dtype) for p in ps]
        for p, d in zip(ps, data):
            p.data = d if eng.device is None else d.to(eng.device)
            del p._nvswap
    try:
        eng.close(save=False)
    except nvswap.Error:
        pass


def _install(model, eng):
    hooked = set(eng.mod_layers) | {model}
    for m in hooked:
        if m in eng.mod_layers or any(
                getattr(p, "_nvswap", None) for p in m._parameters.values()):
            m._parameters = ParamDict(m._parameters)
        eng.handles.append(m.register_forward_pre_hook(eng.pre_forward))
        if _ALWAYS_CALL:
            eng.handles.append(m.register_forward_hook(eng.post_forward,
                                                       always_call=True))
        else:
            eng.handles.append(m.register_forward_hook(eng.post_forward))
        if m in eng.mod_layers:
            eng.handles.append(m._register_state_dict_hook(_state_dict_hook))
            eng.handles.append(m._register_load_state_dict_pre_hook(
                _load_pre_hook, with_module=True))
            eng.handles.append(
                m.register_load_state_dict_post_hook(_load_post_hook))
    for ps in eng.layers:
        for p in ps:
            if p.requires_grad:
                eng.hook_grads(p)
    if not _ALWAYS_CALL:
        forward = model.forward

        def unwinding_forward(*args, **kwargs):
            try:
                return forward(*args, **kwargs)
            except BaseException:
                eng.unwind()
                raise

        model.forward = unwinding_forward
    model.zero_grad = lambda set_to_none=True: eng.zero_grads()
    model._nvswap_engine = eng


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


def _owned(module):
    return [(n, p) for n, p in module._parameters.items()
            if getattr(p, "_nvswap", None) is not None]


def _state_dict_hook(module, sd, prefix, meta):
    """The module's offloaded entries become copies read back from NVMe,
    one acquire per layer."""
    want = {}  # layer -> [(key, index)]
    for name, p in _owned(module):
        if prefix + name in sd:
            want.setdefault(p._nvswap.layer, []).append(
                (prefix + name, p._nvswap.index))
    if want:
        eng = _module_engine(module)
        for layer, entries in want.items():
            data = eng.read_layer(layer, [i for _, i in entries])
            for (key, _), t in zip(entries, data):
                sd[key] = t if eng.device is None else t.to(eng.device)


def _module_engine(module):
    for p in module._parameters.values():
        if getattr(p, "_nvswap", None) is not None:
            return p._nvswap.engine
    return engine_of(module)


def _load_pre_hook(module, sd, prefix, meta, strict, missing, unexpected,
                   errs):
    eng = _module_engine(module)
    held = []
    try:
        for layer in eng.mod_layers.get(module, ()):
            eng.acquire(layer)
            held.append(layer)
    except BaseException:
        for layer in held:
            eng.release(layer)
        raise
    module._nvswap_loading = held


def _load_post_hook(module, incompatible):
    held = module.__dict__.pop("_nvswap_loading", [])
    eng = _module_engine(module)
    for layer in reversed(held):
        eng.release(layer, True)  # written through to NVMe


def stats(model):
    """A dict: layers, layers_held (acquired now), steps (optimizer steps
    taken), parameters, parameter_bytes, bytes_read,
    bytes_written, io_exposed_s (time acquires waited for I/O or a buffer,
    from the C library), pool_bytes, pool_high_water, walk, resumed
    ({tag, steps, generations} when offload() resumed a checkpoint, else
    None), checkpoints (nvswap.torch checkpoints of the sets), and the raw
    Swapper stats of both pools ('param', 'optimizer')."""
    return engine_of(model).stats()


def wait(model):
    """Write back every changed parameter layer and wait for all of the
    model's I/O (gradient and state write-behind included); raises the
    first failure. Layers held by a running forward stay."""
    eng = engine_of(model)
    eng.drain()
    for layer, refs in enumerate(eng.refs):
        if not refs:
            eng.params.evict_layer(layer)
    eng.pswap.wait_all()
    eng.gswap.wait_all()


@contextlib.contextmanager
def gathered(module, modify=False):
    """The module's offloaded parameters (its own and its children's) in
    memory for the block: read them, or change them with modify=True
    (written back to NVMe at the end). Every layer is held at once: the
    module must fit the parameter pool."""
    eng = None
    layers = []
    for p in module.parameters():
        rec = getattr(p, "_nvswap", None)
        if rec is not None and rec.layer not in layers:
            eng = rec.engine
            layers.append(rec.layer)
    held = []
    try:
        for layer in layers:
            eng.acquire(layer)
            held.append(layer)
        yield module
    finally:
        for layer in reversed(held):
            eng.release(layer, modify)


def checkpoint(model, tag=None):
    """Save the offloaded training state (parameters, gradients not yet
    stepped, the nvswap.torch optimizer's state, step counts and
    hyper-parameters) as a new generation of both persistent sets, tagged
    tag (default "step <optimizer steps>"). Call it between steps. Only the
    dirty resident tensors are written; it returns once their writes are
    issued, with a Checkpoint whose wait() blocks until both sets are
    durable (the next step may run meanwhile). A model offloaded with
    persist='resume' (or 'persistent' over that directory) starts from
    the newest checkpoint both sets hold.

    Raises nvswap.Error(EINVAL) for a model offloaded to scratch space,
    RuntimeError inside a forward or gathered(), and the checkpoint's
    errors (EBUSY, ENOSPC, EIO)."""
    return _durable.checkpoint(engine_of(model), tag)


def restore(model):
    """Undo offload(): every parameter back in ordinary memory, hooks
    removed, swap files deleted (a persistent set's are kept, with a last
    checkpoint "close" when it changed since the last one). The optimizer
    made on it is closed."""
    eng = engine_of(model)
    for layer, ps in enumerate(eng.layers):
        data = eng.read_layer(layer)
        for p, d in zip(ps, data):
            p.data = d if eng.device is None else d.to(eng.device)
    for p in [p for ps in eng.layers for p in ps]:
        del p._nvswap
    for m in model.modules():
        if isinstance(m._parameters, ParamDict):
            m._parameters = _PLAIN_DICT(m._parameters)
    for name in ("zero_grad", "forward", "_nvswap_engine"):
        model.__dict__.pop(name, None)
    eng.close()
    return model

