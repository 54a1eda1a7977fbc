# SPDX-License-Identifier: MIT
"""nvswap.torch.offload(weights=): pretrained weights from safetensors
files (single, sharded with an index), torch.save'd state dicts and
Hugging Face directories, straight to NVMe: bit for bit what the file
(and transformers' from_pretrained) holds, the same forward, tied
parameters, ignore patterns, buffers, the reader's own API, a resumed
checkpoint winning over the file, a failed read leaving the model as
given, and memory bounded by the pools. Bad input: test_torch_weights_
bad.py."""
import errno
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _load, _weights, _wread  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402
from torchhelp import GPT, batches, same, train  # noqa: E402
from weighthelp import (all_meta, files_under, hf_models, loss,  # noqa: E402
                        meta_gpt, on_meta, safetensors_torch, write_st)

KW = dict(buffer_size="64K", buffer_count=3)


def dirs(diskdir):
    w, s = os.path.join(diskdir, "w"), os.path.join(diskdir, "swap")
    os.makedirs(w)
    os.makedirs(s)
    return w, s


def ref_gpt(tie=False, seed=0):
    torch.manual_seed(seed)
    return GPT(tie=tie)


def check_loaded(ref, model):
    same(ref.state_dict(), model.state_dict())
    x = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))
    assert torch.equal(ref(x), model(x))


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("shard", [None, 20000])
def test_a_gpt_loads_bit_for_bit_from_safetensors(diskdir, tie, shard):
    w, s = dirs(diskdir)
    ref = ref_gpt(tie)
    kw = {} if shard is None else {"max_shard_size": shard}
    nvt.save_pretrained(ref, w, **kw)
    assert os.path.exists(os.path.join(w, "model.safetensors.index.json")
                          if shard else os.path.join(w, "model.safetensors"))
    model = meta_gpt(tie)
    nvt.offload(model, nvme_path=s, weights=w, **KW)
    nvt.wait(model)
    st, eng = nvt.stats(model), engine_of(model)
    assert st["bytes_read"] == 0  # nothing read back from the swap files
    # each layer written once, whole, parameters packed 64-byte aligned,
    # but for those read from the file in place (test_torch_train_inplace)
    copied = [p for i, ps in enumerate(eng.layers) if i not in eng.in_place
              for p in ps]
    assert eng.in_place and len(copied) < len(list(model.parameters()))
    want = sum(p.numel() * p.element_size() for p in copied)
    assert want <= st["bytes_written"] <= want + 64 * len(copied)
    check_loaded(ref, model)
    if tie:
        assert model.head.weight is model.emb.weight
    assert model.mask.device.type == "cpu"  # a persistent buffer
    nvt.restore(model)


def test_a_torch_saved_state_dict_loads_new_and_old_format(diskdir):
    w, s = dirs(diskdir)
    ref = ref_gpt(tie=True)
    new, old = os.path.join(w, "sd.pt"), os.path.join(w, "old.bin")
    torch.save(ref.state_dict(), new)
    torch.save(ref.state_dict(), old, _use_new_zipfile_serialization=False)
    for path in (new, old):
        src = nvt.open_weights(path)
        # the zip format is read in place (_ptformat); the old one whole
        assert src.lazy == (path == new)
        model = meta_gpt(tie=True)
        nvt.offload(model, nvme_path=s, weights=path, **KW)
        check_loaded(ref, model)
        nvt.restore(model)


def test_a_file_holding_the_other_name_of_a_tied_parameter(diskdir):
    """HF saves one name of a tied pair; any one works, both work when
    equal."""
    w, s = dirs(diskdir)
    ref = ref_gpt(tie=True)
    sd = ref.state_dict()
    for name, drop in (("head", "emb.weight"), ("both", None)):
        path = os.path.join(w, f"{name}.safetensors")
        write_st(path, {k: v for k, v in sd.items() if k != drop})
        model = meta_gpt(tie=True)
        nvt.offload(model, nvme_path=s, weights=path, **KW)
        check_loaded(ref, model)
        nvt.restore(model)


def test_a_module_s_ignore_lists_and_init_fill_what_the_file_lacks(diskdir):
    """_keys_to_ignore_on_load_missing: that parameter comes from init
    (the module's own reset_parameters), the others from the file;
    _keys_to_ignore_on_load_unexpected: extra keys pass. BatchNorm's
    running statistics (persistent buffers) come from the file."""
    w, s = dirs(diskdir)

    class Net(torch.nn.Module):
        _keys_to_ignore_on_load_missing = [r"^extra\."]
        _keys_to_ignore_on_load_unexpected = [r"\.legacy$"]

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.bn = torch.nn.BatchNorm1d(4)
            self.extra = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.extra(self.bn(self.lin(x)))

    torch.manual_seed(0)
    ref = Net()
    ref.bn.running_mean.fill_(0.25)
    ref.bn.running_var.fill_(2.0)
    ref.bn.num_batches_tracked.fill_(7)
    sd = {k: v for k, v in ref.state_dict().items()
          if not k.startswith("extra.")}
    sd["lin.legacy"] = torch.ones(3)
    path = os.path.join(w, "net.safetensors")
    write_st(path, sd)
    model = Net().to("meta")
    nvt.offload(model, nvme_path=s, weights=path, **KW)
    got = model.state_dict()
    for k, v in ref.state_dict().items():
        if not k.startswith("extra."):
            assert torch.equal(got[k], v), k
    # init ran on extra: kaiming-uniform bounded values, not the file's
    assert got["extra.weight"].abs().max() <= 0.5
    assert model.bn.num_batches_tracked.item() == 7
    nvt.restore(model)
    # without the lists the same file is refused, naming both keys
    Net._keys_to_ignore_on_load_missing = None
    Net._keys_to_ignore_on_load_unexpected = None
    model = Net().to("meta")
    with pytest.raises(ValueError) as ei:
        nvt.offload(model, nvme_path=s, weights=path, **KW)
    assert ('Missing key(s): "extra.weight", "extra.bias"' in str(ei.value))
    assert 'Unexpected key(s): "lin.legacy"' in str(ei.value)


def test_a_split_module_ignored_as_missing_is_initialized_once(diskdir):
    """A Linear split over two layers (its 16 KiB weight fills a buffer)
    whose bias the file lacks (ignored as missing): init runs once, in
    memory, the weight is the file's, the bias init's. On the CPU
    instead of meta, the bias keeps its value."""
    w, s = dirs(diskdir)

    class Seq(torch.nn.Sequential):
        _keys_to_ignore_on_load_missing = [r"\.bias$"]

    calls = []

    def init(m):
        calls.append(type(m).__name__)
        with torch.no_grad():
            m.weight.fill_(0.5)
            m.bias.fill_(-1.0)

    torch.manual_seed(0)
    weight = torch.randn(64, 64)
    path = os.path.join(w, "seq.safetensors")
    write_st(path, {"0.weight": weight})
    model = Seq(torch.nn.Linear(64, 64, device="meta"))
    nvt.offload(model, nvme_path=s, buffer_size="16K", init=init)
    assert nvt.stats(model)["layers"] == 2 and calls == ["Linear"]
    nvt.restore(model)
    calls.clear()
    model = Seq(torch.nn.Linear(64, 64, device="meta"))
    nvt.offload(model, nvme_path=s, buffer_size="16K", init=init,
                weights=path)
    assert nvt.stats(model)["layers"] == 2 and calls == ["Linear"]
    sd = model.state_dict()
    assert torch.equal(sd["0.weight"], weight)
    assert torch.equal(sd["0.bias"], torch.full((64,), -1.0))
    nvt.restore(model)
    model = Seq(torch.nn.Linear(64, 64))
    bias = model[0].bias.detach().clone()
    nvt.offload(model, nvme_path=s, buffer_size="16K", weights=path)
    sd = model.state_dict()
    assert torch.equal(sd["0.weight"], weight)
    assert torch.equal(sd["0.bias"], bias)
    nvt.restore(model)


def test_a_non_persistent_meta_buffer_comes_from_init(diskdir):
    w, s = dirs(diskdir)

    class Rot(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("freq", torch.empty(4), persistent=False)

        def forward(self, x):
            return self.lin(x) * self.freq

    def init(m):
        if isinstance(m, Rot):
            m.freq.copy_(torch.arange(4.0))

    torch.manual_seed(0)
    ref = Rot()
    init(ref)
    path = os.path.join(w, "rot.safetensors")
    write_st(path, ref.state_dict())
    assert "freq" not in ref.state_dict()
    model = Rot().to("meta")
    nvt.offload(model, nvme_path=s, weights=path, init=init, **KW)
    assert model.freq.tolist() == [0.0, 1.0, 2.0, 3.0]
    same(ref.state_dict(), model.state_dict())
    x = torch.randn(2, 4)
    assert torch.equal(ref(x), model(x))
    nvt.restore(model)


@pytest.mark.parametrize("name", ["llama-tied", "llama", "gpt2"])
@pytest.mark.parametrize("shard", ["50GB", "20KB"])
def test_hugging_face_models_equal_from_pretrained(diskdir, name, shard):
    cls, cfg = hf_models()[name]
    w, s = dirs(diskdir)
    torch.manual_seed(0)
    cls(cfg).save_pretrained(w, max_shard_size=shard)
    assert ("model.safetensors.index.json" in os.listdir(w)) == (
        shard == "20KB")
    hf = cls.from_pretrained(w)
    model = on_meta(cls, cfg)
    nvt.offload(model, nvme_path=s, weights=w, **KW)
    same(hf.state_dict(), model.state_dict())
    x = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    assert torch.equal(loss(hf, x), loss(model, x))
    nvt.restore(model)


def test_hugging_face_legacy_rotary_buffers_in_a_file_are_ignored(diskdir):
    """Old Llama checkpoints carry model.layers.N.self_attn.rotary_emb.
    inv_freq; from_pretrained ignores them, and so does offload."""
    cls, cfg = hf_models()["llama"]
    w, s = dirs(diskdir)
    torch.manual_seed(0)
    ref = cls(cfg)
    sd = dict(ref.state_dict())
    sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    path = os.path.join(w, "old.safetensors")
    write_st(path, sd)
    model = on_meta(cls, cfg)
    nvt.offload(model, nvme_path=s, weights=path, **KW)
    same(ref.state_dict(), model.state_dict())
    nvt.restore(model)
    sd["model.layers.0.self_attn.other"] = torch.ones(4)
    write_st(path, sd)
    model = on_meta(cls, cfg)
    with pytest.raises(ValueError, match='Unexpected key.s.: '
                       '"model.layers.0.self_attn.other"'):
        nvt.offload(model, nvme_path=s, weights=path, **KW)


def test_read_into_and_tensor(diskdir, monkeypatch):
    """The reader's API: the same dtype read straight in, another cast
    through the staging buffers (in pieces), a strided destination, a
    new tensor; a wrong shape or key refused."""
    w, _ = dirs(diskdir)
    g = torch.Generator().manual_seed(5)
    a = torch.randn(37, 29, generator=g)
    b = (torch.randn(1001, generator=g) * 100).to(torch.bfloat16)
    path = os.path.join(w, "t.safetensors")
    write_st(path, {"a": a, "b": b})
    monkeypatch.setattr(_wread, "STAGE", 4096)  # several pieces
    with nvt.open_weights(path) as src:
        assert sorted(src.keys()) == ["a", "b"] and len(src) == 2
        assert src.dtype("b") == torch.bfloat16 and src.shape("a") == (37, 29)
        assert src.dtype_name("b") == "BF16" and src.file("a") == path
        assert torch.equal(src.tensor("a"), a)
        d = nvswap.pinned_empty((37, 29), torch.float32)
        src.read_into("a", d)
        assert torch.equal(d, a)
        d64 = torch.empty(37, 29, dtype=torch.float64)
        src.read_into("a", d64)  # staged and cast: 4 pieces
        assert torch.equal(d64, a.double())
        f32 = torch.empty(1001)
        src.read_into("b", f32)
        assert torch.equal(f32, b.float())
        t = torch.empty(29, 37).t()  # strided
        src.read_into("a", t)
        assert torch.equal(t, a)
        with pytest.raises(ValueError, match=r"'a' is \[37, 29\] in .*"
                           r"the destination \[29, 37\]"):
            src.read_into("a", torch.empty(29, 37))
        with pytest.raises(KeyError, match="no tensor 'c'"):
            src.tensor("c")
        assert src.equal("a", "a") and not src.equal("a", "b")


def test_resume_takes_the_checkpoint_and_reads_no_parameter(diskdir,
                                                           monkeypatch):
    w, s = dirs(diskdir)
    ref = ref_gpt()
    nvt.save_pretrained(ref, w)
    model = meta_gpt()
    nvt.offload(model, nvme_path=s, weights=w, persist="persistent", **KW)
    check_loaded(ref, model)
    opt = nvt.Adam(model.parameters(), lr=1e-2)
    train(model, opt, batches(1))
    nvt.checkpoint(model).wait()
    trained = model.state_dict()
    nvt.restore(model)
    assert not torch.equal(trained["emb.weight"], ref.emb.weight)

    read = []
    real = _weights.Safetensors.submit_into
    monkeypatch.setattr(_weights.Safetensors, "submit_into",
                        lambda self, k, d: read.append(k) or real(self, k, d))
    model = meta_gpt()
    nvt.offload(model, nvme_path=s, weights=w, persist="resume", **KW)
    assert nvt.stats(model)["resumed"]["steps"] == 1
    assert read == ["mask"]  # the buffer only: no parameter read
    same(trained, model.state_dict())
    nvt.restore(model)


def test_a_read_that_fails_midway_leaves_the_model_as_given(diskdir,
                                                           monkeypatch):
    """The file is cut short after the checks, before the third layer is
    read: offload raises the read's EINVAL, the model's parameters are its
    meta ones again, and no swap file remains. (The copy: a layer read
    in place reads nothing at offload.)"""
    monkeypatch.setattr(_load, "IN_PLACE", False)
    w, s = dirs(diskdir)
    path = os.path.join(w, "model.safetensors")
    nvt.save_pretrained(ref_gpt(), w)
    model = meta_gpt()
    given = dict(model.named_parameters())
    calls = []
    real = _load.Loader.add

    def add(self, *a):
        calls.append(1)
        if len(calls) == 3:
            os.truncate(path, 200)
        return real(self, *a)

    monkeypatch.setattr(_load.Loader, "add", add)
    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(model, nvme_path=s, weights=w, **KW)
    assert ei.value.errno == errno.EINVAL, ei.value
    assert path in str(ei.value) and "beyond the end of the file" in str(
        ei.value)
    assert all_meta(model) and not hasattr(model, "_nvswap_engine")
    assert all(p is given[n] for n, p in model.named_parameters())
    assert files_under(s) == []


def test_the_safetensors_package_reads_what_save_pretrained_wrote(diskdir):
    st = safetensors_torch()
    w, _ = dirs(diskdir)
    ref = ref_gpt(tie=True)
    nvt.save_pretrained(ref, w)
    got = st.load_file(os.path.join(w, "model.safetensors"))
    want = {k: v for k, v in ref.state_dict().items() if k != "head.weight"}
    same(want, got)


PEAK = """
import sys, torch, nvswap.torch as nvt
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
W, L = 1024, {layers}
model = torch.nn.Sequential(*[torch.nn.Linear(W, W, bias=False,
                                              device="meta")
                              for _ in range(L)])
base = hwm()                     # python + torch
nvt.offload(model, nvme_path={swap!r}, buffer_size="4M", buffer_count=3,
            optimizer_buffer_size="4M", optimizer_buffer_count=2,
            weights={path!r})
load = hwm() - base
with nvt.gathered(model[L - 2]):
    want = torch.randn(W, W, generator=torch.Generator().manual_seed(L - 2))
    assert torch.equal(model[L - 2].weight, want)
nvt.save_pretrained(model, {out!r}, max_shard_size="64MB")
st = nvt.stats(model)
print(st["parameter_bytes"], st["pool_bytes"], load, hwm() - base)
"""


def _peak(diskdir, layers):
    """A file of layers 4 MiB Linear weights (written here, layer by
    layer), loaded by offload(weights=) and saved by save_pretrained in a
    fresh process: (model bytes, pool bytes, peak of the load, peak after
    the save) above python + torch."""
    from nvswap.torch._stformat import build_header
    d = os.path.join(diskdir, f"peak{layers}")
    os.makedirs(os.path.join(d, "swap"))
    path = os.path.join(d, "model.safetensors")
    W = 1024
    head, _ = build_header([(f"{i}.weight", "F32", (W, W))
                            for i in range(layers)])
    with open(path, "wb") as f:
        f.write(head)
        for i in range(layers):
            t = torch.randn(W, W, generator=torch.Generator().manual_seed(i))
            f.write(t.numpy().tobytes())
    code = PEAK.format(layers=layers, swap=os.path.join(d, "swap"),
                       path=path, out=os.path.join(d, "out"))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return [int(x) for x in r.stdout.split()]


def test_peak_memory_of_load_and_save_is_bounded_by_the_pools(diskdir):
    """A model 4x and 16x the parameter pool, loaded and saved back: the
    peak above python + torch stays under the pools + 64 MiB for the load
    (the reader's bounce buffers, torch, malloc), plus the checkpoint
    writer's staging (16 MiB x 4) for the save, and grows by less than
    one layer from the smaller model to the 4x larger."""
    small, large = _peak(diskdir, 12), _peak(diskdir, 48)
    layer, writer = 4 << 20, 64 << 20
    assert small[0] >= 4 * 3 * layer and large[0] >= 16 * 3 * layer
    for model, pools, load, save in (small, large):
        assert load < pools + (64 << 20), (model, pools, load)
        assert save < pools + writer + (64 << 20), (model, pools, save)
    assert large[2] - small[2] < layer, (small, large)
    assert large[3] - small[3] < layer, (small, large)
