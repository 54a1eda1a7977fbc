# SPDX-License-Identifier: MIT
"""Gradient clipping of offloaded parameters: nvt.clip_grad_norm_ and
nvt.clip_grad_value_, with torch's signatures and results.

An offloaded parameter's gradient is on NVMe, not in p.grad. Its norm is
taken in backward when the gradient is complete (and again after each
write-behind of an accumulated one: _grads.py), so the global norm costs
no read of the gradients; the clip itself is deferred to the optimizer
step, which applies it to each gradient before the update, so clipping
costs no pass over NVMe either. The arithmetic is torch's own, in torch's
order (per-tensor norms, grouped by device and dtype as torch groups
them, then the norm of their stack), so the total norm and the clipped
update are bit for bit those of torch.nn.utils.clip_grad_norm_ on the
same gradients in memory.

torch.nn.utils.clip_grad_norm_, clip_grad_value_ and (torch >= 2.6)
clip_grads_with_norm_ are routed here when they are given offloaded
parameters (offload() installs the routing; parameters in memory go to
torch's own functions as before), so the Hugging Face Trainer and
accelerate clip offloaded models correctly. torch.nn.utils.get_total_norm
takes gradients, not parameters, and cannot see those on NVMe.
"""
import inspect
import math
import types

import torch


_CLIP = torch.nn.utils.clip_grad
try:
    from torch.utils._foreach_utils import (_device_has_foreach_support,
                                            _group_tensors_by_device_and_dtype,
                                            _has_foreach_support)
except ImportError:  # torch 1.x: no grouping, torch.norm per gradient
    _group_tensors_by_device_and_dtype = None
# torch >= 2 groups gradients by device and dtype (and may use foreach
# kernels); torch 1.x takes them in order.
MODERN = (_group_tensors_by_device_and_dtype is not None and
          hasattr(_CLIP, "_group_tensors_by_device_and_dtype"))

_NONFINITE = ("The total norm of order {} for gradients from `parameters` "
              "is non-finite, so it cannot be clipped. To disable this "
              "error and scale the gradients by the non-finite norm "
              "anyway, set `error_if_nonfinite=False`")


def tensor_norm(g, norm_type, kind):
    """One gradient's norm as torch's clip_grad_norm_ takes it: kind
    'foreach' (torch._foreach_norm) or 'vector' (linalg.vector_norm); on
    torch 1.x torch.norm, or abs().max() for inf."""
    if not MODERN:
        if norm_type == math.inf:
            return g.detach().abs().max()
        return torch.norm(g.detach(), norm_type)
    if kind == "foreach":
        return torch._foreach_norm([g], norm_type)[0]
    return torch.linalg.vector_norm(g, norm_type)


def _params(parameters):
    if isinstance(parameters, torch.Tensor):
        return [parameters], False
    is_gen = isinstance(parameters, types.GeneratorType)
    return list(parameters), is_gen


def _offloaded(params):
    return any(getattr(p, "_nvswap", None) is not None for p in params)


def _gradients(params, what):
    """[(param, engine or None)] of the parameters that have a gradient,
    in order; each engine's gradients written (drained) first."""
    out, engines = [], []
    for p in params:
        rec = getattr(p, "_nvswap", None)
        if rec is None:
            if p.grad is not None:
                out.append((p, None))
            continue
        eng = rec.engine
        if eng.closed:
            raise ValueError(f"nvswap.torch.{what}: a parameter of a model "
                             "whose offload was closed (restore())")
        opt = eng.optimizer
        if opt is not None and not opt._closed and opt.step_in_backward:
            raise ValueError(
                f"nvswap.torch.{what}: the model's optimizer steps each "
                "layer in backward (step_in_backward=True), before the "
                "global gradient norm can be known: clipping needs the "
                "default step mode")
        if eng not in engines:
            engines.append(eng)
            eng.settle()  # a deferred step took the clips before this
            eng.drain()
        if eng.has_grad(rec.layer, rec.index):
            out.append((p, eng))
    return out


def _kinds(grads, foreach):
    """[(indexes in grads, kind)] in torch's grouping order."""
    if not MODERN:
        return [(list(range(len(grads))), "vector")]
    proxies = [p.grad if eng is None else
               torch.empty(0, dtype=p.dtype, device=eng.grad_device())
               for p, eng in grads]
    out = []
    grouped = _group_tensors_by_device_and_dtype([proxies], with_indices=True)
    for (device, _), ([tensors], idx) in grouped.items():
        if ((foreach is None and _has_foreach_support(tensors, device)) or
                (foreach and _device_has_foreach_support(device))):
            kind = "foreach"
        elif foreach:
            raise RuntimeError("foreach=True was passed, but can't use the "
                               f"foreach API on {device.type} tensors")
        else:
            kind = "vector"
        if device.type == "cpu":
            kind = "vector"  # on the CPU the same kernel, bit for bit
        out.append((list(idx), kind))
    return out


def _norms(grads, norm_type, kinds):
    """Each gradient's norm, in torch's order (a list of 0-dim tensors)."""
    want = {}  # engine -> {kind: [(layer, index)]}
    for idx, kind in kinds:
        for j in idx:
            p, eng = grads[j]
            if eng is not None:
                want.setdefault(eng, {}).setdefault(kind, []).append(
                    (p._nvswap.layer, p._nvswap.index))
    got = {}
    for eng, per_kind in want.items():
        for kind, keys in per_kind.items():
            got.update({(id(eng),) + k: v for k, v in
                        eng.grad_norms(keys, norm_type, kind).items()})
    out = []
    for idx, kind in kinds:
        for j in idx:
            p, eng = grads[j]
            if eng is None:
                out.append(tensor_norm(p.grad, norm_type, kind))
            else:
                rec = p._nvswap
                out.append(got[(id(eng), rec.layer, rec.index)])
    return out


def _total(norms, norm_type, device):
    if MODERN:
        return torch.linalg.vector_norm(
            torch.stack([n.to(device) for n in norms]), norm_type)
    norms = [n.to(device) for n in norms]
    if norm_type == math.inf:
        return norms[0] if len(norms) == 1 else torch.max(torch.stack(norms))
    return torch.norm(torch.stack(norms), norm_type)


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm, norm_type=2.0,
                    error_if_nonfinite=False, foreach=None):
    """torch.nn.utils.clip_grad_norm_ for offloaded parameters (and any in
    memory given with them): returns the total norm of the gradients
    before clipping, as torch does, and clips them by
    min(max_norm / (total + 1e-6), 1): in memory at once, on NVMe inside
    the next optimizer step, before the update (p.grad stays None).

    norm_type: any p-norm torch takes (2.0, 1.0, inf...). The 2-norm (or
    the one used before) of each gradient is taken in backward; another
    one the first time reads the gradients back once and is then taken in
    backward too. Raises RuntimeError (torch's text) when the total is
    not finite and error_if_nonfinite is set (nothing clipped or
    changed), ValueError for a model stepped in backward
    (step_in_backward: the global norm comes too late), and the
    gradient write-behind's nvswap.Error."""
    params, _ = _params(parameters)
    max_norm, norm_type = float(max_norm), float(norm_type)
    grads = _gradients(params, "clip_grad_norm_")
    if not grads:
        return torch.tensor(0.0)
    first = (grads[0][0].grad.device if grads[0][1] is None
             else grads[0][1].grad_device())
    norms = _norms(grads, norm_type, _kinds(grads, foreach))
    total = _total(norms, norm_type, first)
    if error_if_nonfinite and torch.logical_or(total.isnan(), total.isinf()):
        raise RuntimeError(_NONFINITE.format(norm_type))
    _scale(grads, max_norm, total)
    return total


@torch.no_grad()
def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """torch.nn.utils.clip_grads_with_norm_ (torch >= 2.6) for offloaded
    parameters: the gradients scaled by min(max_norm / (total_norm +
    1e-6), 1), those on NVMe inside the next optimizer step. total_norm
    is the caller's (torch.nn.utils.get_total_norm takes gradients, which
    offloaded parameters do not have in p.grad: use clip_grad_norm_)."""
    params, _ = _params(parameters)
    _scale(_gradients(params, "clip_grads_with_norm_"), max_norm, total_norm)


@torch.no_grad()
def clip_grad_value_(parameters, clip_value, foreach=None):
    """torch.nn.utils.clip_grad_value_ for offloaded parameters: every
    gradient clamped to [-clip_value, clip_value] (those on NVMe inside
    the next optimizer step, before the update)."""
    params, _ = _params(parameters)
    grads = _gradients(params, "clip_grad_value_")
    _apply(grads, ("clamp", float(clip_value)))


def _scale(grads, max_norm, total):
    """torch's clip: each gradient times min(max_norm / (total + 1e-6),
    1)."""
    if grads:
        coef = torch.clamp(float(max_norm) / (total + 1e-6), max=1.0)
        _apply(grads, ("mul", coef))


def _apply(grads, op):
    per_engine = {}
    for p, eng in grads:
        if eng is None:
            g = p.grad.detach()
            if op[0] == "mul":
                g.mul_(op[1].to(g.device))
            else:
                g.clamp_(min=-op[1], max=op[1])
        else:
            per_engine.setdefault(eng, []).append(
                (p._nvswap.layer, p._nvswap.index))
    for eng, keys in per_engine.items():
        eng.defer_grad_op(keys, op)


def apply_op(g, op):
    """A deferred clip applied to gradient g (a new tensor: g may be the
    gradient pool's buffer while it is being written)."""
    if op[0] == "mul":
        return g * op[1].to(g.device)
    return g.clamp(min=-op[1], max=op[1])


_ORIGINAL = {}


def _router(name, ours, original):
    def route(*args, **kwargs):
        if args:
            params, is_gen = _params(args[0])
            args = (params,) + args[1:]
        else:
            params, is_gen = _params(kwargs.get("parameters", ()))
            kwargs["parameters"] = params
        if _offloaded(params):
            return ours(*args, **kwargs)
        if is_gen:  # torch warns about an empty generator
            args = ((p for p in params),) + args[1:] if args else args
            if "parameters" in kwargs:
                kwargs["parameters"] = (p for p in params)
        return original(*args, **kwargs)

    route.__name__ = route.__qualname__ = name
    return route


def route_torch():
    """torch.nn.utils.clip_grad_norm_ / clip_grad_value_ given offloaded
    parameters call nvswap's (never a silent 0 from gradients that are not
    in p.grad); other calls run torch's own, unchanged.

    The function objects themselves are redirected (their code becomes a
    call of the router, which runs a copy of torch's original), so a
    reference taken before (`from torch.nn.utils import clip_grad_norm_`)
    is routed too, not only torch.nn.utils' attribute."""
    if _ORIGINAL:
        return
    for name, ours in (("clip_grad_norm_", clip_grad_norm_),
                       ("clip_grad_value_", clip_grad_value_),
                       ("_clip_grads_with_norm_", clip_grads_with_norm_)):
        fn = getattr(_CLIP, name, None)  # the last: torch >= 2.6
        if fn is None:
            continue
        original = types.FunctionType(fn.__code__, fn.__globals__, name,
                                      fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        original.__dict__.update(fn.__dict__)
        original.__doc__ = fn.__doc__
        key = f"_nvswap_route_{name}"
        fn.__globals__[key] = _router(name, ours, original)
        # The new code keeps the free variables of the old (torch >= 2
        # wraps the function in a closure) and calls the router, found in
        # the function's own module globals.
        free = fn.__code__.co_freevars
        src = ("def _outer():\n" +
               "".join(f"    {v} = None\n" for v in free) +
               "    def _trampoline(*args, **kwargs):\n" +
               "".join(f"        {v}\n" for v in free) +
               f"        return {key}(*args, **kwargs)\n"
               "    return _trampoline\n")
        ns = {}
        exec(compile(src, f"<nvswap.torch route {name}>", "exec"), ns)
        code = ns["_outer"]().__code__
        if code.co_freevars != free:
            continue  # not a shape we can redirect: leave torch's as is
        if not hasattr(fn, "__wrapped__"):
            fn.__signature__ = inspect.signature(original)
        _ORIGINAL[name] = original
        fn.__code__ = code
