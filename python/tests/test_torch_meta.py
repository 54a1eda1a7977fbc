# SPDX-License-Identifier: MIT
"""nvswap.torch.offload of a model built on the meta device: parameters and
buffers materialized one module at a time by init= or the module's own
reset_parameters(), a Hugging Face model through its _init_weights, and
what nothing can initialize refused before anything is written."""
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402
from torchhelp import hf  # noqa: E402


class Rotary(torch.nn.Module):
    """Parameters of its own: none; a non-persistent buffer, as a rotary
    embedding's inv_freq."""

    def __init__(self, device=None):
        super().__init__()
        self.register_buffer("inv_freq", torch.empty(4, device=device),
                             persistent=False)

    def forward(self, x):
        return x * self.inv_freq.sum()


class Net(torch.nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4, device=device)
        self.rot = Rotary(device)

    def forward(self, x):
        return self.rot(self.lin(x))


def init_all(module):
    if isinstance(module, Rotary):
        module.inv_freq.copy_(torch.arange(4.0))
    elif isinstance(module, torch.nn.Linear):
        with torch.no_grad():
            module.weight.fill_(0.5)
            module.bias.fill_(-1.0)


def swap_files(d):
    return sorted(f for _, _, fs in os.walk(d) for f in fs)


def test_a_meta_buffer_nothing_can_set_is_refused_before_any_write(swapdir):
    model = Net(device="meta")
    with pytest.raises(ValueError) as ei:
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K")
    assert "rot.inv_freq" in str(ei.value) and "init=" in str(ei.value)
    assert "lin." not in str(ei.value)  # Linear has reset_parameters()
    assert model.lin.weight.is_meta and model.rot.inv_freq.is_meta
    assert swap_files(swapdir) == []


def test_init_materializes_buffers_of_modules_without_parameters(swapdir):
    model = Net(device="meta")
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K", init=init_all)
    assert model.rot.inv_freq.device.type == "cpu"
    assert model.rot.inv_freq.tolist() == [0.0, 1.0, 2.0, 3.0]
    ref = Net()
    init_all(ref.lin)
    init_all(ref.rot)
    x = torch.randn(3, 4)
    assert torch.equal(model(x), ref(x))


def test_an_init_that_leaves_a_buffer_unset_is_named(swapdir):
    def only_linear(module):
        if isinstance(module, torch.nn.Linear):
            init_all(module)

    model = Net(device="meta")
    with pytest.raises(ValueError) as ei:
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                    init=only_linear)
    assert "rot.inv_freq" in str(ei.value) and "left" in str(ei.value)
    assert not hasattr(model, "_nvswap_engine")
    assert swap_files(swapdir) == []
    # the model as given: its meta tensors back, so a retry starts over
    assert model.lin.weight.is_meta and model.rot.inv_freq.is_meta
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K", init=init_all)
    assert model.rot.inv_freq.tolist() == [0.0, 1.0, 2.0, 3.0]


class Scaled(torch.nn.Module):
    """Parameters and a buffer of its own."""

    def __init__(self, device=None):
        super().__init__()
        self.w = torch.nn.Parameter(torch.empty(4, device=device))
        self.register_buffer("freq", torch.empty(4, device=device),
                             persistent=False)
        self.register_buffer("count", torch.empty(2, dtype=torch.int64,
                                                  device=device))


def test_a_refusal_after_layers_were_written_gives_the_model_back(swapdir):
    """The check that init set a buffer comes when its module is
    materialized, after earlier layers were written: the model is put
    back as given all the same (meta tensors, no swap file)."""
    def set_w(module):
        if isinstance(module, Scaled):
            with torch.no_grad():
                module.w.fill_(2.0)  # but not freq
        else:
            init_all(module)

    model = torch.nn.Sequential(torch.nn.Linear(4, 4, device="meta"),
                                Scaled(device="meta"))
    with pytest.raises(ValueError, match="1.freq"):
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                    init=set_w)
    assert all(t.is_meta for t in model.state_dict(keep_vars=True).values())
    assert model[1].freq.is_meta
    assert swap_files(swapdir) == []


def test_integer_meta_buffers_start_at_zero(swapdir):
    def set_floats(module):
        with torch.no_grad():
            if isinstance(module, Scaled):
                module.w.fill_(2.0)
                module.freq.fill_(0.5)
            else:
                init_all(module)

    model = torch.nn.Sequential(Scaled(device="meta"))
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                init=set_floats)
    assert model[0].count.tolist() == [0, 0]
    assert model[0].freq.tolist() == [0.5] * 4


def test_a_module_split_over_layers_is_initialized_once(swapdir):
    calls = []

    def counted(module):
        calls.append(type(module).__name__)
        init_all(module)

    model = torch.nn.Sequential(torch.nn.Linear(64, 64, device="meta"))
    # weight 16 KiB fills a buffer: the bias is a layer of its own
    nvt.offload(model, nvme_path=swapdir, buffer_size="16K", init=counted)
    assert nvt.stats(model)["layers"] == 2
    assert calls == ["Linear"]
    sd = model.state_dict()
    assert torch.equal(sd["0.weight"], torch.full((64, 64), 0.5))
    assert torch.equal(sd["0.bias"], torch.full((64,), -1.0))


def test_a_hugging_face_llama_on_meta_runs_with_its_own_init(swapdir):
    tr = hf()
    cfg = tr.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=32)
    with torch.device("meta"):
        model = tr.LlamaForCausalLM(cfg)
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K")
    ref = tr.LlamaForCausalLM(cfg)  # on the CPU: the rotary buffers
    rot, ref_rot = model.model.rotary_emb, ref.model.rotary_emb
    assert torch.equal(rot.inv_freq, ref_rot.inv_freq)
    assert torch.equal(rot.original_inv_freq, ref_rot.original_inv_freq)
    with nvt.gathered(model.model.norm):  # RMSNorm: _init_weights' ones
        assert torch.equal(model.model.norm.weight, torch.ones(32))
    x = torch.randint(0, 96, (2, 8))
    loss = model(input_ids=x, labels=x).loss
    assert torch.isfinite(loss)
    loss.backward()
