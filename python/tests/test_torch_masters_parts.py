# SPDX-License-Identifier: MIT
"""bf16 weights whose fp32 masters are larger than an optimizer pool
buffer: a layer's masters in parts (nvswap.torch._mixed.Masters, groups
cut as _parts.py cuts Adam state), the layer's Adam state in parts
within each of theirs, so that the buffer need only hold the bf16
gradient region (half the layer's masters, a quarter of its AdamW
state). Every
step, state dict, load, resume and failure must be the whole layer's
bit for bit, as the in-memory reference (torch's AdamW over fp32 master
copies of the bf16 model) gives. GRAIN is lowered so that the small
GPT's parameters are cut inside. The pool has the 3 optimizer buffers a
step needs, no more: a step that held two parts of the masters at once
would find none free."""
import copy
import errno

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _parts, _pieces  # noqa: E402
from nvswap.torch._common import GRAPH_TASK  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402

from torchhelp import (GPT, STEP_MODES, Failing, MasterAdamW,  # noqa: E402
                       batches, clip_fires_once, equal_steps, failing_step,
                       lm_loss, same, same_optimizer, steps_in_mode)

BF16 = torch.bfloat16
# the attention layer (in_proj: 3168 elements) has a 6.3 KB bf16
# gradient region; its fp32 masters (12.7 KB) and AdamW state (25 KB)
# are cut to fit 8 KB
OPT_BUF = 8 << 10
_POOLS = dict(buffer_size="64K", buffer_count=4, dtype=BF16,
              optimizer_buffer_size=OPT_BUF, optimizer_buffer_count=3)


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(_parts, "GRAIN", 64)
    monkeypatch.setattr(_pieces, "CHUNK", 640)


def _pair(swapdir, tie=False, **okw):
    """A bf16 GPT with MasterAdamW over its fp32 source, and the source
    offloaded with dtype=bf16 and nvswap.torch's AdamW (okw)."""
    torch.manual_seed(0)
    src = GPT(layers=2, tie=tie)
    ref = copy.deepcopy(src).to(BF16)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, **_POOLS)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2,
                     weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1, **okw)
    return ref, off, ro, oo


def _check_cut(eng, opt=None):
    """Some layer's masters are in parts, each within a buffer, covering
    every floating parameter once; each part of the Adam state (opt)
    lies within one part of the masters."""
    m = eng.masters
    assert m.cuts, "no layer's masters were cut in parts"
    bs = eng.gswap.stats()["buffer_size"]
    for layer, parts in m.cuts.items():
        runs = {}
        for k, part in enumerate(parts):
            assert sum(_parts.up((b - a) * 4) for _, a, b in part) <= bs
            for i, a, b in part:
                runs.setdefault(i, []).append((a, b, k))
        assert sorted(runs) == m.index[layer]
        for i, got in runs.items():
            ends = [0] + [b for _, b, _ in got]
            assert [a for a, _, _ in got] == ends[:-1]
            assert ends[-1] == eng.layers[layer][i].numel()
        if opt is None:
            continue
        for part in _parts.layout(opt, layer):
            ks = {m.part_of(layer, i, a) for i, _, a, _ in part}
            assert len(ks) == 1, part
            for i, _, a, b in part:
                lo, hi = next((x, y) for x, y, k in runs[i] if k in ks)
                assert lo <= a < b <= hi


@pytest.mark.parametrize("mode", sorted(STEP_MODES))
def test_masters_in_parts_step_bit_for_bit(swapdir, small, mode):
    ref, off, ro, oo = _pair(swapdir, **STEP_MODES[mode])
    steps_in_mode(ref, ro, off, oo, batches(4), mode)
    nvt.wait(off)
    _check_cut(oo._eng, oo)
    if mode == "speculated" and GRAPH_TASK is not None:
        # (torch 1.x never speculates: test_torch_spec.py)
        assert nvt.stats(off)["speculated_steps"] >= 2
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)
    nvt.restore(off)


@pytest.mark.parametrize("tie", [False, True])
def test_masters_in_parts_with_clipping_that_fires(swapdir, small, tie):
    ref, off, ro, oo = _pair(swapdir, tie=tie)
    clip_fires_once(ref, ro, off, oo, same_optimizer)
    _check_cut(oo._eng, oo)
    nvt.restore(off)


def test_state_dicts_and_loads_through_master_parts(swapdir, small):
    """opt.state_dict() puts the masters' parts together; its
    load_state_dict() into a fresh model writes them part by part;
    model.load_state_dict() and gathered(modify=True) reach every part
    of the masters; training on is the reference's bit for bit."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(5)
    equal_steps(ref, ro, off, oo, data[:2], 1.0)
    same_optimizer(ro, oo)
    saved_model, saved_opt = off.state_dict(), oo.state_dict()

    torch.manual_seed(7)  # other values: the loaded ones must win
    again = GPT(layers=2)
    nvt.offload(again, nvme_path=swapdir + "/2", **_POOLS)
    _check_cut(engine_of(again))
    again.load_state_dict(saved_model)
    oa = nvt.AdamW(again.parameters(), lr=1e-2, weight_decay=0.1)
    oa.load_state_dict(copy.deepcopy(saved_opt))
    _check_cut(oa._eng, oa)
    same_optimizer(ro, oa)
    equal_steps(ref, ro, again, oa, data[2:3], 1.0)
    same(ref.state_dict(), again.state_dict())
    same_optimizer(ro, oa)

    # weights changed in place reach the masters' parts: every master
    # of the module takes its bf16 value (what the block wrote)
    with nvt.gathered(again.blocks[0].self_attn, modify=True):
        with torch.no_grad():
            again.blocks[0].self_attn.in_proj_weight.mul_(0.5)
    names = [n for n, _ in ref.named_parameters()]
    with torch.no_grad():
        ref.blocks[0].self_attn.in_proj_weight.mul_(0.5)
        for n, p in ref.blocks[0].self_attn.named_parameters():
            ro.masters[names.index("blocks.0.self_attn." + n)].copy_(p)
    equal_steps(ref, ro, again, oa, data[3:], 1.0)
    same(ref.state_dict(), again.state_dict())
    same_optimizer(ro, oa)
    nvt.restore(off)
    nvt.restore(again)


def test_a_state_dict_loaded_reaches_every_master_part(swapdir, small):
    """model.load_state_dict() with fp32 values: every part of the
    masters takes them exactly (the layers them rounded), and the next
    steps step from them."""
    torch.manual_seed(3)
    loaded = GPT(layers=2)  # fp32 values to load
    ref = copy.deepcopy(loaded).to(BF16)
    ro = MasterAdamW(ref.parameters(), loaded.parameters(), lr=1e-2,
                     weight_decay=0.1)
    _, off, _, oo = _pair(swapdir)
    _check_cut(oo._eng)
    off.load_state_dict(loaded.state_dict())
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)  # the masters: the loaded fp32 values
    equal_steps(ref, ro, off, oo, batches(2), 1.0)
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)
    nvt.restore(off)


def test_a_persistent_set_resumes_master_parts_as_saved(swapdir, small):
    """The checkpoint records the masters' parts; a resume lays them out
    as saved (a larger buffer does not re-cut them) and trains on bit
    for bit; a buffer smaller than a saved part is refused naming the
    size to give."""
    ref, _, ro, _ = _pair(swapdir + "/ref")
    data = batches(4)
    torch.manual_seed(0)
    src = GPT(layers=2)
    first = copy.deepcopy(src)
    nvt.offload(first, nvme_path=swapdir, persist="persistent", **_POOLS)
    of = nvt.AdamW(first.parameters(), lr=1e-2, weight_decay=0.1)
    equal_steps(ref, ro, first, of, data[:2], 1.0)
    cuts = copy.deepcopy(of._eng.masters.cuts)
    parts = copy.deepcopy(of._parts)
    nvt.checkpoint(first).wait()
    nvt.restore(first)

    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(copy.deepcopy(src), nvme_path=swapdir,
                    persist="resume", **dict(_POOLS,
                                             optimizer_buffer_size="4K"))
    assert ei.value.errno == errno.EFBIG
    assert "a part of the fp32 master weights of layer " in str(ei.value)
    assert "was saved with 8192 bytes" in str(ei.value)
    assert "optimizer_buffer_size= of at least 8192" in str(ei.value)

    back = copy.deepcopy(src)
    nvt.offload(back, nvme_path=swapdir, persist="resume",
                **dict(_POOLS, optimizer_buffer_size="256K"))
    ob = nvt.AdamW(back.parameters(), lr=1e-2, weight_decay=0.1)
    assert ob._eng.masters.cuts == cuts and ob._parts == parts
    same_optimizer(ro, ob)
    equal_steps(ref, ro, back, ob, data[2:], 1.0)
    same(ref.state_dict(), back.state_dict())
    same_optimizer(ro, ob)
    nvt.restore(back)


@pytest.mark.parametrize("file_dtype", [torch.float32, BF16])
def test_weights_load_into_master_parts(swapdir, diskdir, small,
                                        file_dtype):
    """weights= with the masters in parts: each part takes its elements
    of the file (an fp32 file's exactly, a bf16 one's widened), the
    layer them rounded; training is the reference's from the same
    values."""
    torch.manual_seed(0)
    src = GPT(layers=2).to(file_dtype)
    nvt.save_pretrained(src, diskdir + "/w")
    torch.manual_seed(9)  # other values: the file's must win
    off = GPT(layers=2)
    nvt.offload(off, nvme_path=swapdir, weights=diskdir + "/w", **_POOLS)
    ref = copy.deepcopy(src).to(BF16)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2,
                     weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1)
    _check_cut(oo._eng)
    same(ref.state_dict(), off.state_dict())  # before any step
    same_optimizer(ro, oo)
    equal_steps(ref, ro, off, oo, batches(3), 1.0)
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)
    nvt.restore(off)


@pytest.mark.parametrize("mode", ["in step()", "deferred"])
def test_a_failed_read_of_a_master_part_is_retried(swapdir, small, mode):
    """The read of a layer's second master part fails during its step:
    the step raises naming the layer and its fp32 masters, nothing of
    what was lent is left behind, and the retry steps the parts left,
    bit for bit the reference's."""
    ref, off, ro, oo = _pair(swapdir, **STEP_MODES[mode])
    data = batches(3)
    equal_steps(ref, ro, off, oo, data[:1], 1.0)
    nvt.wait(off)
    masters = oo._eng.masters
    layer = next(la for la, p in masters.cuts.items() if len(p) >= 2)
    masters.swap = spy = Failing(masters.swap, _parts.group(layer, 1))
    err = failing_step(ref, ro, off, oo, data[1])
    assert err.errno == errno.EIO
    assert f"layer {layer}" in str(err)
    assert "fp32 masters" in str(err)
    assert oo._partial[layer][0] >= 1  # the parts before it kept
    assert oo._lending is None
    assert all(t.numel() == 0 for t in oo._proxy.values())
    if mode == "in step()":
        oo.step()  # finishes the step: the parts left, once
    else:
        nvt.wait(off)  # the deferred update, retried
    assert not oo._partial
    oo.zero_grad()
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)
    equal_steps(ref, ro, off, oo, data[2:], 1.0)
    same(ref.state_dict(), off.state_dict())
    masters.swap = spy._swap
    nvt.restore(off)


def test_too_many_parts_are_refused_naming_the_buffers(swapdir, small,
                                                       monkeypatch):
    """At most MAX_PARTS parts a layer: more is EFBIG naming how many
    buffers the layer needs, for the masters (at offload()) and for the
    Adam state (at the optimizer) alike; nothing is left offloaded."""
    monkeypatch.setattr(_parts, "MAX_PARTS", 1)
    torch.manual_seed(0)
    model = GPT(layers=2)
    with pytest.raises(nvswap.Error) as ei:
        nvt.offload(model, nvme_path=swapdir, **_POOLS)
    assert ei.value.errno == errno.EFBIG
    assert "fp32 master weights of layer" in str(ei.value)
    assert "would take 2 optimizer pool buffers of 8192 bytes; at most 1" \
        in str(ei.value)
    assert all(p.dtype == torch.float32 and not p.is_meta
               for p in model.parameters())

    nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                optimizer_buffer_size=16 << 10)  # fp32: no masters
    with pytest.raises(nvswap.Error) as ei:
        nvt.AdamW(model.parameters(), lr=1e-2)
    assert ei.value.errno == errno.EFBIG
    assert "the state of layer" in str(ei.value)
    assert "would take 2 optimizer pool buffers of 16384 bytes; at most 1" \
        in str(ei.value)
    nvt.restore(model)


def test_a_first_step_torch_makes_whole_is_refused_with_master_parts(
        swapdir, small, monkeypatch):
    """A first step whose state form nvswap.torch does not know is lent
    to torch whole (it makes the state); with a layer's masters in parts
    that cannot be: EFBIG naming the layer, before anything of it
    changed (the layers before it are stepped: the step is half done,
    as after any failure)."""
    known = _pieces.first_state
    monkeypatch.setattr(_pieces, "first_state", lambda *a, **k: None)
    ref, off, ro, oo = _pair(swapdir, defer=False)
    tok = batches(1)[0]
    lm_loss(off, tok).backward()
    with pytest.raises(nvswap.Error) as ei:
        oo.step()
    assert ei.value.errno == errno.EFBIG
    assert "are in parts, larger than an optimizer pool buffer" in \
        str(ei.value)
    layer = int(str(ei.value).split("masters of layer ")[1].split()[0])
    assert layer in oo._eng.masters.cuts
    assert layer not in oo._done and layer not in oo._partial
    assert layer not in oo._keys  # no state registered
    assert oo._lending is None
    # a form it knows again: the step finishes, the layers not stepped
    # once each, equal to the reference's
    monkeypatch.setattr(_pieces, "first_state", known)
    oo.step()
    oo.zero_grad()
    lm_loss(ref, tok).backward()
    ro.step()
    ro.zero_grad()
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)
    nvt.restore(off)
