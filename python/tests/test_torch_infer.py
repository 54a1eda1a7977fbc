# SPDX-License-Identifier: MIT
"""offload(inference=True, memory=) (issue 35, first slice): a model that
only runs forward, with no gradient or optimizer pool, and a host-memory
budget that sizes the parameter pool and keeps whole layers resident.
generate() with the KV cache gives the in-memory run's tokens; the
budget decides what is read per forward."""
import copy
import errno
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402

V = 96


def hf():
    return pytest.importorskip(
        "transformers", reason="transformers is not installed for this "
        "interpreter (Debian packages no transformers)")


def llama():
    t = hf()
    return t.LlamaForCausalLM(t.LlamaConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64)).eval()


def gpt2():
    t = hf()
    return t.GPT2LMHeadModel(t.GPT2Config(
        vocab_size=V, n_positions=64, n_embd=64, n_layer=3,
        n_head=4)).eval()


def mlp():
    """Plain torch (any torch >= 1.13): 4 layers of 64 x 64."""
    torch.manual_seed(3)
    return torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])


def twin(model):
    m = copy.deepcopy(model)
    m.load_state_dict(model.state_dict())
    return m


def tokens(batch):
    return torch.randint(0, V, (batch, 7),
                         generator=torch.Generator().manual_seed(batch))


def generate(model, ids):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids),
                              max_new_tokens=6, do_sample=False,
                              pad_token_id=0)


@pytest.mark.parametrize("make", [llama, gpt2])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("budget", [None, "half", "above"])
def test_generate_gives_the_in_memory_tokens(swapdir, make, batch, budget):
    torch.manual_seed(0)
    ref = make()
    m = twin(ref)
    total = sum(p.numel() * p.element_size() for p in ref.parameters())
    memory = {None: None, "half": total // 2, "above": 4 * total}[budget]
    if memory is not None:
        memory = max(memory, 4 * 65536)
    ids = tokens(batch)
    want = generate(ref, ids)
    nvt.offload(m, nvme_path=swapdir, inference=True, memory=memory)
    try:
        got = generate(m, ids)
        assert torch.equal(got, want), (got, want)
        s = nvt.stats(m)
        assert s["inference"] and s["optimizer"] is None
        assert s["forwards"] == 6  # one per new token, the cache reused
        if budget == "above":
            assert s["resident_layers"] == s["layers"]
            assert s["bytes_read"] == 0  # never on NVMe at all
    finally:
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)


def pool_counts(model, swapdir, **kw):
    before = nvswap.pinned_stats()["bytes_in_use"]
    nvt.offload(model, nvme_path=swapdir, buffer_size=1 << 16, **kw)
    return nvswap.pinned_stats()["bytes_in_use"] - before, nvt.stats(model)


def test_inference_makes_no_optimizer_pool(swapdir, tmp_path):
    """Measured in pinned bytes: the training offload of the same model
    pins its optimizer pool on top of what the inference one pins."""
    m_inf, m_train = mlp(), mlp()
    pinned_inf, s_inf = pool_counts(m_inf, swapdir, inference=True)
    try:
        pinned_train, s_train = pool_counts(m_train, str(tmp_path))
        try:
            opt = s_train["optimizer"]
            assert pinned_train - pinned_inf >= \
                opt["buffer_size"] * opt["buffer_count"]
        finally:
            nvt.restore(m_train)
        assert s_inf["optimizer"] is None
        assert s_inf["pool_bytes"] == (1 << 16) * 4
        assert pinned_inf < s_inf["pool_bytes"] + (1 << 20)  # + aio bounce
        # one Swapper, the parameters'
        assert os.listdir(os.path.join(swapdir, "nvswap")) == ["param"]
    finally:
        nvt.restore(m_inf)


def test_a_budget_keeps_whole_layers_resident(swapdir):
    """mlp(): 4 layers of 16,640 bytes (64 x 64 fp32 + 64). Buffers of
    32 KiB and lookahead=1: a budget of 2 buffers + 2.5 layers keeps 2
    layers in CPU memory, spread along the walk (1 and 3: the disk reads
    ahead while each computes), and each forward reads exactly the other
    2; with the whole model beside 2 buffers nothing is read."""
    layer = 64 * 64 * 4 + 64 * 4
    ref = mlp()
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    for kept, memory in (({1, 3}, 2 * 32768 + 2 * layer + layer // 2),
                         ({0, 1, 2, 3}, 2 * 32768 + 4 * layer)):
        m = twin(ref)
        nvt.offload(m, nvme_path=swapdir, inference=True, memory=memory,
                    buffer_size=32768, lookahead=1)
        try:
            with torch.no_grad():
                for _ in range(2):
                    assert torch.equal(m(x), ref(x))
            s = nvt.stats(m)
            assert s["layers"] == 4
            assert engine_of(m).layer_bytes == [layer] * 4
            assert s["resident_layers"] == len(kept), s
            assert {i for i in range(4)
                    if engine_of(m).params.layer_in_cpu(i)} == kept
            assert s["resident_bytes"] == len(kept) * layer
            assert s["last_forward_bytes_read"] == (4 - len(kept)) * layer
            assert s["pool_bytes"] == 2 * 32768
            # resident layers are bound once: a forward acquires only the
            # streamed ones, and their modules carry no forward hooks
            a0 = s["param"]["acquires"]
            with torch.no_grad():
                assert torch.equal(m(x), ref(x))
            assert nvt.stats(m)["param"]["acquires"] - a0 == 4 - len(kept)
            assert [bool(m[i]._forward_pre_hooks) for i in range(4)] == \
                [i not in kept for i in range(4)]
            assert nvt.stats(m)["layers_held"] == 0
        finally:
            nvt.restore(m)
        for a, b in zip(ref.parameters(), m.parameters()):
            assert torch.equal(a, b)
        assert not m[0]._forward_pre_hooks


def test_a_resident_model_keeps_every_other_use(swapdir):
    """Bound (resident) layers: state_dict(), gathered(), a forward with
    grad enabled (its backward refused), and nvt.wait() all work as with
    streamed layers; restore() gives the weights back."""
    ref = mlp()
    m = twin(ref)
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(2))
    nvt.offload(m, nvme_path=swapdir, inference=True, memory="1M",
                buffer_size=32768)
    try:
        assert nvt.stats(m)["resident_layers"] == 4
        sd = m.state_dict()
        assert all(torch.equal(sd[k], v) for k, v in ref.state_dict().items())
        with nvt.gathered(m[1]):
            assert torch.equal(m[1].weight, ref[1].weight)
        y = m(x)
        assert torch.equal(y, ref(x))
        with pytest.raises(nvswap.Error, match="got a gradient") as e:
            y.sum().backward()
        assert e.value.errno == errno.EPERM
        nvt.wait(m)
        with torch.no_grad():
            assert torch.equal(m(x), ref(x))
        assert nvt.stats(m)["last_forward_bytes_read"] == 0
    finally:
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)


def test_what_inference_refuses(swapdir):
    m = mlp()
    with pytest.raises(ValueError, match=r"memory=1000 bytes cannot hold "
                       r"two buffers of the largest layer \(2 x 32768 = "
                       r"65536 bytes\)"):
        nvt.offload(m, nvme_path=swapdir, inference=True, memory=1000,
                    buffer_size=32768)
    with pytest.raises(ValueError, match="memory= sizes the pools of an "
                       "inference model"):
        nvt.offload(m, nvme_path=swapdir, memory="1G")
    with pytest.raises(nvswap.Error) as ei:  # serving a set: none here
        nvt.offload(m, nvme_path=swapdir, inference=True,
                    persist="persistent")
    assert ei.value.errno == errno.ENOENT
    with pytest.raises(ValueError, match="optimizer_buffer_size= has no "
                       "use"):
        nvt.offload(m, nvme_path=swapdir, inference=True,
                    optimizer_buffer_size=4096)
    with pytest.raises(ValueError, match="grad_hook= would never"):
        nvt.offload(m, nvme_path=swapdir, inference=True,
                    grad_hook=lambda n, g: g)
    with pytest.raises(ValueError, match="give it or max_in_cpu=, not both"):
        nvt.offload(m, nvme_path=swapdir, inference=True, memory="1M",
                    max_in_cpu=0)
    with pytest.raises(TypeError, match="inference must be True or False"):
        nvt.offload(m, nvme_path=swapdir, inference="yes")
    assert not any(hasattr(p, "_nvswap") for p in m.parameters())
    nvt.offload(m, nvme_path=swapdir, inference=True)
    try:
        with pytest.raises(ValueError, match="offloaded with inference=True"
                           ": it has no gradients or optimizer pool"):
            nvt.AdamW(m.parameters())
        with pytest.raises(nvswap.Error, match="got a gradient: "
                           "inference=True makes no gradient pool") as e:
            m(torch.randn(2, 64)).sum().backward()
        assert e.value.errno == errno.EPERM
        with torch.no_grad():  # still serves after the refused backward
            assert m(torch.randn(2, 64)).shape == (2, 64)
    finally:
        nvt.restore(m)


def test_a_small_optimizer_buffer_names_the_keyword(swapdir):
    """Training: optimizer_buffer_size=4096 failed naming the internal id
    'tensor 1099511627776'."""
    m = mlp()
    with pytest.raises(nvswap.Error, match=r"layer 0 \(parameters 0.weight"
                       r"\.\.\.\) has a gradient region of 16640 bytes, "
                       r"larger than an optimizer pool buffer \(4096 bytes"
                       r"\): raise optimizer_buffer_size=") as e:
        nvt.offload(m, nvme_path=swapdir, buffer_size=32768,
                    optimizer_buffer_size=4096)
    assert e.value.errno == errno.EFBIG
    assert not any(hasattr(p, "_nvswap") for p in m.parameters())


def test_a_meta_model_from_safetensors_serves_in_a_budget(swapdir, tmp_path):
    """The way a model larger than memory gets in: built on the meta
    device, its weights read from save_pretrained's safetensors straight
    to NVMe (resident layers straight to CPU memory), then generate()."""
    t = hf()
    torch.manual_seed(0)
    ref = llama()
    ref.save_pretrained(str(tmp_path / "w"))
    with torch.device("meta"):
        m = t.LlamaForCausalLM(ref.config).eval()
    total = sum(p.numel() * p.element_size() for p in ref.parameters())
    nvt.offload(m, weights=str(tmp_path / "w"), nvme_path=swapdir,
                inference=True, memory=max(total // 2, 4 * 65536))
    try:
        ids = tokens(2)
        assert torch.equal(generate(m, ids), generate(ref, ids))
        # The read-ahead's choice came at the end of the fifth forward,
        # with a new walk (without the layers it keeps): the sixth may
        # read again a layer read ahead for it that binding those layers
        # evicted, and the seventh gives back the layers its read-ahead
        # guessed at the new walk's end before it learns that forwards
        # start over. The eighth is the steady state.
        with torch.no_grad():
            for _ in range(2):
                assert torch.equal(m(ids).logits, ref(ids).logits)
        s = nvt.stats(m)
        assert 0 < s["resident_layers"] < s["layers"], s
        assert s["last_forward_bytes_read"] == \
            s["parameter_bytes"] - s["resident_bytes"], s
    finally:
        nvt.restore(m)


def test_a_truncated_swap_file_names_the_layer_and_the_file(swapdir):
    """Not garbage tokens: nvswap.Error(EIO) naming the layer, its
    parameters and the swap file."""
    m = mlp()
    nvt.offload(m, nvme_path=swapdir, inference=True, buffer_size=32768)
    try:
        swap = os.path.join(swapdir, "nvswap", "param", "rank0", "swap.0")
        os.truncate(swap, 0)
        with pytest.raises(nvswap.Error) as e, torch.no_grad():
            m(torch.randn(2, 64))
        assert e.value.errno == errno.EIO
        assert e.value.strerror.startswith(
            "nvswap.torch: reading layer 0 (0.weight, 0.bias): "), e.value
        assert f"from {swap} at offset" in e.value.strerror, e.value
        assert "truncated behind nvswap's back" in e.value.strerror
    finally:
        # restore() reads every layer back, and the file is gone: a
        # scratch set stays offloaded (its files hold the only copy) for
        # restore() to be tried again
        with pytest.raises(nvswap.Error) as e:
            nvt.restore(m)
        assert e.value.errno == errno.EIO
        assert engine_of(m).layers


def test_a_deleted_swap_file_still_serves_its_own_bytes(swapdir):
    """Unlinked behind nvswap's back, the swap file lives on through the
    descriptor nvswap holds: the outputs stay the model's own (never
    garbage), and nothing of it is left when the model is restored."""
    ref = mlp()
    m = twin(ref)
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(4))
    nvt.offload(m, nvme_path=swapdir, inference=True, buffer_size=32768)
    try:
        os.unlink(os.path.join(swapdir, "nvswap", "param", "rank0",
                               "swap.0"))
        with torch.no_grad():
            for _ in range(2):
                assert torch.equal(m(x), ref(x))
        assert nvt.stats(m)["last_forward_bytes_read"] > 0
    finally:
        nvt.restore(m)
    assert os.listdir(swapdir) == []


def test_inference_reads_ahead_into_every_free_buffer(swapdir):
    """A decoding step walks the layers the same way each time: unless
    told otherwise, an inference model reads ahead as far as its pool
    allows; a training model keeps the default of 1."""
    for kw, want in ((dict(inference=True, buffer_count=5), 4),
                     (dict(inference=True, buffer_count=5, lookahead=1), 1),
                     (dict(inference=True, memory=3 * 32768 + 16640,
                           buffer_count=3), 2),
                     (dict(buffer_count=5), 1)):
        m = mlp()
        nvt.offload(m, nvme_path=swapdir, buffer_size=32768, **kw)
        try:
            assert nvt.stats(m)["lookahead"] == want, kw
            with torch.no_grad():
                m(torch.randn(2, 64))
        finally:
            nvt.restore(m)


def test_the_budget_keeps_the_largest_layers_when_that_streams_less():
    """A Llama's shape in miniature: an embedding and a head of 100 KiB
    around three 10 KiB layers. Kept resident, the two large ones let the
    buffers shrink to the largest streamed layer, and the bytes saved
    come before the read-ahead's depth (issue 46: more memory never
    streams more)."""
    from nvswap.torch import _infer
    K = 1024
    sizes = [100 * K, 10 * K, 10 * K, 10 * K, 100 * K]
    # 200 KiB resident + 2 x 10 KiB buffers: only the small layers stream
    assert _infer.fit(200 * K + 2 * 10 * K, sizes, 2) == \
        (10 * K, 2, {0, 4})
    # 2 x 10 KiB more: two small layers kept rather than a deeper pool
    assert _infer.fit(200 * K + 4 * 10 * K, sizes, 2) == \
        (10 * K, 2, {0, 2, 3, 4})
    # room for one small layer more: kept too, at the end of the walk
    # (the last of the five)
    five = [100 * K] + [10 * K] * 5 + [100 * K]
    assert _infer.fit(210 * K + 2 * 10 * K, five, 2) == \
        (10 * K, 2, {0, 5, 6})
    # room for two of the five: spread, 3rd and 5th (not the 1st and 2nd)
    assert _infer.fit(220 * K + 2 * 10 * K, five, 2) == \
        (10 * K, 2, {0, 3, 5, 6})
    # everything fits: the smallest pool (2 buffers of the smallest layer)
    assert _infer.fit(10 * 100 * K, sizes, 2) == \
        (10 * K, 2, {0, 1, 2, 3, 4})
    # the fewest bytes win: a small layer more kept beside 2 buffers,
    # not 3 buffers
    assert _infer.fit(200 * K + 3 * 10 * K, sizes, 2) == \
        (10 * K, 2, {0, 3, 4})
    # a buffer_size given is kept: layers kept along the walk beside 2
    # of its buffers
    assert _infer.fit(4 * 100 * K + 25 * K, sizes, 2,
                         buffer_size=100 * K) == (100 * K, 2, {1, 2, 3, 4})
    with pytest.raises(ValueError, match=r"memory=153600 bytes cannot hold "
                       r"two buffers of the largest layer \(2 x 102400 = "
                       r"204800 bytes\), nor its largest layers resident "
                       r"beside buffers of the next: give it at least "
                       r"204800 bytes"):
        _infer.fit(150 * K, sizes, 2)


class ScaledEmbedding(torch.nn.Embedding):
    """Gemma's kind: a forward of its own, so not read by rows."""

    def forward(self, ids):
        return super().forward(ids) * 2.0


def test_an_embedding_larger_than_the_pool_buffers_stays_resident(swapdir):
    """An Embedding of 1 MiB (one that cannot be read by rows) before
    four 64 x 64 layers, with memory= for the embedding and a few small
    buffers: the pool's buffers are the size of a small layer (not of
    the embedding), the embedding is never read from NVMe, and the
    output equals the model's in memory."""
    torch.manual_seed(5)
    ref = torch.nn.Sequential(ScaledEmbedding(4096, 64),
                              *[torch.nn.Linear(64, 64) for _ in range(4)])
    m = twin(ref)
    layer, emb = 64 * 64 * 4 + 64 * 4, 4096 * 64 * 4
    ids = torch.randint(0, 4096, (2, 5),
                        generator=torch.Generator().manual_seed(6))
    nvt.offload(m, nvme_path=swapdir, inference=True,
                memory=emb + 4 * layer + layer // 2)
    try:
        with torch.no_grad():
            for _ in range(2):
                assert torch.equal(m(ids), ref(ids))
        s = nvt.stats(m)
        # a small layer, rounded up to the O_DIRECT alignment
        assert s["param"]["buffer_size"] == (layer + 4095) // 4096 * 4096
        # 2 buffers, and the room of 2 more holds two layers
        assert s["param"]["buffer_count"] == 2
        assert s["resident_layers"] == 3
        assert s["resident_bytes"] == emb + 2 * layer
        assert s["row_layers"] == 0
        assert s["last_forward_bytes_read"] == 2 * layer
        assert engine_of(m).params.layer_in_cpu(0)
    finally:
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)
