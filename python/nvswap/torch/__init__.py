# SPDX-License-Identifier: MIT
"""Train a PyTorch model larger than memory: parameters, gradients and
optimizer state on NVMe, from plain PyTorch.

    import nvswap.torch as nvt
    model = nvt.offload(model, config="ds_config.json")
    opt = nvt.Adam(model.parameters(), lr=1e-3)     # or nvt.AdamW
    for batch in data:
        loss = loss_fn(model(batch)); loss.backward()
        opt.step(); opt.zero_grad()
    print(nvt.summary(model))       # nvt.stats(model): the figures
    nvt.checkpoint(model).wait()    # with persist="persistent": resumable

    model = nvt.offload(model_on_meta, weights="llama-dir", ...)  # pretrained
    nvt.save_pretrained(model, "out-dir")      # from_pretrained reads it

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

The logic lives in the modules beside this file: _offload (offload,
restore, the hooks), _pools (the two Swappers from a config), _plan (the
layer plan, meta-device materialization), _engine (acquire, release,
forward and backward), _optim (the optimizers; _layerstep: one layer's
step; _pieces: what it lends torch, large parameters in pieces; _parts:
a layer's state in several groups where it is larger than a pool
buffer), _durable (checkpoints),
_statedict, _api, _clip (gradient clipping), _mixed (bf16 with fp32
masters), _optstate (the optimizers' state dicts); pretrained weights in
_weights (the readers), _wfile (each file held open, checked unchanged),
_wread (reading tensors out of them), _stformat (the safetensors format),
_ptformat (a torch.save zip, read in place), _load (offload(weights=)),
_export (save_pretrained) with _savedir (its atomic switch of files);
_sizes (the one size rule); _progress (summary, progress: for people);
_activations (save_on_nvme: the tensors autograd saves, to NVMe).
"""
from . import _durable
from ._activations import ActivationStore, save_on_nvme
from ._api import checkpoint, gathered, stats, wait
from ._clip import clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_
from ._engine import engine_of
from ._export import save_pretrained
from ._offload import offload, restore
from ._optim import Adam, AdamW, OffloadedOptimizer
from ._progress import progress, summary
from ._weights import open_weights

__all__ = ["offload", "stats", "wait", "gathered", "restore", "engine_of",
           "checkpoint", "Checkpoint", "Adam", "AdamW", "OffloadedOptimizer",
           "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_",
           "save_pretrained", "open_weights", "summary", "progress",
           "save_on_nvme", "ActivationStore"]

Checkpoint = _durable.Checkpoint
