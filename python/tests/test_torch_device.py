# SPDX-License-Identifier: MIT
"""nvswap.torch with the model computing on a device (ZeRO-Infinity's
layout): parameters on NVMe staged through pinned pool buffers to the
device for forward and backward, gradients back to the CPU pool, the
optimizer stepping in CPU memory. device='cpu' runs the same staging with
ordinary CPU copies on any machine; the tests marked gpu run it on CUDA
(pytest -m gpu) against a reference that computes on the GPU and steps
the same optimizer on CPU copies of the parameters."""
import copy
import errno

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
from nvswap import _nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402

from test_torch import GPT, batches, same, train  # noqa: E402


def offloaded(swapdir, ref, device):
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                device=device)
    return off


def test_device_staging_trains_bit_identically_to_memory(swapdir):
    torch.manual_seed(0)
    ref = GPT()
    off = offloaded(swapdir, ref, "cpu")
    eng = nvt.engine_of(off)
    assert eng.device == torch.device("cpu")
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    seen = []
    # Inside a forward the parameters are copies, not the pool buffers.
    off.blocks[0].linear1.register_forward_pre_hook(
        lambda m, a: seen.append(
            (bool(eng.staged), _nvswap.is_pinned(m.weight.data))))
    data = batches(3)
    assert train(ref, ro, data) == train(off, oo, data)
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    assert seen == [(True, False)] * 3
    assert not eng.staged
    assert nvt.stats(off)["bytes_read"] > 0
    # Between uses a parameter is a placeholder, not the pool buffer.
    p = off.blocks[0].linear1.weight
    assert p.data.stride() == (0, 0) and torch.isnan(p.data).all()


def test_device_staging_writes_back_what_load_state_dict_changes(swapdir):
    torch.manual_seed(1)
    ref = GPT()
    off = offloaded(swapdir, ref, "cpu")
    torch.manual_seed(2)
    other = GPT()
    off.load_state_dict(other.state_dict())
    same(other.state_dict(), off.state_dict())
    nvt.restore(off)
    same(other.state_dict(), off.state_dict())


def test_a_layer_held_on_the_device_is_not_lent_in_cpu_memory(swapdir):
    torch.manual_seed(0)
    off = offloaded(swapdir, GPT(), "cpu")
    eng = nvt.engine_of(off)
    eng.acquire(0)  # staged, as a forward holds it
    with pytest.raises(nvswap.Error) as ei:
        eng.acquire(0, host=True)
    assert ei.value.errno == errno.EBUSY
    assert "layer 0 is held in device memory" in str(ei.value)
    eng.release(0)
    eng.acquire(0, host=True)  # free again: lent as the pool buffers
    assert 0 not in eng.staged
    eng.release(0)


def test_step_in_backward_is_refused_for_a_model_on_a_device(swapdir):
    torch.manual_seed(0)
    off = offloaded(swapdir, GPT(), "cpu")
    with pytest.raises(ValueError, match="step_in_backward"):
        nvt.AdamW(off.parameters(), lr=1e-2, step_in_backward=True)


def test_the_device_is_the_parameters_unless_given():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    assert nvt._offload._device(m, None) is None  # CPU: the pool buffers are it
    m[1].weight = torch.nn.Parameter(torch.zeros(4, 4, device="meta"))
    assert nvt._offload._device(m, None) is None  # meta is materialized on CPU
    assert nvt._offload._device(m, "cpu") == torch.device("cpu")


def test_a_served_model_stages_its_layers_to_the_device(swapdir):
    """inference=True with device= (the CPU staging a GPU uses, on any
    machine): no optimizer pool, each forward computing on staged copies
    rather than the pool buffers, the in-memory outputs, and reading
    exactly the layers memory= streams (resident ones are copied, not
    read); the read-ahead's choice from measured times is the CPU's
    alone."""
    torch.manual_seed(3)
    # not eval(): there TransformerEncoderLayer takes its fused fast path
    # unless a module in it has forward hooks, as nvswap's do, and the
    # two paths round differently (offloaded or not, staged or not: the
    # same outputs with the fast path off); dropout is 0 anyway
    ref = GPT(layers=3)
    off = copy.deepcopy(ref)
    total = sum(p.numel() * p.element_size() for p in ref.parameters())
    nvt.offload(off, nvme_path=swapdir, inference=True, memory=total // 2,
                device="cpu")
    try:
        eng = nvt.engine_of(off)
        s = nvt.stats(off)
        assert eng.device == torch.device("cpu")
        assert s["inference"] and s["optimizer"] is None
        assert s["read_ahead"] is None
        n = len(eng.layers)
        streamed = [i for i in range(n) if not eng.params.layer_in_cpu(i)]
        assert 0 < s["resident_layers"] < n and \
            len(streamed) == n - s["resident_layers"]
        seen = []
        off.blocks[0].linear1.register_forward_pre_hook(
            lambda m, a: seen.append(
                (bool(eng.staged), _nvswap.is_pinned(m.weight.data))))
        with torch.no_grad():
            for k, tok in enumerate(batches(6)):
                assert torch.equal(off(tok[:, :-1]), ref(tok[:, :-1]))
                # the first forward traces the walk: reading ahead by
                # number before it, a layer read early may be read again
                # when its buffer was needed first
                assert k == 0 or nvt.stats(off)[
                    "last_forward_bytes_read"] == \
                    sum(eng.layer_bytes[i] for i in streamed)
        assert seen == [(True, False)] * 6
        assert not eng.staged
        assert nvt.stats(off)["read_ahead"] is None
    finally:
        nvt.restore(off)
    for a, b in zip(ref.parameters(), off.parameters()):
        assert torch.equal(a, b)


# ---- on a CUDA device --------------------------------------------------


@pytest.fixture
def cuda():
    if not torch.cuda.is_available():
        why = (f"no CUDA device: torch {torch.__version__} (CUDA "
               f"{torch.version.cuda}) finds none")
        print(why)
        pytest.skip(why)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device("cuda", torch.cuda.current_device())


def reference_steps(gpu_model, data, lr):
    """ZeRO-Offload by hand: forward and backward on the GPU, AdamW on CPU
    copies of the parameters, the result copied back to the GPU."""
    master = [p.detach().to("cpu").clone().requires_grad_(True)
              for p in gpu_model.parameters()]
    opt = torch.optim.AdamW(master, lr=lr)
    losses = []
    for tok in data:
        tok = tok.to(next(gpu_model.parameters()).device)
        out = gpu_model(tok[:, :-1])
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 tok[:, 1:].flatten())
        loss.backward()
        for m, p in zip(master, gpu_model.parameters()):
            m.grad = p.grad.to("cpu")
            p.grad = None
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for m, p in zip(master, gpu_model.parameters()):
                p.copy_(m)
        losses.append(loss.item())
    return losses, master, opt


@pytest.mark.gpu
def test_a_model_on_the_gpu_trains_bit_identically_offloaded(swapdir, cuda):
    torch.manual_seed(0)
    base = GPT()
    ref = copy.deepcopy(base).to(cuda)
    off = copy.deepcopy(base).to(cuda)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    assert off.head.weight.device == cuda  # the placeholder stays there
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    data = batches(3)
    want, master, ro = reference_steps(ref, data, 1e-2)
    got = []
    for tok in data:
        tok = tok.to(cuda)
        out = off(tok[:, :-1])
        assert out.device == cuda
        loss = torch.nn.functional.cross_entropy(out.flatten(0, 1),
                                                 tok[:, 1:].flatten())
        loss.backward()
        oo.step()
        oo.zero_grad()
        got.append(loss.item())
    assert got == want
    sd = off.state_dict()
    for name, p in ref.named_parameters():
        assert sd[name].device == cuda, name
        assert torch.equal(sd[name], p.detach()), name
    same(ro.state_dict(), oo.state_dict())
    st = nvt.stats(off)
    assert st["bytes_read"] > 0 and st["bytes_written"] > 0
    nvt.restore(off)
    assert off.head.weight.device == cuda
    for (n, a), b in zip(ref.named_parameters(), off.parameters()):
        assert torch.equal(a.detach(), b.detach()), n


@pytest.mark.gpu
def test_a_served_llama_on_the_gpu_generates_the_gpu_tokens(swapdir, cuda):
    """Issue 35 on a device: a Llama on the GPU offloaded with
    inference=True and half the model as memory=: generate() (greedy,
    KV cache) gives the tokens the same model gives on the GPU, each
    layer staged from the pinned pool."""
    t = pytest.importorskip("transformers", reason="transformers is not "
                            "installed for this interpreter")
    torch.manual_seed(0)
    base = t.LlamaForCausalLM(t.LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=128,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64)).eval()
    ref = copy.deepcopy(base).to(cuda)
    off = copy.deepcopy(base).to(cuda)
    total = sum(p.numel() * p.element_size() for p in base.parameters())
    ids = torch.randint(0, 96, (2, 7),
                        generator=torch.Generator().manual_seed(2)).to(cuda)

    def generate(m):
        with torch.no_grad():
            return m.generate(ids, attention_mask=torch.ones_like(ids),
                              max_new_tokens=8, do_sample=False,
                              pad_token_id=0)

    want = generate(ref)
    nvt.offload(off, nvme_path=swapdir, inference=True, memory=total // 2)
    try:
        got = generate(off)
        assert got.device == cuda and torch.equal(got, want)
        s = nvt.stats(off)
        assert s["optimizer"] is None and s["bytes_read"] > 0
    finally:
        nvt.restore(off)
    for a, b in zip(base.parameters(), off.parameters()):
        assert torch.equal(a.to(cuda), b)


@pytest.mark.gpu
def test_parameters_on_the_cpu_and_a_gpu_are_refused(swapdir, cuda):
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    m[1].to(cuda)
    with pytest.raises(ValueError, match="several devices"):
        nvt.offload(m, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    assert getattr(m[0].weight, "_nvswap", None) is None


@pytest.mark.gpu
def test_activations_on_the_gpu_go_to_nvme_and_back(swapdir, cuda):
    """save_on_nvme with a model on the GPU: every saved activation
    (threshold 0; 16 KiB buffers, the larger ones in pieces) copied from
    the device into the pool, written, and read back onto the device;
    losses and gradients as the same steps on the GPU in memory, bit for
    bit, every piece freed."""
    torch.manual_seed(0)
    ref = GPT().to(cuda)
    model = copy.deepcopy(ref)
    data = [t.to(cuda) for t in batches(3)]
    want = train(ref, torch.optim.AdamW(ref.parameters(), lr=1e-2), data)
    act = nvt.save_on_nvme(swapdir, memory=4 * 16384, buffer_size=16384,
                           threshold=0)
    got = train(model, torch.optim.AdamW(model.parameters(), lr=1e-2),
                data, act)
    assert got == want
    same(ref.state_dict(), model.state_dict())
    st = act.stats()
    assert st["saved"] > 0 and st["live"] == 0, st
    # the device's activations went, not only CPU scalars (a seed)
    assert st["saved_bytes"] > 4 * 16384, st
    assert st["restored"] == st["saved"] + st["shared"], st
    # all but the newest piece of each forward (held in the pool)
    assert 0 < st["bytes_written"] <= st["saved_bytes"], st
    act.close()
