# SPDX-License-Identifier: MIT
"""What a user calls on an offloaded model besides offload(): stats(),
wait(), gathered() and checkpoint()."""
import contextlib

from . import _durable
from ._engine import engine_of


def stats(model):
    """A dict: layers, layers_held (acquired now), steps (optimizer steps
    taken), step_pending (a deferred step() not applied in full yet),
    deferred_step_s (the time deferred steps' layer updates took where
    they ran: the next forward, or a call that needed them),
    parameters, parameter_bytes, bytes_read,
    bytes_written, io_exposed_s (time acquires waited for I/O or a buffer,
    from the C library), pool_bytes, pool_high_water, walk, resumed
    ({tag, steps, generations} when offload() resumed a checkpoint, else
    None), checkpoints (nvswap.torch checkpoints of the sets), the raw
    Swapper stats of both pools ('param', 'optimizer': None with
    inference=True), inference, lookahead (the read-ahead in layers),
    resident_layers and resident_bytes
    (layers kept in CPU memory: memory=, max_in_cpu=, or in a pool
    buffer by the read-ahead's choice), forwards (top-level
    forwards run), last_forward_bytes_read (parameter bytes the last
    one read from NVMe, embedding rows included), row_layers, row_bytes
    and rows_read (input embeddings read by rows, their tables' bytes,
    the distinct rows read), page_cache (whether the swap files go
    through the page cache: page_cache=True, or 'auto' deciding so),
    read_ahead (an inference model's read-ahead depth chosen from
    measured times: what was measured and chosen, _depth.py; None
    without that choice)."""
    return engine_of(model).stats()


def wait(model):
    """Write back every changed parameter layer and wait for all of the
    model's I/O (gradient and state write-behind included, and a
    deferred optimizer step applied first); raises the first failure.
    Layers held by a running forward stay."""
    eng = engine_of(model)
    eng.settle()
    eng.drain()
    eng.write_back()


@contextlib.contextmanager
def gathered(module, modify=False):
    """The module's offloaded parameters (its own and its children's) in
    memory for the block: read them, or change them with modify=True
    (written back to NVMe at the end; with fp32 masters, offload(dtype=),
    the masters take the new values too). Every layer is held at once:
    the module must fit the parameter pool."""
    eng = None
    layers = []
    for p in module.parameters():
        rec = getattr(p, "_nvswap", None)
        if rec is not None and rec.layer not in layers:
            eng = rec.engine
            layers.append(rec.layer)
    if modify and eng is not None:
        eng.refuse_writes("gathered(modify=True)")
    held = []
    try:
        for layer in layers:
            eng.acquire(layer)
            held.append(layer)
        yield module
    finally:
        try:
            if modify:  # fp32 masters follow what the block wrote
                for layer in held:
                    eng.refresh_masters(layer)
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
