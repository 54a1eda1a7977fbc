# SPDX-License-Identifier: MIT
"""offload() and restore(): a model's parameters moved to NVMe and back,
and the hooks that make its forward, backward and state dicts work."""
import atexit
import ctypes
import errno
import functools
import inspect
import os
import weakref

import torch

import nvswap

from . import (_activations, _clip, _depth, _durable, _infer, _load, _mixed,
               _pools, _rows, _sizes, _statedict)
from ._engine import ALIGN, Engine, ParamDict, check_layer_fits, engine_of
from ._plan import (check_meta, default_init, layer_plan, materialize,
                    materialize_buffers, meta_tensors, record_plan)
from ._warm import warm_cache

# torch >= 2.1 runs a forward hook even when the forward raises.
_ALWAYS_CALL = "always_call" in inspect.signature(
    torch.nn.Module.register_forward_hook).parameters
_PLAIN_DICT = type(torch.nn.Module()._parameters)


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


# The scratch engines of this process not closed yet: closed at exit, so
# that their swap files (and the directories made for them) go with the
# process also without restore() (the Swappers are in reference cycles
# with the model, which the interpreter need not collect at exit).
_SCRATCH = weakref.WeakSet()


@atexit.register
def _close_at_exit():
    for eng in list(_SCRATCH):
        if eng.pid != os.getpid():
            continue  # a forked child's copy: the parent's files
        try:
            eng.close(save=False)
        except Exception:  # nothing to report to at exit
            pass


def _size_of(value):
    """A size keyword _pool_arg() accepted, in bytes."""
    return value if isinstance(value, int) else _sizes.parse(value)


def _pool_arg(name, value, size):
    """A pool keyword (None: unset), refused naming the keyword when it
    is not a positive count; size: bytes, an int or a str such as '64M'
    (_sizes.RULE), returned in bytes; else a whole number of buffers."""
    if value is None:
        return None
    if size:
        return _sizes.keyword("offload", name, value)
    what = "a whole number > 0"
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"nvswap.torch.offload: {name} must be {what}, "
                        f"not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"nvswap.torch.offload: {name}={value!r}: must be "
                         f"{what}")
    return value


def _default_buffer_size(model, dtype, skip=()):
    """Bytes of the largest module's own parameters in the pool, each
    rounded up as a layer places it: every module then fits one buffer,
    whole (but the modules in skip, which need no buffer)."""
    seen, most = set(), 0
    for m in model.modules():
        if m in skip:
            continue
        n = 0
        for p in m._parameters.values():
            if p is None or id(p) in seen:
                continue
            seen.add(id(p))
            n += (_mixed.cast_size(p, dtype) + ALIGN - 1) // ALIGN * ALIGN
        most = max(most, n)
    return max(most, ALIGN)


def _check_streamed_fit(eng, plan, dtype):
    """A served checkpoint's layers are as saved: each one streamed (not
    kept in memory, not read by rows) must fit the pool's buffer. On a
    device every layer streams (_infer.bind keeps none there)."""
    size = eng.pswap.stats()["buffer_size"]
    sizes = _infer.layer_sizes(plan, lambda p: _mixed.cast_size(p, dtype))
    kept = eng.copy_in_cpu if eng.device is None else ()
    for i, (_, m, chunk) in enumerate(plan):
        if i in kept or chunk[0][0] in eng.by_rows or sizes[i] <= size:
            continue
        raise ValueError(
            f"nvswap.torch.offload: the checkpoint's layer {i} ("
            f"{', '.join(n for n, _ in chunk[:3])}) takes {sizes[i]} "
            f"bytes, more than the {size}-byte pool buffers it would "
            "stream through: give a larger buffer_size= or memory=")


def offload(model, config=None, rank=None, *, nvme_path=None,
            buffer_size=None, buffer_count=None, lookahead=None,
            max_in_cpu=None,
            optimizer_buffer_size=None, optimizer_buffer_count=None,
            backend=None, init=None, malloc_mmap_threshold=1 << 20,
            persist=None, device=None, grad_hook=None, dtype=None,
            weights=None, inference=False, memory=None, page_cache=None,
            checksum=None, activations=None):
    """Move model's parameters to NVMe; returns model (changed in place).

    config: a DeepSpeed-style JSON file, a dict or an nvswap.Config; its
    zero_optimization.offload_param section (nvme_path, buffer_count,
    buffer_size) makes the parameter pool, offload_optimizer the pool for
    gradients and optimizer state, nvswap.lookahead the read-ahead. Or no
    config and nvme_path=, buffer_size= (bytes; default: the largest
    module's parameters, so that each module is one layer),
    buffer_count= (default 4). Keywords override the config; a bad one
    raises ValueError or TypeError naming it. A missing nvme_path is
    made (0700 for each level made). rank: the swap directory is
    <nvme_path>/nvswap/<kind>/
    rank<rank>; None (the default) takes the config's nvswap.rank, else
    the launcher's (nvswap.launch(): torchrun's RANK, mpirun's...).
    max_in_cpu: bytes of whole layers kept in CPU memory (default 0; also
    read from offload_param.max_in_cpu when the config sets it, taken as
    elements as DeepSpeed does). Parameters on the meta device are
    materialized one module at a time (init(module), else its
    reset_parameters()) and written out before the next, so a model larger
    than memory can be built. Buffers on the meta device (a rotary
    embedding's inv_freq) are materialized by the same init(module) (or
    reset_parameters()); what nothing can initialize is refused before
    anything is written, naming it. init defaults to a Hugging Face
    model's own _init_weights.

    weights: pretrained weights, by state_dict() key: a .safetensors
    file, a directory with model.safetensors.index.json and its shards
    (Hugging Face's save_pretrained), model.safetensors or
    pytorch_model.bin, or a torch.save'd state dict (.bin, .pt: loaded
    with torch.load(mmap=True) where torch >= 2.1 has it, else whole into
    memory). The parameters are not initialized: each layer is
    registered from their shapes, read from the file straight into its
    pinned pool buffer (O_DIRECT) and written to its swap file behind the
    reading of the next ones, so memory stays bounded by the pools. Every
    header, key, shape and dtype is checked before anything is written,
    as load_state_dict(strict=True) does: ValueError listing the missing
    and unexpected keys and the shape and dtype mismatches (the file's
    dtype must be the parameter's; with dtype=, any floating one: the fp32
    masters take the file's values, the bf16 layers them rounded),
    nvswap.Error(EBADMSG) naming the file and tensor of a malformed or
    truncated file, ENOENT for a missing one
    or a shard its index names; the model is then unchanged. A tied
    parameter may be in the file under any of its names (under two, with
    the same bytes). A Hugging Face model's _keys_to_ignore_on_load_
    missing / _unexpected patterns apply (and its loader's legacy
    rotary_emb.inv_freq and position_ids); parameters ignored as missing
    and buffers not in the file (non-persistent ones) come from init.
    Persistent buffers are loaded into memory. When a checkpoint is
    resumed (persist='resume' or 'persistent'), the parameters are the
    checkpoint's: weights= is checked but its parameters are not read,
    only its persistent buffers (checkpoints hold parameters only).

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
    'readonly' (inference=True only; ValueError otherwise) serves a set
    as 'resume' does: inference=True opens it read-only either way.

    device: where the model computes. By default the device its
    parameters are on: a model on a CUDA device keeps computing there
    (ZeRO-Infinity's layout): each layer is read from NVMe into a pinned
    pool buffer and copied to the device while its module runs (the copy
    is asynchronous, on the current stream), gradients come back to the
    CPU gradient pool, and the optimizer steps in CPU memory; between
    uses a parameter holds a one-element placeholder on the device.
    step_in_backward is not available then. device='cpu' makes ordinary
    CPU copies the same way (the pool buffers stay private).

    dtype: torch.bfloat16 computes in bf16 with fp32 master weights
    (ZeRO-Infinity's layout): floating parameters (and buffers, as
    model.to(dtype) does) are kept in bf16, so forward and backward read
    half the bytes of fp32, and gradients are bf16; an fp32 master copy of
    each (the values given, widened if they were not fp32) lives in the
    optimizer set, and the nvswap.torch optimizer steps it with the
    gradient in fp32 and writes the rounded copy back into the layer.
    torch.float16 is refused (it needs loss scaling); None or
    torch.float32: no masters.

    grad_hook: fn(name, grad), called in backward with each parameter's
    gradient once autograd has summed its uses, before it is written to
    the gradient pool (or stepped, step_in_backward); a tensor it returns
    (same shape and dtype) is used instead, None keeps grad. Calls follow
    autograd's order, the same on every process running the same model:
    a data-parallel run averages gradients across ranks there
    (examples/python/ddp_offloaded.py). What it raises propagates out of
    backward() and that gradient is dropped.

    A scratch offload (not persist=) removes its swap files, and the
    directories made for them, at restore(), or when the process exits
    without it (normally or by an exception; a SIGKILL leaves them, and
    the next offload() on that path removes them).

    inference: True for a model that only runs forward (serving,
    generate()): no gradient or optimizer pool is made and nothing is
    written back; unless lookahead= (or the config's nvswap.lookahead)
    says otherwise, the read-ahead fills every free pool buffer (the
    walk of a decoding step is the same every time) and then, on the
    CPU with 3 buffers or more, forwards 2-5 are timed and the depth is
    chosen from the measured disk and compute times: buffers read-ahead
    does not need keep a streamed layer each for good, a choice undone
    when forwards 6-9 turn out more than 5 % slower (_depth.py;
    stats()["read_ahead"] says what was measured and chosen); a backward
    reaching its parameters, an nvswap.torch optimizer over it,
    grad_hook= and the optimizer pool keywords are refused. With
    persist='resume' (or 'persistent', 'readonly'), the newest
    checkpoint of the persistent parameter set a model was trained in is
    served from it, read-only (the set opened shared, so any number of
    processes serve it at once and a writer, a training run resuming, is
    refused with EBUSY naming them while they do; nothing is written to
    it; its own layers, whatever the buffer size; the optimizer
    set is not opened; load_state_dict(), gathered(modify=True) and
    checkpoint() raise EROFS; the layers memory= keeps resident, and an
    embedding's table read by rows, are read out of the set at offload
    (Swapper.read: any size, no pool buffer)): docs/inference.md.
    With dtype=, its parameters are cast (no fp32 masters). On the CPU,
    layers kept in CPU memory are bound once (no per-forward hooks).
    memory: (inference=True only) a host-memory budget in bytes (or a
    str such as '6G') for the parameter pool and the layers kept
    resident, chosen to stream the fewest bytes per forward, so that
    more memory never streams more: the largest layers may stay so that
    the buffers need only fit the largest streamed one (with
    buffer_size= given, they keep that size), then whole layers spread
    evenly along the order they are added, so that the disk reads
    ahead while a resident layer computes (never read from NVMe again),
    beside 2 buffers (more, up to lookahead + 2, only where they stream
    no more; buffer_count= overrides); a budget that cannot hold two
    buffers is refused naming the least that serves. On the CPU, an
    input nn.Embedding whose weight no other module uses is read by
    rows (each forward reads its ids' rows from the table's own unnamed
    O_DIRECT file) when that streams fewer layer bytes than keeping it
    whole: it takes no pool buffer and, with memory=, 1 MiB of the
    budget (not with max_in_cpu=). stats() reports
    resident_layers, resident_bytes, forwards, last_forward_bytes_read,
    row_layers, row_bytes, rows_read, page_cache and read_ahead.

    page_cache: True (or the config's nvswap.page_cache, which the
    keyword overrides either way) opens the swap files without O_DIRECT
    (both pools, as nvswap.Swapper(page_cache=True), and the
    embeddings' tables): the kernel may then cache them
    in memory beside the pools, memory that memory= does not count, as
    accelerate's disk offload does with its files. False: O_DIRECT,
    what nvswap takes of memory is what memory= (or the pool keywords)
    say. 'auto' (inference=True only; its default, unless a config
    sets nvswap.page_cache or is an nvswap.Config not read from a
    file): True when the memory this process may still fill
    (MemAvailable, and the room its memory cgroups leave), less
    memory=, holds every byte a forward streams with an eighth to
    spare, else False (a cache smaller than the stream is cycled
    through, every read a miss: slower than O_DIRECT); decided once, at
    offload(). Training's default is False.

    checksum: True (or the config's nvswap.checksum, which the keyword
    overrides either way) keeps a CRC32C of every tensor written to the
    scratch swap files and checks it at every read (nvswap.Swapper(
    checksum=True)): a swap file changed behind nvswap's back raises
    nvswap.Error(EBADMSG) naming the layer and the file instead of
    computing with wrong weights. A persistent set always checks.

    activations: "nvme" sends the tensors autograd saves for backward in
    the model's forward (those its pools do not hold: activations,
    checkpoints' inputs: non-reentrant ones from torch 2.1) to a swap
    file of their own in nvme_path
    (<nvme_path>/nvswap/activations/rank<rank>, 256 MiB of 32 MiB
    buffers), or a store made by nvt.save_on_nvme() (its path, memory,
    buffer_size and threshold; the caller closes it). The store's
    counters are stats(model)["activations"]; the one "nvme" makes
    closes with the model's offload (restore(), exit). A layer of the
    walk (with what runs after it until the next) saving more than the
    store's pool raises nvswap.Error(ENOBUFS) in that forward, naming it
    and both sizes. Not with
    inference=True. Default None: they stay in memory (docs/torch.md,
    "Activations to NVMe").

    Raises ValueError (already offloaded, no path, another model than the
    one saved, parameters on several devices, a pool keyword <= 0),
    nvswap.Error(ENOTDIR, EACCES...) naming a level of nvme_path that is
    not a directory or cannot be made, nvswap.Error(EFBIG) naming
    a parameter larger than a pool buffer (nothing written then), and the
    Swapper's errors.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError("nvswap.torch.offload: model must be a "
                        f"torch.nn.Module, not {type(model).__name__}")
    for name, p in model.named_parameters():
        if getattr(p, "_nvswap", None) is not None:
            raise ValueError(f"nvswap.torch.offload: parameter '{name}' is "
                             "already offloaded (offload() was called on "
                             "this model or one sharing its parameters)")
    if page_cache is not None and not isinstance(page_cache, bool) and \
            page_cache != "auto":
        raise TypeError("nvswap.torch.offload: page_cache must be True, "
                        f"False or 'auto', not {page_cache!r}")
    if checksum is not None and not isinstance(checksum, bool):
        raise TypeError("nvswap.torch.offload: checksum must be True, "
                        f"False or None, not {checksum!r}")
    if page_cache == "auto" and not inference:
        raise ValueError("nvswap.torch.offload: page_cache='auto' decides "
                         "from the bytes a forward streams: inference="
                         "True only (give True or False)")
    _check_activations(activations, inference)
    if grad_hook is not None and not callable(grad_hook):
        raise TypeError("nvswap.torch.offload: grad_hook must be callable, "
                        f"not {type(grad_hook).__name__}")
    _infer.check(inference, memory, persist, grad_hook, dict(
        optimizer_buffer_size=optimizer_buffer_size,
        optimizer_buffer_count=optimizer_buffer_count))
    if memory is not None and max_in_cpu is not None:
        raise ValueError("nvswap.torch.offload: memory= decides what stays "
                         "in CPU memory: give it or max_in_cpu=, not both")
    device = _device(model, device)
    dtype = _mixed.compute_dtype(dtype)
    init = default_init(model, init)
    binding = (_load.prepare(model, weights, dtype) if weights is not None
               else None)
    check_meta(model, init, binding.supplied if binding else ())
    buffer_size = _pool_arg("buffer_size", buffer_size, True)
    buffer_count = _pool_arg("buffer_count", buffer_count, False)
    optimizer_buffer_size = _pool_arg("optimizer_buffer_size",
                                      optimizer_buffer_size, True)
    optimizer_buffer_count = _pool_arg("optimizer_buffer_count",
                                       optimizer_buffer_count, False)
    cfg, raw = _pools.load_config(config)
    served = fixed = None  # served from a training set: its checkpoint
    if _pools.persist_mode(cfg, {"persist": persist,
                                 "inference": inference})[0] != "scratch" \
            and inference:
        served = _pools.served_record(cfg, raw, rank, dict(
            nvme_path=nvme_path, backend=backend))
        _durable.check_dtype(served[1], dtype)
        fixed = record_plan(model, served[1]["layers"])
    # embeddings read by rows: the candidates, unless memory= keeps them
    # resident (whole: any size, the pool never holds them) or layers are
    # kept by hand (max_in_cpu=: each one whole, fitting a buffer), or the
    # layers are a checkpoint's
    whole = rows = _rows.candidates(model, inference, device)
    if max_in_cpu or _pools.raw_key(raw, "zero_optimization",
                                    "offload_param", "max_in_cpu"):
        whole = rows = set()
    if cfg is None and memory is None and buffer_size is None:
        buffer_size = _default_buffer_size(model, dtype, rows)
    deepest = lookahead is None and inference and (
        cfg is None or "lookahead" not in (_pools.raw_key(raw, "nvswap")
                                           or {}))
    if lookahead is None:
        lookahead = (cfg.nvswap_options()["lookahead"]
                     if cfg is not None else 1)
    plan_size = in_cpu = None  # memory=: layers planned for whole modules
    if memory is not None:
        # decoding's walk is fixed: a pool may read up to 2 layers ahead
        # where its buffers stream no more bytes (measured on a virtio
        # disk, 4-6 buffers of an 11 MiB layer beat 2-3 by 3-7 %, but
        # a layer resident saves its read: _infer.fit)
        if deepest:
            lookahead = max(lookahead, 2)
        memory = _size_of(_pool_arg("memory", memory, True))
        plan_size = _size_of(buffer_size if buffer_size is not None else
                             _default_buffer_size(model, dtype, rows))
        plan0 = fixed[0] if fixed else layer_plan(
            model, plan_size, lambda p: _mixed.cast_size(p, dtype), whole)[0]
        sizes = _infer.layer_sizes(plan0,
                                   lambda p: _mixed.cast_size(p, dtype))
        buffer_size, buffer_count, in_cpu, by_rows = _infer.budget(
            memory, sizes, lookahead, buffer_count,
            _size_of(buffer_size) if buffer_size is not None else None,
            {i for i, (_, m, _) in enumerate(plan0) if m in rows})
        rows = {plan0[i][1] for i in by_rows}
        for i, (_, m, chunk) in enumerate(plan0):
            if m in whole and m not in rows and i not in in_cpu:
                # planned whole, but streamed after all (a budget too
                # small to read it by rows): it must fit a buffer
                check_layer_fits(chunk, buffer_size,
                                 lambda p: _mixed.cast_size(p, dtype))
        del plan0
        max_in_cpu = sum(sizes[i] for i in in_cpu)
        streamed = sum(b for i, b in enumerate(sizes)
                       if i not in in_cpu and i not in by_rows)
    if page_cache is None and inference and (cfg is None or (
            raw is not None and "page_cache" not in (
                _pools.raw_key(raw, "nvswap") or {}))):
        # the default of a model served, unless the config may say (an
        # nvswap.Config made from text has no raw keys to tell)
        page_cache = "auto"
    warm = False  # the cache chosen for what a forward streams: warmed
    if page_cache == "auto":
        if memory is None:
            streamed = _infer.streamed_bytes(
                model, lambda p: _mixed.cast_size(p, dtype), rows,
                max_in_cpu)
        page_cache = warm = _infer.cache_fits(streamed, memory or 0)
    _fix_mmap_threshold(malloc_mmap_threshold)
    kw = dict(nvme_path=nvme_path, buffer_size=buffer_size,
              buffer_count=buffer_count, backend=backend,
              optimizer_buffer_size=optimizer_buffer_size,
              optimizer_buffer_count=optimizer_buffer_count,
              persist=persist, dtype=dtype, inference=inference,
              page_cache=page_cache,  # False overrides the config
              checksum=checksum)
    pswap, gswap, rec = _pools.open_pools(cfg, raw, rank, kw, served)
    _pools.warn_memory_fs(pswap)
    try:
        if rec is not None:
            _durable.check_dtype(rec, dtype)
        bs = plan_size or pswap.stats()["buffer_size"]
        plan, tied = fixed or layer_plan(
            model, bs, lambda p: _mixed.cast_size(p, dtype), whole)
        if max_in_cpu is None:
            mic = _pools.raw_key(raw, "zero_optimization",
                                 "offload_param", "max_in_cpu")
            elem = max((p.element_size() for _, _, c in plan for _, p in c),
                       default=1)
            max_in_cpu = int(mic) * elem if mic is not None else 0
        nbuf = pswap.stats()["buffer_count"]
        if deepest:  # a fixed walk: read ahead into every free buffer
            lookahead = max(1, nbuf - 1)
        params = nvswap.ParamSwapper(pswap, lookahead=lookahead,
                                     max_in_cpu=max_in_cpu)
        oo = (cfg.offload("optimizer") if cfg is not None else {})
        eng = Engine(pswap, params, gswap, {
            "rank": rank,
            # pipeline_write: None when the config leaves it unset (the
            # optimizer then picks: behind for a deferred step)
            "optimizer": {"pipeline_read": bool(oo.get("pipeline_read")),
                          "pipeline_write": None if _pools.raw_key(
                              raw, "zero_optimization", "offload_optimizer",
                              "pipeline_write") is None
                          else bool(oo.get("pipeline_write"))}},
            device=device, dtype=dtype)
        if rec is not None and eng.masters is not None:
            # masters in parts are laid out as saved (a record before
            # parts: every layer's whole)
            eng.masters.saved = rec.get("master_parts", {})
        eng.grad_hook = grad_hook
        eng.persistent = _pools.persist_mode(cfg, kw)[0] != "scratch"
        eng.lookahead = lookahead
        eng.in_cpu = in_cpu
        eng.max_in_cpu = max_in_cpu
        if served is not None:
            # a persistent set keeps nothing in C's CPU memory (a
            # checkpoint would not see it): the layers to keep resident
            # are read out of it at bind, any size (_infer._copy_layer),
            # in add order up to max_in_cpu as the C budget would
            eng.read_only = True
            eng.copy_in_cpu = in_cpu if in_cpu is not None else \
                _infer.first_fit(plan, max_in_cpu,
                                 lambda p: _mixed.cast_size(p, dtype))
        eng.backend = backend
        eng.page_cache = page_cache if page_cache is not None else (
            cfg is not None and cfg.nvswap_options()["page_cache"])
        eng.by_rows = {c[0][0] for _, m, c in plan if m in rows}
        if served is not None:
            _check_streamed_fit(eng, plan, dtype)
        if deepest and device is None and gswap is None and nbuf > 2:
            # the depth from measured times (_depth.py)
            eng.tuner = _depth.Tuner(eng, nbuf, lookahead)
    except BaseException:
        if gswap is not None:
            gswap.close()
        pswap.close()
        raise
    loader = None
    given = meta_tensors(model)  # put back if the offload fails
    try:
        layer_of, renamed = {}, {}
        if binding is not None:  # the checkpoint resumed wins over weights
            loader = _load.Loader(eng, binding, init, device, renamed,
                                  rec is None)
            loader.buffers(model, plan)
        else:
            materialize_buffers(model, init, device)
        own = {}  # module -> its parameters, over all its layers
        for _, m, chunk in plan:
            own.setdefault(m, []).extend(chunk)
        for mname, m, chunk in plan:
            if loader is not None:
                layer, chunk = loader.add(mname, m, chunk)
            else:
                if m in own:  # the whole module at once, init called once
                    materialize(mname, m, own.pop(m), init, renamed, device)
                chunk = [(n, renamed.get(id(p), p)) for n, p in chunk]
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
        if loader is not None:
            loader.finish()
        _mixed.cast_buffers(model, dtype)
        if rec is not None:
            _durable.check_layers(eng, rec)
            _durable.restore_engine(eng, rec)
            eng.resume_record = rec
            eng.ckpt_seq = rec["seq"]
            eng.resumed = {"tag": rec["tag"], "steps": rec["steps"],
                           "generations": rec["generations"]}
        _infer.bind(eng)
    except BaseException:
        if loader is not None:
            loader.abort()  # the model as given, nothing read back
        _undo(model, eng, set(map(id, renamed.values())))
        for d, name, t in given:  # what was on the meta device, as given
            d[name] = t
        raise
    _install(model, eng)
    _clip.route_torch()
    if activations is not None:
        _activations_to(eng, model, activations)
    if loader is not None and eng.in_place:
        if warm:
            # the bytes read in place, into the page cache behind the
            # first forward (_warm.warm_cache)
            eng.warming = warm_cache(loader.extents)
        elif not eng.page_cache:  # O_DIRECT asked: the files that refuse it
            _pools.warn_buffered_weights(pswap, loader.paths.values())
    if not eng.persistent:
        eng.pid = os.getpid()
        _SCRATCH.add(eng)
    return model


def _check_activations(activations, inference):
    """offload()'s activations=: None, "nvme" or an ActivationStore;
    not with inference=True (nothing is saved for a backward)."""
    if activations is None:
        return
    if activations != "nvme" and \
            not isinstance(activations, _activations.ActivationStore):
        if isinstance(activations, str):
            raise ValueError(f"nvswap.torch.offload: activations="
                             f"{activations!r}: 'nvme' or None")
        raise TypeError("nvswap.torch.offload: activations must be "
                        "'nvme', None or a store made by "
                        "nvswap.torch.save_on_nvme(), not "
                        f"{type(activations).__name__}")
    if inference:
        raise ValueError("nvswap.torch.offload: activations= is for "
                         "training: inference=True saves nothing for a "
                         "backward")


def _activations_to(eng, model, activations):
    """The engine's store of saved activations: the one given, or one
    made beside the parameter pool's swap directory
    (<nvme_path>/nvswap/param/rank<r> -> <nvme_path>, rank r). A store
    that cannot be made undoes the offload."""
    if activations != "nvme":
        eng.act = activations
        return
    rank_dir = eng.pswap.dirs[0]
    base = os.path.dirname(os.path.dirname(os.path.dirname(rank_dir)))
    rank = int(os.path.basename(rank_dir)[len("rank"):])
    try:
        eng.act = _activations.ActivationStore(
            base, memory=_activations.MEMORY,
            buffer_size=_activations.BUFFER,
            threshold=_activations.THRESHOLD, rank=rank)
    except BaseException:
        restore(model)
        raise
    eng.act_owned = True


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


def _undo(model, eng, from_meta=()):
    """A failed offload: parameters already written are read back (those
    materialized from the meta device, ids in from_meta, are not: their
    meta parameters are put back)."""
    for layer, ps in enumerate(eng.layers):
        if all(id(p) in from_meta for p in ps):
            for p in ps:
                del p._nvswap
            continue
        try:
            data = eng.read_layer(layer)
            if eng.masters is not None:  # the fp32 values given
                for i, t in eng.masters.read(layer).items():
                    data[i] = t
        except nvswap.Error:
            data = [torch.zeros(p.shape, dtype=p.dtype) for p in ps]
        for p, d in zip(ps, data):
            p.data = d if eng.device is None else d.to(eng.device)
            del p._nvswap
    _rows.unbind(eng)
    try:
        eng.close(save=False)
    except nvswap.Error:
        pass


def _install(model, eng):
    hooked = set(eng.mod_layers) | {model}
    for m in hooked:
        if any(getattr(p, "_nvswap", None) is not None and
               p._nvswap.layer not in eng.bound
               for p in m._parameters.values()):
            m._parameters = ParamDict(m._parameters)
        if m in eng.fwd_layers or m is model:
            eng.handles.append(m.register_forward_pre_hook(eng.pre_forward))
            if _ALWAYS_CALL:
                eng.handles.append(m.register_forward_hook(
                    eng.post_forward, always_call=True))
            else:
                eng.handles.append(m.register_forward_hook(
                    eng.post_forward))
        if m in eng.mod_layers:
            sd = _statedict
            eng.handles.append(m._register_state_dict_hook(
                sd.state_dict_hook))
            eng.handles.append(m._register_load_state_dict_pre_hook(
                sd.load_pre_hook, with_module=True))
            eng.handles.append(m.register_load_state_dict_post_hook(
                sd.load_post_hook))
    for ps in eng.layers:
        for p in ps:
            if p.requires_grad and eng.gswap is None:
                _infer.refuse_grads(eng, p)
            elif p.requires_grad:
                eng.hook_grads(p)
    # torch < 2.1 has no always-called forward hooks, and torch >= 2.1
    # skips them for a KeyboardInterrupt (or another BaseException that
    # is not an Exception): the top-level forward lets go of what a
    # forward that raised left held
    forward = model.forward

    @functools.wraps(forward)  # its signature: the Trainer reads it
    def unwinding_forward(*args, **kwargs):
        try:
            return forward(*args, **kwargs)
        except BaseException as e:
            # activations=: a failed save, torch < 2's RuntimeError
            failed = eng.act._unwrapped(e) if eng.act is not None else None
            eng.unwind()
            if failed is not None:
                raise failed from e
            raise

    model.forward = unwinding_forward
    model.zero_grad = lambda set_to_none=True: eng.zero_grads()
    model._nvswap_engine = eng


def restore(model):
    """Undo offload(): every parameter back in ordinary memory, hooks
    removed, swap files deleted (a persistent set's are kept, with a last
    checkpoint "close" when it changed since the last one). The optimizer
    made on it is closed.

    A layer that cannot be read (EIO, a checksum mismatch) raises its
    nvswap.Error, naming it. A persistent set is closed first, every
    other layer restored (its files are kept whatever happens; the
    layer's parameters are left as placeholders: NaN of their shape,
    writable, zeros for an integer dtype);
    a scratch one stays offloaded so that restore() can be tried again,
    its swap files holding the only copy. A layer read in place whose
    weights file changed or went (ESTALE) cannot come back by trying
    again: as for a persistent set, every other layer is restored, that
    one's parameters left as placeholders, and its error raised.

    Refused (nvswap.Error EBUSY, nothing changed) while an optimizer
    step is half done (a step() that raised): the model would hold part
    of a step; call step() again first.

    A persistent set's "close" checkpoint is taken first: when it fails
    (ENOSPC), its nvswap.Error is raised with the model still offloaded
    and nothing lost; restore() again, once there is room, takes it."""
    eng = engine_of(model)
    if eng.optimizer is not None:
        eng.optimizer.settled("nvswap.torch.restore()")
    eng.checkpoint_close()
    failed = None
    for layer, ps in enumerate(eng.layers):
        try:
            data = eng.read_layer(layer)
        except nvswap.Error as e:
            lost = e.errno == errno.ESTALE and layer in eng.in_place
            if not (eng.persistent or lost):
                if failed is not None:
                    raise e from failed
                raise
            failed = failed or e
            # a placeholder of its own (writable: load_state_dict works)
            data = [torch.full(p.shape, float("nan"), dtype=p.dtype)
                    if p.dtype.is_floating_point or p.dtype.is_complex
                    else torch.zeros(p.shape, dtype=p.dtype) for p in ps]
        for p, d in zip(ps, data):
            p.data = d if eng.device is None else d.to(eng.device)
    for p in [p for ps in eng.layers for p in ps]:
        del p._nvswap
    for m in model.modules():
        if isinstance(m._parameters, ParamDict):
            m._parameters = _PLAIN_DICT(m._parameters)
    for name in ("zero_grad", "forward", "_nvswap_engine"):
        model.__dict__.pop(name, None)
    _rows.unbind(eng)
    try:
        eng.close()
    except nvswap.Error:
        # the unreadable layer's read ahead, its failure kept until now
        # by the C library: the one already named
        if failed is None:
            raise
    if failed is not None:
        raise failed
    return model
