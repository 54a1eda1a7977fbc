# SPDX-License-Identifier: MIT
"""The layer plan of a model (each module's own parameters, packed into
pool-buffer-sized layers, in named_modules() order) and the
materialization of parameters built on the meta device."""
import torch

from ._engine import check_layer_fits


def _own(mname, m, seen, tied):
    """[(qualified name, param)] of m's parameters not seen before (ids
    in seen, added to it); those seen are tied uses, added to tied."""
    own = []
    for pname, p in m._parameters.items():
        if p is None:
            continue
        if id(p) in seen:
            tied.append((m, pname, p))
            continue
        seen.add(id(p))
        own.append((f"{mname}.{pname}" if mname else pname, p))
    return own


def layer_plan(model, buffer_size, size_of=None, whole=()):
    """[(owner name, owner module, [(qualified name, param)])] in
    named_modules order, each fitting a pool buffer (size_of(p): its
    bytes there), but the modules in whole: their parameters one layer
    of any size (an embedding read by rows, _rows.py); and the tied uses
    [(module, attribute, param)]. Raises before anything is written."""
    plan, tied, seen = [], [], set()
    for mname, m in model.named_modules():
        own = _own(mname, m, seen, tied)
        if m in whole and own:
            plan.append((mname, m, own))
            continue
        for chunk in check_layer_fits(own, buffer_size,
                                      *([size_of] if size_of else [])):
            plan.append((mname, m, chunk))
    return plan, tied


def record_plan(model, layers):
    """layer_plan()'s answer for a model served from a checkpoint: its
    layers as the record lists them (each [qualified name...] of one
    module's parameters, in named_modules order), whatever the buffer
    size now. Raises ValueError naming the first layer that differs."""
    plan, tied, seen, k = [], [], set(), 0
    for mname, m in model.named_modules():
        own = _own(mname, m, seen, tied)
        while own:
            names = layers[k] if k < len(layers) else []
            chunk = own[:max(len(names), 1)]
            if [n for n, _ in chunk] != names:
                raise ValueError(
                    "nvswap.torch: serving a model whose layer "
                    f"{k} holds {[n for n, _ in own[:len(names) or None]]}"
                    + (f", saved as {names}" if names else
                       f": the checkpoint has {len(layers)} layers"))
            plan.append((mname, m, chunk))
            own, k = own[len(chunk):], k + 1
    if k != len(layers):
        raise ValueError(f"nvswap.torch: serving a model of {k} layers, "
                         f"saved with {len(layers)}")
    return plan, tied


def default_init(model, init):
    """init= as given; for a Hugging Face model (a config and an
    _init_weights method), its _init_weights, which initializes the
    modules torch has no reset_parameters() for (RMSNorm, rotary
    embeddings) as from_config() would."""
    if init is not None:
        if not callable(init):
            raise TypeError("nvswap.torch.offload: init must be callable "
                            f"(init(module)), not {type(init).__name__}")
        return init
    hf = getattr(model, "_init_weights", None)
    if callable(hf) and hasattr(model, "config"):
        return hf
    return None


def _resetter(module, init):
    if init is not None:
        return init
    for name in ("reset_parameters", "_reset_parameters"):
        fn = getattr(module, name, None)
        if callable(fn):
            return lambda m, fn=fn: fn()
    return None


def _meta_buffers(module):
    return [n for n, b in module._buffers.items()
            if b is not None and b.is_meta]


def check_meta(model, init, supplied=()):
    """Refuse, before anything is written, a model with tensors on the
    meta device that nothing can initialize: parameters or buffers of a
    module without reset_parameters() when no init= is given, except the
    ones whose ids are in supplied (weights= gives them). Names each
    one."""
    missing = []
    for mname, m in model.named_modules():
        own = [n for n, p in m._parameters.items()
               if p is not None and p.is_meta and id(p) not in supplied]
        own += [n for n in _meta_buffers(m)
                if id(m._buffers[n]) not in supplied]
        if own and _resetter(m, init) is None:
            missing += [f"{mname}.{n}" if mname else n for n in own]
    if missing:
        raise ValueError("nvswap.torch.offload: on the meta device with "
                         "nothing to initialize them (no "
                         "reset_parameters(), no init=): "
                         f"{', '.join(missing)}; pass init= (a Hugging "
                         "Face model's _init_weights, say), or give them "
                         "values first")


def meta_tensors(model):
    """[(the dict holding it, name, tensor)] of every parameter and buffer
    on the meta device: what a failed offload() puts back."""
    out = []
    for m in model.modules():
        for d in (m._parameters, m._buffers):
            out += [(d, n, t) for n, t in d.items()
                    if t is not None and t.is_meta]
    return out


def _fill_buffers(module, device):
    """The module's meta buffers as CPU tensors: floating ones NaN, so
    that one its initialization leaves alone shows; others zeros."""
    names = _meta_buffers(module)
    for n in names:
        b = module._buffers[n]
        t = torch.zeros(b.shape, dtype=b.dtype)
        if t.is_floating_point():
            t.fill_(float("nan"))
        module._buffers[n] = t
    return names


def _check_filled(module, mname, names, device):
    bad = [n for n in names if module._buffers[n].is_floating_point() and
           module._buffers[n].isnan().any()]
    if bad:
        raise ValueError(
            "nvswap.torch.offload: the initialization of "
            f"{type(module).__name__} left buffer(s) "
            f"{', '.join(f'{mname}.{n}' if mname else n for n in bad)} "
            "unset (they were on the meta device): pass an init= that "
            "sets them")
    if device is not None:
        for n in names:
            module._buffers[n] = module._buffers[n].to(device)


def materialize_buffers(model, init, device=None):
    """Modules without parameters of their own whose buffers are on the
    meta device (non-persistent ones such as a rotary embedding's
    inv_freq): the buffers become CPU tensors (or on device) set by
    init(module) or the module's reset_parameters()."""
    for mname, m in model.named_modules():
        if any(p is not None for p in m._parameters.values()):
            continue  # materialize() does them with the parameters
        names = _fill_buffers(m, device)
        if names:
            _resetter(m, init)(m)
            _check_filled(m, mname, names, device)


def materialize(mname, module, items, init, renamed, device=None):
    """A module's parameters on the meta device (items: [(qualified name,
    param)], all of the module's own) become CPU parameters (new objects,
    put in the module; renamed maps the old ones' ids to them), and its
    meta buffers CPU buffers (or on device), all initialized by one call
    of init(module) or the module's reset_parameters(). Returns items
    with the new parameters."""
    names = _fill_buffers(module, device)
    if not names and not any(p.is_meta for _, p in items):
        return items
    out = []
    for name, p in items:
        if p.is_meta:
            q = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype),
                                   requires_grad=p.requires_grad)
            module._parameters[name.rpartition(".")[2]] = q
            renamed[id(p)] = q
            p = q
        out.append((name, p))
    _resetter(module, init)(module)
    _check_filled(module, mname, names, device)
    return out
