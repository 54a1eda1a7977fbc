# SPDX-License-Identifier: MIT
"""State-dict hooks of offloaded modules: state_dict() reads the offloaded
entries back from NVMe, load_state_dict() writes through to NVMe (and,
with fp32 masters, into the masters in full precision)."""
from ._engine import engine_of


def _owned(module):
    return [(n, p) for n, p in module._parameters.items()
            if getattr(p, "_nvswap", None) is not None]


def state_dict_hook(module, sd, prefix, meta):
    """The module's offloaded entries become copies read back from NVMe,
    one acquire per layer."""
    want = {}  # layer -> [(key, index)]
    for name, p in _owned(module):
        if prefix + name in sd:
            want.setdefault(p._nvswap.layer, []).append(
                (prefix + name, p._nvswap.index))
    if want:
        eng = _module_engine(module)
        if eng.optimizer is not None:  # it would save part of a step
            eng.optimizer.settled("state_dict()")
        for layer, entries in want.items():
            data = eng.read_layer(layer, [i for _, i in entries])
            for (key, _), t in zip(entries, data):
                sd[key] = t if eng.device is None else t.to(eng.device)


def _module_engine(module):
    for p in module._parameters.values():
        if getattr(p, "_nvswap", None) is not None:
            return p._nvswap.engine
    return engine_of(module)


def load_pre_hook(module, sd, prefix, meta, strict, missing, unexpected,
                   errs):
    eng = _module_engine(module)
    if eng.mod_layers.get(module):
        eng.refuse_writes("load_state_dict()")
    held = []
    try:
        for layer in eng.mod_layers.get(module, ()):
            eng.acquire(layer)
            held.append(layer)
    except BaseException:
        for layer in held:
            eng.release(layer)
        raise
    # With fp32 masters: what the state dict gives, in full precision,
    # becomes the masters after the load (the layers get it rounded).
    given = {}
    for name, p in _owned(module):
        t = sd.get(prefix + name)
        if eng.masters is not None and t is not None and \
                hasattr(t, "shape") and tuple(t.shape) == tuple(p.shape):
            given.setdefault(p._nvswap.layer, {})[p._nvswap.index] = t
    module._nvswap_loading = (held, given)


def load_post_hook(module, incompatible):
    held, given = module.__dict__.pop("_nvswap_loading", ([], {}))
    eng = _module_engine(module)
    try:
        for layer, values in given.items():
            eng.refresh_masters(layer, values)
    finally:
        for layer in reversed(held):
            eng.release(layer, True)  # written through to NVMe
