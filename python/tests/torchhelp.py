# SPDX-License-Identifier: MIT
"""Models and checks shared by the nvswap.torch tests: a small GPT-style
decoder of torch.nn layers, token batches, a training loop, state dicts
compared bit for bit, the mixed-precision reference optimizer, and
transformers where it is installed."""
import contextlib
import copy
import errno
import os
import sys

import pytest
import torch
import torch.utils.checkpoint

V, D, HEADS, T, B = 64, 32, 4, 8, 2


class GPT(torch.nn.Module):
    def __init__(self, layers=2, tie=False, twice=False):
        super().__init__()
        self.twice = twice
        self.emb = torch.nn.Embedding(V, D)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(D, HEADS, 2 * D, dropout=0.0,
                                             batch_first=True)
            for _ in range(layers))
        self.head = torch.nn.Linear(D, V, bias=False)
        if tie:
            self.head.weight = self.emb.weight
        self.register_buffer("mask",
                             torch.triu(torch.full((T, T), -1e9), 1))

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = b(h, src_mask=self.mask)
            if self.twice:  # the same module called twice in one forward
                h = b(h, src_mask=self.mask)
        return self.head(h)


class CheckpointedGPT(GPT):
    """The test GPT with each block checkpointed."""

    def __init__(self, reentrant, **kw):
        super().__init__(**kw)
        self.reentrant = reentrant

    def forward(self, x):
        h = self.emb(x)
        for b in self.blocks:
            h = torch.utils.checkpoint.checkpoint(
                b, h, self.mask, use_reentrant=self.reentrant)
        return self.head(h)


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (B, T + 1), generator=g) for _ in range(n)]


def train(model, opt, data, act=None):
    """Steps of model on data; act: a store (save_on_nvme) whose `with`
    each forward runs in."""
    losses = []
    for tok in data:
        with act if act is not None else contextlib.nullcontext():
            out = model(tok[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 tok[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def same(a, b):
    """state dicts equal bit for bit (tensors by torch.equal)"""
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            same(a[k], b[k])
        elif torch.is_tensor(a[k]):
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def same_optimizer(ro, oo):
    """ro (a MasterAdamW) and oo (nvswap.torch's, with fp32 masters) hold
    the same hyper-parameters, state and masters, bit for bit."""
    rs, os_ = ro.state_dict(), oo.state_dict()
    assert rs["param_groups"] == os_["param_groups"]
    same(rs["state"], os_["state"])
    for i, m in enumerate(ro.masters):
        assert os_["master"][i].dtype == torch.float32
        assert torch.equal(m.detach(), os_["master"][i]), i


class MasterAdamW(torch.optim.AdamW):
    """The reference: torch's AdamW over fp32 master copies of a bf16
    model's parameters. step() takes each model gradient to fp32, steps
    the masters, and copies them (rounded) back into the model."""

    def __init__(self, model_params, source_params, **kw):
        self.model_params = list(model_params)
        self.masters = [torch.nn.Parameter(p.detach().clone().float())
                        for p in source_params]
        super().__init__(self.masters, **kw)

    @torch.no_grad()
    def step(self, closure=None):
        for p, m in zip(self.model_params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        super().step(closure)
        for p, m in zip(self.model_params, self.masters):
            p.copy_(m)

    def zero_grad(self, set_to_none=True):
        for p in self.model_params:
            p.grad = None
        super().zero_grad(set_to_none)


def hf():
    """transformers, or a skip saying why (Debian packages none)."""
    return pytest.importorskip(
        "transformers", reason="transformers is not installed for this "
        "interpreter (Debian packages no transformers)")


def lm_loss(model, tok):
    """Next-token cross entropy of the test GPT on tok (in fp32)."""
    out = model(tok[:, :-1])
    return torch.nn.functional.cross_entropy(out.float().flatten(0, 1),
                                             tok[:, 1:].flatten())


def trained_pair(ref, off, opt_cls, data, **offload):
    """off (a copy of ref) offloaded and both trained on data with
    opt_cls (torch's and nvswap.torch's): the losses must be equal."""
    import nvswap.torch as nvt
    nvt.offload(off, **offload)
    ro = getattr(torch.optim, opt_cls)(ref.parameters(), lr=1e-2)
    oo = getattr(nvt, opt_cls)(off.parameters(), lr=1e-2)
    assert train(ref, ro, data) == train(off, oo, data)
    same(ref.state_dict(), off.state_dict())
    return ro, oo


# nvswap.torch's optimizer step modes (docs/optimizer.md), as arguments
STEP_MODES = {
    "deferred": dict(speculate=False),
    "in step()": dict(defer=False),
    "speculated": dict(),
    "step_in_backward": dict(step_in_backward=True),
}


def clipped_steps(model, opt, data, clip):
    """A step per batch of data, clip_grad_norm_(clip) before each:
    [(loss, total norm)]."""
    out = []
    for tok in data:
        loss = lm_loss(model, tok)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        out.append((loss.item(), norm.item()))
    return out


def equal_steps(ref, ro, off, oo, data, clip):
    """clipped_steps() of ref with ro and of off with oo: equal."""
    got = clipped_steps(ref, ro, data, clip)
    assert got == clipped_steps(off, oo, data, clip)
    return got


def steps_in_mode(ref, ro, off, oo, data, mode):
    """ref with torch's ro and off with nvswap.torch's oo (made with
    STEP_MODES[mode]) a step per batch: with a clip that never fires
    (1e3; the losses and norms must be equal), or, for
    step_in_backward, which refuses clipping, without."""
    if mode != "step_in_backward":
        equal_steps(ref, ro, off, oo, data, 1e3)
        return
    for tok in data:
        for model, opt in ((ref, ro), (off, oo)):
            lm_loss(model, tok).backward()
            opt.step()
            opt.zero_grad()


# torch's Adam and AdamW with the options the step-mode tests run
ADAM_KINDS = [("AdamW", dict(weight_decay=0.1)),
              ("Adam", dict(amsgrad=True, weight_decay=0.01))]


def trained_in_mode(kind, kw, mode, **offload):
    """A 2-layer GPT and a copy offloaded (offload: the keywords), both
    trained 4 steps (steps_in_mode) with torch's and nvswap.torch's kind
    (kw; mode: a key of STEP_MODES); every weight and every state
    (step counts included) must be equal bit for bit, and the
    speculated steps kept. Returns (off, its optimizer)."""
    import nvswap.torch as nvt
    from nvswap.torch._common import GRAPH_TASK
    torch.manual_seed(0)
    ref = GPT(layers=2)
    off = copy.deepcopy(ref)
    nvt.offload(off, **offload)
    ro = getattr(torch.optim, kind)(ref.parameters(), lr=1e-2, **kw)
    oo = getattr(nvt, kind)(off.parameters(), lr=1e-2, **kw,
                            **STEP_MODES[mode])
    steps_in_mode(ref, ro, off, oo, batches(4), mode)
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    if mode == "speculated" and GRAPH_TASK is not None:
        # (torch 1.x never speculates: test_torch_spec.py)
        assert nvt.stats(off)["speculated_steps"] >= 2
        assert nvt.stats(off)["redone_steps"] == 0
    return off, oo


def clip_fires_once(ref, ro, off, oo, same_opt=None):
    """Five steps, the clip firing at the third only (torch >= 2: the step
    speculated in the second backward is redone): equal bit for bit (the
    optimizers' state dicts, or same_opt(ro, oo))."""
    import nvswap.torch as nvt
    from nvswap.torch._common import GRAPH_TASK
    for tok, clip in zip(batches(5), [1e3, 1e3, 1e-3, 1e3, 1e3]):
        equal_steps(ref, ro, off, oo, [tok], clip)
    if GRAPH_TASK is not None:  # torch 1.x never guesses
        assert nvt.stats(off)["redone_steps"] >= 1
    if same_opt is None:
        same(ro.state_dict(), oo.state_dict())
    else:
        same_opt(ro, oo)
    same(ref.state_dict(), off.state_dict())


class Failing:
    """An OptimizerSwapper (swap) with swap_in of group gid failing once
    (EIO): a fault between two parts of a layer's step. swapped_in: the
    groups it swapped in since."""

    def __init__(self, swap, gid):
        self._swap, self.gid, self.failed = swap, gid, 0
        self.swapped_in = []

    def swap_in(self, g, **kw):
        import nvswap
        if g == self.gid and not self.failed:
            self.failed += 1
            raise nvswap.Error(errno.EIO, "injected: swap_in failed")
        self.swapped_in.append(g)
        return self._swap.swap_in(g, **kw)

    def __getattr__(self, name):
        return getattr(self._swap, name)


def failing_step(ref, ro, off, oo, tok):
    """A step on batch tok of ref with torch's ro, clipped at 1.0, and of
    off with nvswap.torch's oo, whose update the caller made fail: the
    losses and norms must be equal; returns the nvswap.Error that
    oo.step() (or, deferred, nvt.wait()) raised."""
    import nvswap
    import nvswap.torch as nvt
    rl = lm_loss(ref, tok)
    rl.backward()
    rn = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    ro.step()
    ro.zero_grad()
    ol = lm_loss(off, tok)
    ol.backward()
    on = torch.nn.utils.clip_grad_norm_(off.parameters(), 1.0)
    assert (rl.item(), rn.item()) == (ol.item(), on.item())
    with pytest.raises(nvswap.Error) as ei:
        oo.step()
        nvt.wait(off)  # the deferred step's update, now
    return ei.value


def masters_steps(offload):
    """A 2-layer GPT in bf16 with MasterAdamW over its fp32 source, and
    the source offloaded by offload(model) (with dtype=torch.bfloat16)
    with nvswap.torch's AdamW (deferred): 3 steps clipped at 1e-3,
    equal bit for bit. Returns the offloaded model's optimizer."""
    import nvswap.torch as nvt
    torch.manual_seed(0)
    src = GPT(layers=2)
    ref = copy.deepcopy(src).to(torch.bfloat16)
    off = copy.deepcopy(src)
    offload(off)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2,
                     weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1,
                   speculate=False)
    equal_steps(ref, ro, off, oo, batches(3), 1e-3)
    same(ref.state_dict(), off.state_dict())
    return off, oo


def clip_train(model, opt, data, clip, accumulate=1, **kw):
    """Train the test GPT on data, a step every `accumulate` batches
    with clip(model.parameters(), **kw) before it (None: no clipping):
    the losses and the norms clip() returned."""
    losses, norms = [], []
    for k, tok in enumerate(data):
        loss = lm_loss(model, tok)
        (loss / accumulate).backward()
        losses.append(loss.item())
        if (k + 1) % accumulate == 0:
            out = None if clip is None else clip(model.parameters(), **kw)
            if out is not None:
                norms.append(out)
            opt.step()
            opt.zero_grad()
    return losses, norms


def memcgroup_or_skip():
    """examples/python/memcgroup.py (a child in a memory cgroup), or the
    test skipped saying why none can be made here."""
    examples = os.path.join(os.path.dirname(__file__), "..", "..",
                            "examples", "python")
    sys.path.insert(0, examples)
    try:
        import memcgroup
    finally:
        sys.path.remove(examples)
    why = memcgroup.why_not()
    if why:
        pytest.skip(f"no memory cgroup: {why}")
    return memcgroup
