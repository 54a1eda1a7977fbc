# SPDX-License-Identifier: MIT
"""state_dict() and load_state_dict() of nvswap.torch.Adam / AdamW.

state_dict() reads each layer's state group (and fp32 masters) with
Swapper.read: copies, no pool buffer, nothing written, so it works on a
full disk. load_state_dict() maps the saved entries to parameters as
torch does (through the saved groups' "params" lists), checks and
converts every value first, and only then writes: a refused state dict
changes nothing.
"""
import torch

from . import _parts
from ._mixed import check_masters, load_masters, master_state, to_state

# the state tensors torch's Adam and AdamW keep per parameter (amsgrad
# adds max_exp_avg_sq), beside the scalar "step"
_TENSORS = ("exp_avg", "exp_avg_sq")


def state_dict(opt):
    eng = opt._eng
    index = opt._index()
    groups, i = [], 0
    for group in opt.param_groups:
        packed = {k: v for k, v in group.items() if k != "params"}
        packed["params"] = list(range(i, i + len(group["params"])))
        i += len(group["params"])
        groups.append(packed)
    found = {}
    for layer in opt._keys:
        ps = eng.layers[layer]
        for (pi, k), t in _parts.read(opt, layer).items():
            found.setdefault(ps[pi], {})[k] = t
    state = {}
    for p, tens in found.items():
        st = {}
        for k in opt._key_order[p]:
            v = tens[k] if k in tens else opt._scalars[p][k]
            st[k] = v.clone() if torch.is_tensor(v) and k not in tens else v
        state[index[p]] = st
    out = {"state": {k: state[k] for k in sorted(state)},
           "param_groups": groups}
    if eng.masters is not None:
        out["master"] = master_state(eng, index)
    return out


def _resolve(opt, sd):
    """{saved key: parameter} through the saved groups' "params" lists
    (torch's id_map), after checking the layout; ValueError naming what
    differs."""
    cls = f"nvswap.torch.{type(opt).__name__}.load_state_dict"
    if not isinstance(sd, dict) or not isinstance(
            sd.get("param_groups"), (list, tuple)) or not isinstance(
            sd.get("state"), dict):
        raise ValueError(f"{cls}: a state dict is a dict with 'state' (a "
                         "dict) and 'param_groups' (a list), as "
                         "state_dict() returns")
    groups = sd["param_groups"]
    if len(groups) != len(opt.param_groups) or any(
            not isinstance(a, dict) or
            not isinstance(a.get("params"), (list, tuple)) or
            len(a["params"]) != len(b["params"])
            for a, b in zip(groups, opt.param_groups)):
        raise ValueError("loaded state dict has a different number of "
                         "parameter groups or parameters")
    keys = [k for g in groups for k in g["params"]]
    params = [p for g in opt.param_groups for p in g["params"]]
    try:
        id_map = dict(zip(keys, params))
    except TypeError:
        raise ValueError(f"{cls}: the saved groups' 'params' hold "
                         "something unhashable (they list the state's "
                         "keys)") from None
    if len(id_map) != len(keys):
        raise ValueError(f"{cls}: the saved groups' 'params' list a key "
                         "twice")
    if not isinstance(sd.get("master", {}), (dict, type(None))):
        raise ValueError("loaded state dict's 'master' is a "
                         f"{type(sd['master']).__name__}, not a dict")
    for where in ("state", "master"):
        for k in (sd.get(where) or {}):
            if k not in id_map:
                raise ValueError(
                    f"{cls}: '{where}' has an entry {k!r} that no saved "
                    f"parameter group lists (their 'params': {keys[:8]}"
                    f"{'...' if len(keys) > 8 else ''}): each key must be "
                    "one of those")
    return id_map


def _parse_layer(opt, layer, entries, amsgrad):
    """(state tensors by (index, key), their keys in slot order,
    scalars, key order) of a layer's loaded state, converted; ValueError
    naming the parameter and key for a value that cannot be its state.
    amsgrad: {parameter: its group's amsgrad}."""
    values, scalars, order = {}, {}, {}
    for key, p, st in entries:
        name = p._nvswap.name
        if not isinstance(st, dict):
            raise ValueError(f"loaded state {key!r} ('{name}') is a "
                             f"{type(st).__name__}, not a dict")
        need = ("step",) + _TENSORS + (("max_exp_avg_sq",)
                                       if amsgrad[p] else ())
        miss = [k for k in need if k not in st]
        if miss:
            raise ValueError(f"loaded state {key!r} ('{name}') lacks "
                             f"{miss}: {type(opt).__name__} keeps "
                             f"{list(need)}")
        order[p] = list(st)
        scalars[p] = {}
        for k, v in st.items():
            what = f"loaded state {key!r} ('{name}') {k!r}"
            big = torch.is_tensor(v) and v.numel() > 1
            if k in need[1:] or (big and k != "step"):
                if not torch.is_tensor(v) or v.shape != p.shape:
                    got = (f"has shape {tuple(v.shape)}" if torch.is_tensor(v)
                           else f"is a {type(v).__name__}")
                    raise ValueError(f"{what} {got}: it must be a tensor "
                                     f"of the parameter's shape "
                                     f"{tuple(p.shape)}")
                values[(p._nvswap.index, k)] = to_state(
                    v, opt._state_dtype(p), what)
            elif k == "step" and not (
                    isinstance(v, (int, float)) and not isinstance(v, bool)
                    or torch.is_tensor(v) and v.numel() == 1
                    and not v.is_meta):
                raise ValueError(f"{what} is {v!r}: a step count (a number "
                                 "or a one-element tensor)")
            elif k == "step" and not torch.is_tensor(v):
                # a number (an older torch's, a converted checkpoint's):
                # a tensor, as torch's Adam.__setstate__ makes it
                scalars[p][k] = torch.tensor(float(v), dtype=torch.float32)
            else:
                scalars[p][k] = v.clone() if torch.is_tensor(v) else v
    if layer in opt._keys:
        keys = opt._keys[layer]
        if set(keys) != set(values):
            raise ValueError(f"loaded state of layer {layer} has "
                             f"tensors {sorted(values)}, the optimizer "
                             f"{sorted(keys)}")
    else:
        keys = sorted(values)
    return values, keys, scalars, order


def _load_layer(opt, layer, values, keys, scalars, order):
    if layer in opt._keys:
        _parts.write(opt, layer, values)
    else:
        _parts.add(opt, layer, keys, values)
    opt._scalars.update(scalars)
    opt._key_order.update(order)


def load_state_dict(opt, sd):
    id_map = _resolve(opt, sd)
    per_layer = {}
    for key, st in sd["state"].items():
        p = id_map[key]
        per_layer.setdefault(p._nvswap.layer, []).append((key, p, st))
    # Everything checked and converted before anything is written.
    amsgrad = {p: bool(saved.get("amsgrad", g.get("amsgrad")))
               for g, saved in zip(opt.param_groups, sd["param_groups"])
               for p in g["params"]}
    parsed = {layer: _parse_layer(opt, layer, entries, amsgrad)
              for layer, entries in per_layer.items()}
    masters = sd.get("master")
    if masters is not None:
        masters = check_masters(opt._eng, [(k, id_map[k], t)
                                           for k, t in masters.items()])
    # amsgrad's third state tensor must fit a pool buffer too
    opt._check_fit(opt._eng, opt._where, any(amsgrad.values()))
    # The writes: a failure part way (a full disk) leaves the optimizer
    # refusing everything but another load (opt._loading), and the sets
    # making no checkpoint of what it wrote (a step open).
    eng = opt._eng
    eng.step_begin("nvswap.torch load_state_dict()")
    opt._loading = True
    try:
        if masters is not None:
            load_masters(eng, masters)
        for layer, parts in parsed.items():
            _load_layer(opt, layer, *parts)
    except BaseException as e:
        opt._failure = f"{type(e).__name__}: {e}"
        raise
    for g, saved in zip(opt.param_groups, sd["param_groups"]):
        g.update({k: v for k, v in saved.items() if k != "params"})
    opt._loading, opt._failure = False, None
    eng.step_end()
