# SPDX-License-Identifier: MIT
"""Activation checkpointing on an offloaded model: torch.utils.checkpoint
(reentrant and not) and Hugging Face gradient_checkpointing_enable() train
bit for bit as the same recipe in memory; the recomputation in backward
acquires the layers it runs again (counted) and the walk learns it."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import torch.utils.checkpoint  # noqa: E402,F811

import nvswap.torch as nvt  # noqa: E402
from torchhelp import (CheckpointedGPT, batches, hf, same,  # noqa: E402
                       train, trained_pair)


@pytest.mark.parametrize("reentrant", [False, True],
                         ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("tie", [False, True])
def test_checkpointed_blocks_train_bit_for_bit(swapdir, reentrant, tie):
    torch.manual_seed(0)
    ref = CheckpointedGPT(reentrant, layers=3, tie=tie)
    off = copy.deepcopy(ref)
    ro, oo = trained_pair(ref, off, "AdamW", batches(3), nvme_path=swapdir,
                          buffer_size="64K", buffer_count=4)
    same(ro.state_dict(), oo.state_dict())
    st = nvt.stats(off)
    # each block recomputed once a step, acquiring its layers again
    assert st["recomputes"] == 3 * 3
    eng = nvt.engine_of(off)
    per_block = sum(len(eng.mod_layers[m]) for m in off.blocks[0].modules()
                    if m in eng.mod_layers)
    assert per_block == 6  # attention, out_proj, 2 linear, 2 norms
    # every layer of the block, but one that backward may hold already
    # when its unpack starts the recomputation (torch's order decides)
    assert (3 * 3 * (per_block - 1) <= st["recompute_acquires"] <=
            3 * 3 * per_block)
    assert st["layers_held"] == 0


class OwnWeight(torch.nn.Module):
    """A module whose forward checkpoints a function of its own weight
    (read by attribute, outside any submodule's forward)."""

    def __init__(self, reentrant):
        super().__init__()
        self.reentrant = reentrant
        self.W = torch.nn.Parameter(torch.randn(8, 8) / 3)

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(
            lambda h: torch.tanh(h @ self.W), x,
            use_reentrant=self.reentrant)


@pytest.mark.parametrize("reentrant", [False, True],
                         ids=["non-reentrant", "reentrant"])
def test_a_checkpointed_function_of_a_modules_own_weight(swapdir,
                                                         reentrant):
    """The recomputation reads self.W in backward, where no forward of
    the module runs: it is acquired then (it trained on the NaN
    placeholder before)."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 8), OwnWeight(reentrant),
                              torch.nn.Linear(8, 1))
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        got = []
        for m, o in ((ref, ro), (off, oo)):
            loss = m(x).pow(2).mean()
            loss.backward()
            o.step()
            o.zero_grad()
            got.append(loss.item())
        assert got[0] == got[1]
    same(ref.state_dict(), off.state_dict())
    assert nvt.stats(off)["layers_held"] == 0


def test_the_walk_learns_the_recomputation(swapdir):
    torch.manual_seed(0)
    model = CheckpointedGPT(False, layers=2)
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    opt = nvt.AdamW(model.parameters(), lr=1e-2)
    train(model, opt, batches(1))
    forward = list(nvt.stats(model)["walk"])  # the first step: forward
    train(model, opt, batches(1))
    walk = nvt.stats(model)["walk"]
    assert walk[:len(forward)] == forward
    # then backward: the head, each block recomputed (its forward
    # acquires again) and its backward, last block first
    back = walk[len(forward):]
    eng = nvt.engine_of(model)
    block = [eng.mod_layers[m] for m in model.blocks[1].modules()
             if m in eng.mod_layers]
    first = {x for ls in block for x in ls}
    assert back[0] == eng.mod_layers[model.head][0]
    assert set(back[1:1 + len(first)]) == first
    assert set(back) >= set(forward) - set(eng.mod_layers[model.emb])
    train(model, opt, batches(1))  # stable: not learned again
    assert nvt.stats(model)["walk"] == walk


def test_backward_reads_a_recomputed_layer_once(swapdir):
    """A block recomputed in backward acquires its layers, then backward
    unpacks their saved weights: the recomputation leaves them resident,
    so backward reads each layer at most once (a pool of a buffer per
    layer: nothing evicted for room; in a smaller one the pool takes
    the least recently released back first). Evicted at the
    recomputation's end, every recomputed layer was read twice (1.8x
    the model's bytes)."""
    torch.manual_seed(0)
    model = CheckpointedGPT(False, layers=3)
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                buffer_count=24)
    assert len(nvt.engine_of(model).layers) < 24
    opt = nvt.AdamW(model.parameters(), lr=1e-2, speculate=False)
    eng = nvt.engine_of(model)
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    # and the read-ahead past the walk's end into the next forward
    # (lookahead 1: one layer), as it lands
    ahead = max(sum(p.numel() * p.element_size() for p in ps)
                for ps in eng.layers)
    for tok in batches(3):
        out = model(tok[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 tok[:, 1:].flatten())
        nvt.wait(model)
        read0 = eng.param_bytes_read()
        loss.backward()
        read = eng.param_bytes_read() - read0
        assert 0 < read <= total + ahead, (read, total, ahead)
        opt.step()
        opt.zero_grad()
    assert nvt.stats(model)["layers_held"] == 0


class Shift(torch.nn.Module):
    """x + b: autograd saves nothing of b, so backward never unpacks it."""

    def __init__(self, n):
        super().__init__()
        self.b = torch.nn.Parameter(torch.randn(n) / 4)

    def forward(self, x):
        return x + self.b


class ShiftBlock(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin, self.shift = torch.nn.Linear(n, n), Shift(n)

    def forward(self, x):
        return torch.tanh(self.shift(self.lin(x)))


class ShiftNet(torch.nn.Module):
    def __init__(self, n=16, blocks=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(ShiftBlock(n) for _ in range(blocks))

    def forward(self, x):
        for b in self.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False)
        return x


def test_a_recomputed_layer_backward_never_holds_is_given_back(swapdir):
    """A recomputed layer whose weight backward does not unpack (an added
    bias) is left resident by the recomputation like the others; it is
    evicted when the next recomputation starts or backward ends, so it
    does not keep a buffer from the read-ahead. Trains bit for bit."""
    torch.manual_seed(0)
    ref = ShiftNet()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=8)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, speculate=False)
    eng = nvt.engine_of(off)
    shifts = [eng.mod_layers[b.shift][0] for b in off.blocks]
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        got = []
        for m, o in ((ref, ro), (off, oo)):
            loss = m(x).square().mean()
            loss.backward()
            if m is off:  # evicted: on NVMe, or its write-back going
                states = [eng.pswap.info(layer << 20)["state"]
                          for layer in shifts]
                assert "resident" not in states, states
                assert not eng.bw_kept
            o.step()
            o.zero_grad()
            got.append(loss.item())
        assert got[0] == got[1]
    same(ref.state_dict(), off.state_dict())
    assert nvt.stats(off)["recomputes"] > 0


def test_a_tight_pool_still_recomputes(swapdir):
    """Three buffers, the fewest checkpointing takes: backward holds at
    most buffer_count - 1 layers, the recomputation acquires one more
    (two buffers: EDEADLK, every buffer held by this thread)."""
    torch.manual_seed(0)
    ref = CheckpointedGPT(False, layers=2)
    trained_pair(ref, copy.deepcopy(ref), "Adam", batches(2),
                 nvme_path=swapdir, buffer_size="64K", buffer_count=3)


def llama_pair(swapdir, tie=False):
    tr = hf()
    cfg = tr.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=32,
                         tie_word_embeddings=tie)
    torch.manual_seed(0)
    ref = tr.LlamaForCausalLM(cfg)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    return ref, off


def lm_train(model, opt, data):
    losses = []
    for tok in data:
        loss = model(input_ids=tok, labels=tok).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("reentrant", [False, True],
                         ids=["non-reentrant", "reentrant"])
@pytest.mark.parametrize("tie", [False, True])
def test_hugging_face_gradient_checkpointing_trains_bit_for_bit(
        swapdir, reentrant, tie):
    ref, off = llama_pair(swapdir, tie)
    kw = {"gradient_checkpointing_kwargs": {"use_reentrant": reentrant}}
    hf_train_pair(ref, off, lambda m: m.gradient_checkpointing_enable(**kw),
                  steps=3)
    assert nvt.stats(off)["recomputes"] == 3 * 3  # 3 layers x 3 steps


@pytest.mark.parametrize("method", ["gradient_checkpointing_enable",
                                    "activation_checkpointing_enable"])
def test_hugging_face_default_checkpointing(swapdir, method):
    """gradient_checkpointing_enable() (deprecated in transformers 5) and
    activation_checkpointing_enable() with no arguments: whatever
    transformers picks by default."""
    ref, off = llama_pair(swapdir)
    if not hasattr(ref, method):
        pytest.skip(f"transformers {hf().__version__} has no {method}()")
    hf_train_pair(ref, off, lambda m: getattr(m, method)(), steps=2)


def hf_train_pair(ref, off, enable, steps):
    """enable(model) on both, then the same steps: equal losses, weights
    and optimizer state."""
    for m in (ref, off):
        enable(m)
        m.train()
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)
    data = [torch.randint(0, 96, (2, 12), generator=g) for _ in range(steps)]
    assert lm_train(ref, ro, data) == lm_train(off, oo, data)
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
