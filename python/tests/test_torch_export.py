# SPDX-License-Identifier: MIT
"""nvswap.torch.save_pretrained: an offloaded (or in-memory) model written
as Hugging Face writes it, one layer in memory at a time: the files
transformers' from_pretrained, the safetensors package and
offload(weights=) read back bit for bit, HF's file names, shard split,
index and tied-weight naming, stale shards removed, a full disk leaving
no partial file."""
import errno
import json
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch._export import parse_shard_size  # noqa: E402
from torchhelp import GPT, batches, same, train  # noqa: E402
from weighthelp import (hf, hf_models, meta_gpt, on_meta,  # noqa: E402
                        read_st, safetensors_torch)

KW = dict(buffer_size="64K", buffer_count=3)


def dirs(diskdir):
    out, s = os.path.join(diskdir, "out"), os.path.join(diskdir, "swap")
    os.makedirs(s)
    return out, s


def trained_gpt(swap, tie):
    """An offloaded GPT one Adam step away from its initialization."""
    torch.manual_seed(0)
    model = nvt.offload(GPT(tie=tie), nvme_path=swap, **KW)
    train(model, nvt.Adam(model.parameters(), lr=1e-2), batches(1))
    return model


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("shard", [None, 20000])
def test_an_offloaded_gpt_saved_reads_back_bit_for_bit(diskdir, tie, shard):
    out, s = dirs(diskdir)
    model = trained_gpt(s, tie)
    want = model.state_dict()
    kw = {} if shard is None else {"max_shard_size": shard}
    paths = nvt.save_pretrained(model, out, **kw)
    names = sorted(os.listdir(out))
    assert names == sorted(os.path.basename(p) for p in paths)
    if shard is None:
        assert names == ["model.safetensors"]
    else:
        n = len(names) - 1
        assert n > 1 and names == sorted(
            [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
            + ["model.safetensors.index.json"])
    with nvt.open_weights(out) as src:
        # a tied parameter once, under its first name
        assert sorted(src.keys()) == sorted(
            k for k in want if not (tie and k == "head.weight"))
        for k in src.keys():
            assert torch.equal(src.tensor(k), want[k]), k
    for f in paths:
        if f.endswith(".safetensors"):
            head, _ = read_st(f)
            assert head["__metadata__"] == {"format": "pt"}
    again = meta_gpt(tie)
    s2 = os.path.join(diskdir, "swap2")
    os.makedirs(s2)
    nvt.offload(again, nvme_path=s2, weights=out, **KW)
    same(want, again.state_dict())
    nvt.restore(again)
    nvt.restore(model)


def test_one_layer_is_held_at_a_time(diskdir, monkeypatch):
    out, s = dirs(diskdir)
    model = trained_gpt(s, tie=True)
    nvt.wait(model)  # its last (deferred) step applied
    eng = nvt.engine_of(model)
    held, acquired = [], []
    real_acq, real_rel = eng.acquire, eng.release

    def acquire(layer, host=False):
        acquired.append(layer)
        real_acq(layer, host)
        held.append(sum(1 for r in eng.refs if r))

    monkeypatch.setattr(eng, "acquire", acquire)
    monkeypatch.setattr(eng, "release", real_rel)
    nvt.save_pretrained(model, out, max_shard_size=20000)
    assert max(held) == 1
    assert sorted(acquired) == list(range(len(eng.layers)))  # each once
    assert nvt.stats(model)["layers_held"] == 0
    nvt.restore(model)


@pytest.mark.parametrize("name", ["llama-tied", "llama", "gpt2"])
def test_hugging_face_models_round_trip_through_from_pretrained(diskdir,
                                                               name):
    cls, cfg = hf_models()[name]
    out, s = dirs(diskdir)
    src = os.path.join(diskdir, "src")
    torch.manual_seed(0)
    cls(cfg).save_pretrained(src)
    model = on_meta(cls, cfg)
    nvt.offload(model, nvme_path=s, weights=src, **KW)
    x = torch.randint(0, 96, (2, 9), generator=torch.Generator().manual_seed(2))
    opt = nvt.AdamW(model.parameters(), lr=1e-2)
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    opt.zero_grad()
    mine = nvt.save_pretrained(model, out, max_shard_size="20KB")
    back = hf().AutoModelForCausalLM.from_pretrained(out)  # config.json
    assert type(back) is cls
    same(model.state_dict(), back.state_dict())
    # the same files, split and index as transformers' own save of a
    # model built in memory (one from_pretrained made saves in the order
    # its files were read, not state_dict()'s: HF's split follows it)
    theirs = os.path.join(diskdir, "theirs")
    fresh = cls(cfg)
    fresh.load_state_dict(back.state_dict())
    fresh.save_pretrained(theirs, max_shard_size="20KB")
    assert sorted(os.listdir(out)) == sorted(os.listdir(theirs))
    assert "config.json" in os.listdir(out)
    index = "model.safetensors.index.json"
    with open(os.path.join(out, index)) as a, \
            open(os.path.join(theirs, index)) as b:
        assert json.load(a) == json.load(b)
    st = safetensors_torch()
    want = back.state_dict()
    for f in mine:
        if f.endswith(".safetensors"):
            for k, v in st.load_file(f).items():
                assert torch.equal(v, want[k]), k
    nvt.restore(model)


def test_files_of_an_earlier_save_are_replaced(diskdir):
    out, s = dirs(diskdir)
    model = trained_gpt(s, tie=False)
    nvt.save_pretrained(model, out, max_shard_size=20000)
    assert len(os.listdir(out)) > 2
    with open(os.path.join(out, "notes.txt"), "w") as f:
        f.write("kept")
    nvt.save_pretrained(model, out)
    assert sorted(os.listdir(out)) == ["model.safetensors", "notes.txt"]
    nvt.save_pretrained(model, out, max_shard_size=20000)
    assert "model.safetensors" not in os.listdir(out)
    with nvt.open_weights(out) as src:
        assert len(src) == len(model.state_dict())
    nvt.restore(model)


def test_max_shard_size():
    # the rule of every size keyword (test_sizes.py): GB decimal as
    # Hugging Face reads it, G and GiB binary
    assert parse_shard_size("5GB") == 5 * 10**9
    assert parse_shard_size("20KB") == 20000
    assert parse_shard_size("5GiB") == parse_shard_size("5G") == 5 << 30
    assert parse_shard_size(4096) == 4096
    for bad in ("GB", "-1MB", " 1.5MB ", "1.5GB", "infGB", "1e-20GB", "0GB",
                "1Gb", "100mb", 0):
        with pytest.raises(ValueError, match=r"^nvswap\.torch\.save_pretrained"
                           r": max_shard_size=.*: must be a byte count > 0 "
                           r".*a size is a whole number of bytes"):
            parse_shard_size(bad)
    for bad in (2.5, True, None):
        with pytest.raises(TypeError, match="max_shard_size must be a byte "
                           "count > 0 .*, not "):
            parse_shard_size(bad)


def test_a_tensor_on_the_meta_device_is_refused_before_any_write(diskdir):
    out, _ = dirs(diskdir)
    model = torch.nn.Linear(4, 4)
    model.bias = torch.nn.Parameter(torch.empty(4, device="meta"))
    with pytest.raises(ValueError, match="'bias' is on the meta device"):
        nvt.save_pretrained(model, out)
    assert os.listdir(out) == []


def test_a_full_disk_leaves_no_partial_file(diskdir, small_tmpfs):
    _, s = dirs(diskdir)
    torch.manual_seed(0)
    big = torch.nn.Sequential(*[torch.nn.Linear(256, 256, bias=False)
                                for _ in range(12)])  # 3 MiB > 2 MiB
    want = big.state_dict()
    nvt.offload(big, nvme_path=s, buffer_size="512K", buffer_count=3)
    with pytest.raises(nvswap.Error) as ei:
        nvt.save_pretrained(big, small_tmpfs)
    assert ei.value.errno == errno.ENOSPC, ei.value
    assert os.listdir(small_tmpfs) == []  # no temp file, no index
    assert nvt.stats(big)["layers_held"] == 0
    same(want, big.state_dict())  # the model goes on
    nvt.restore(big)
