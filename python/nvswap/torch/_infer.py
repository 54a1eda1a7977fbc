# SPDX-License-Identifier: MIT
"""offload(inference=True, memory=): a model that only runs forward
(serving, generate()).

inference=True makes no gradient or optimizer pool (no Swapper at all
beside the parameters'), writes nothing back, and refuses what would need
them: gradients (a backward through the model raises), an nvswap.torch
optimizer, persist=, grad_hook=, the optimizer pool keywords.

memory= is a host-memory budget for what nvswap holds for the model: the
parameter pool (buffer_size from the largest layer, as many buffers as
the read-ahead needs) and, with the rest, whole layers kept resident in
CPU memory (the C ParamSwapper's max_in_cpu: in the order they are added,
while they fit; they are never read from NVMe again). A model that fits
runs at in-memory speed; one that does not streams only what does not
fit."""
import errno

import nvswap

from ._common import ALIGN, error

_OPTIMIZER_KW = ("optimizer_buffer_size", "optimizer_buffer_count")


def check(inference, memory, persist, grad_hook, kw):
    """Refuse what inference=True and memory= cannot take (ValueError,
    TypeError naming the keyword)."""
    if not isinstance(inference, bool):
        raise TypeError("nvswap.torch.offload: inference must be True or "
                        f"False, not {type(inference).__name__}")
    if memory is not None and not inference:
        raise ValueError("nvswap.torch.offload: memory= sizes the pools of "
                         "an inference model (inference=True); a training "
                         "model's come from buffer_size=, buffer_count= and "
                         "the optimizer pool keywords")
    if not inference:
        return
    if persist not in (None, "scratch"):
        raise ValueError("nvswap.torch.offload: inference=True writes "
                         "nothing back: persist= has nothing to keep "
                         f"(got {persist!r})")
    if grad_hook is not None:
        raise ValueError("nvswap.torch.offload: inference=True computes no "
                         "gradients: grad_hook= would never be called")
    for k in _OPTIMIZER_KW:
        if kw.get(k) is not None:
            raise ValueError(f"nvswap.torch.offload: inference=True makes "
                             f"no optimizer pool: {k}= has no use")


def budget(memory, buffer_size, layer_bytes, lookahead, buffer_count):
    """(buffer_count, max_in_cpu) for a budget of memory bytes: a pool of
    buffers of buffer_size (buffer_count of them if given, else the
    read-ahead's lookahead + 2, or 2 when every layer fits beside them)
    and whole layers resident with the rest. layer_bytes: each layer's
    pool bytes, in the order they are added. Refused (ValueError naming
    both sizes) when two buffers do not fit."""
    if memory < 2 * buffer_size:
        raise ValueError(f"nvswap.torch.offload: memory={memory} bytes "
                         "cannot hold two buffers of the largest layer "
                         f"(2 x {buffer_size} = {2 * buffer_size} bytes): "
                         "give it at least that")
    total = sum(layer_bytes)
    if buffer_count is None:
        want = 2 if total <= memory - 2 * buffer_size else lookahead + 2
        buffer_count = max(2, min(want, memory // buffer_size))
    elif buffer_count * buffer_size > memory:
        raise ValueError(f"nvswap.torch.offload: memory={memory} bytes "
                         f"cannot hold buffer_count={buffer_count} buffers "
                         f"of {buffer_size} bytes")
    return buffer_count, memory - buffer_count * buffer_size


def layer_sizes(plan, size_of):
    """Each planned layer's bytes in its pool buffer."""
    return [sum((size_of(p) + ALIGN - 1) // ALIGN * ALIGN for _, p in chunk)
            for _, _, chunk in plan]


def refuse_grads(eng, p):
    """A hook on an inference model's parameter: a backward that reaches
    it raises (before: gradients with nowhere to go)."""
    name = p._nvswap.name

    def hook(grad):
        raise error(errno.EPERM,
                    f"nvswap.torch: parameter '{name}' of a model "
                    "offloaded with inference=True got a gradient: "
                    "inference=True makes no gradient pool (run it under "
                    "torch.no_grad() or torch.inference_mode(), or offload "
                    "without inference=True to train)")

    eng.handles.append(p.register_hook(hook))


def bind(eng):
    """An inference model computing on the CPU: each layer kept in CPU
    memory is acquired once, for good, its parameters pointing at that
    memory (read-only: nothing is written back), and modules whose layers
    are all such get no forward hooks: the acquire and release of every
    module in every forward cost a small model a fifth of its decoding
    step. Streamed layers keep their hooks; the walk is theirs alone."""
    if eng.gswap is not None or eng.device is not None:
        return
    for layer in range(len(eng.layers)):
        if not eng.params.layer_in_cpu(layer):
            continue
        try:
            tensors = eng.params.acquire_layer(layer)
        except nvswap.Error as e:
            raise eng._layer_error(layer, e) from e
        for p, t in zip(eng.layers[layer], tensors):
            p.data = t
        eng.bound.add(layer)
    eng.fwd_layers = {m: [x for x in ls if x not in eng.bound]
                      for m, ls in eng.mod_layers.items()}
    eng.fwd_layers = {m: ls for m, ls in eng.fwd_layers.items() if ls}


def stats(eng):
    """The inference figures of nvt.stats()."""
    resident = [i for i in range(len(eng.layers))
                if eng.params.layer_in_cpu(i)]
    return {
        "inference": eng.gswap is None,
        "lookahead": eng.lookahead,
        "resident_layers": len(resident),
        "resident_bytes": sum(eng.layer_bytes[i] for i in resident),
        "forwards": eng.forwards,
        "last_forward_bytes_read": eng.last_forward_read,
    }

