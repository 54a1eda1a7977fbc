# SPDX-License-Identifier: MIT
"""The layer plan of a model (each module's own parameters, packed into
pool-buffer-sized layers, in named_modules() order) and the
materialization of parameters built on the meta device."""
import torch

from ._engine import check_layer_fits


def layer_plan(model, buffer_size):
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


def materialize(module, chunk, init, renamed):
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
