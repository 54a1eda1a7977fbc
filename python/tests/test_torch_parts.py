# SPDX-License-Identifier: MIT
"""A layer whose Adam state is larger than an optimizer pool buffer has
it in parts (nvswap.torch._parts): several groups, each a run of the
layer's elements, stepped one at a time, so that the optimizer pool's
buffers need only hold the gradient region, not twice the layer. The
result must be the whole layer's step bit for bit in every mode, with
amsgrad, bf16 weights with fp32 masters, a state dict saved and loaded,
a persistent set resumed; a failure between two parts is retried from
the part it stopped at, each part stepped once. GRAIN is lowered so that
the small GPT's parameters are cut inside (and CHUNK, so that a part's
pieces are lent in rounds too)."""
import copy
import errno

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _parts, _pieces  # noqa: E402

from torchhelp import (ADAM_KINDS, GPT, STEP_MODES, Failing,  # noqa
                       batches, clip_fires_once, equal_steps, failing_step,
                       masters_steps, same, trained_in_mode)

# the largest layer (in_proj: 3168 elements) has a 12.7 KB gradient
# region: the optimizer buffer holds it, not its 25 KB of AdamW state
OPT_BUF = 16 << 10


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(_parts, "GRAIN", 64)
    monkeypatch.setattr(_pieces, "CHUNK", 640)


_POOLS = dict(buffer_size="64K", buffer_count=4,
              optimizer_buffer_size=OPT_BUF, optimizer_buffer_count=4)


def _offload(model, swapdir, **kw):
    nvt.offload(model, nvme_path=swapdir, **dict(_POOLS, **kw))


def _pair(swapdir, **okw):
    """A 2-layer GPT with torch's AdamW and a copy offloaded with
    nvswap.torch's (okw: its step mode)."""
    torch.manual_seed(0)
    ref = GPT(layers=2)
    off = copy.deepcopy(ref)
    _offload(off, swapdir)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1, **okw)
    return ref, off, ro, oo


def _check_parts(opt):
    """Some layer is in parts, one cut inside a parameter, each part
    within a buffer, and together they cover every state tensor once."""
    assert opt._parts, "no layer's state was cut in parts"
    bs = opt._eng.gswap.stats()["buffer_size"]
    inside = False
    for layer, parts in opt._parts.items():
        ps = opt._eng.layers[layer]
        sizes = {i: 4 for i in range(len(ps))}  # fp32 state
        got = {}
        for part in parts:
            assert _parts.part_bytes(part, sizes) <= bs
            for i, k, a, b in part:
                got.setdefault((i, k), []).append((a, b))
                inside |= a % ps[i].numel() != 0
        assert sorted(got) == sorted(opt._keys[layer])
        for (i, _), runs in got.items():
            ends = [0] + [b for _, b in runs]
            assert [a for a, _ in runs] == ends[:-1]
            assert ends[-1] == ps[i].numel()
    assert inside, "no parameter was cut inside"


@pytest.mark.parametrize("mode", sorted(STEP_MODES))
@pytest.mark.parametrize("kind,kw", ADAM_KINDS)
def test_a_step_in_parts_equals_the_whole_layer_s(swapdir, small, mode,
                                                  kind, kw):
    off, oo = trained_in_mode(kind, kw, mode, nvme_path=swapdir,
                              **_POOLS)
    _check_parts(oo)
    if kind == "Adam":  # three state tensors: more parts than two
        assert max(len(p) for p in oo._parts.values()) >= 3
    nvt.restore(off)


def test_parts_with_clipping_that_fires_and_a_redone_guess(swapdir, small):
    ref, off, ro, oo = _pair(swapdir)
    clip_fires_once(ref, ro, off, oo)
    _check_parts(oo)
    nvt.restore(off)


def test_parts_with_bf16_weights_and_fp32_masters(swapdir, small):
    # the fp32 masters of a layer (12.7 KB) fit a buffer, their state not
    off, oo = masters_steps(
        lambda m: _offload(m, swapdir, dtype=torch.bfloat16))
    _check_parts(oo)
    nvt.restore(off)


def test_state_dict_and_load_state_dict_in_parts(swapdir, small):
    """state_dict() puts a layer's parts together; load_state_dict()
    before any step registers the loaded state in parts, after one
    writes into them; training on is the same bit for bit."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(4)
    equal_steps(ref, ro, off, oo, data[:2], 1.0)
    saved = ro.state_dict()
    same(saved, oo.state_dict())
    _check_parts(oo)
    # into the registered parts (written through the pool)
    oo.load_state_dict(copy.deepcopy(saved))
    same(saved, oo.state_dict())
    # a fresh optimizer: the loaded state registered in parts
    off2 = copy.deepcopy(ref)
    _offload(off2, swapdir + "/2")
    oo2 = nvt.AdamW(off2.parameters(), lr=1e-2, weight_decay=0.1)
    oo2.load_state_dict(copy.deepcopy(saved))
    _check_parts(oo2)
    same(saved, oo2.state_dict())
    equal_steps(ref, ro, off2, oo2, data[2:], 1.0)
    same(ro.state_dict(), oo2.state_dict())
    same(ref.state_dict(), off2.state_dict())
    nvt.restore(off)
    nvt.restore(off2)


def test_a_persistent_set_resumes_its_parts_as_saved(swapdir, small):
    """A checkpoint records the parts; a resume adopts them as saved (a
    larger buffer does not re-cut them), training on bit for bit; a
    buffer smaller than a saved part is refused naming the size."""
    torch.manual_seed(0)
    ref = GPT(layers=2)
    off = copy.deepcopy(ref)
    # (pool buffers are whole 4 KiB pages: 20 KiB here, 16 below)
    _offload(off, swapdir, persist="persistent",
             optimizer_buffer_size=20 << 10)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1)
    data = batches(4)
    equal_steps(ref, ro, off, oo, data[:2], 1.0)
    parts = copy.deepcopy(oo._parts)
    assert max(_parts.part_bytes(p, {0: 4, 1: 4}) for p in parts[1]) == \
        20 << 10  # in_proj's first part fills a buffer
    nvt.checkpoint(off).wait()
    nvt.restore(off)

    small_one = GPT(layers=2)
    _offload(small_one, swapdir, persist="resume",
             optimizer_buffer_size=16 << 10)
    with pytest.raises(nvswap.Error) as ei:
        nvt.AdamW(small_one.parameters(), lr=1e-2, weight_decay=0.1)
    assert ei.value.errno == errno.EFBIG
    assert "resume with optimizer_buffer_size= of at least" in str(ei.value)
    nvt.restore(small_one)

    back = GPT(layers=2)
    _offload(back, swapdir, persist="resume", optimizer_buffer_size="256K")
    ob = nvt.AdamW(back.parameters(), lr=1e-2, weight_decay=0.1)
    assert ob._parts == parts
    same(ro.state_dict(), ob.state_dict())
    equal_steps(ref, ro, back, ob, data[2:], 1.0)
    same(ro.state_dict(), ob.state_dict())
    same(ref.state_dict(), back.state_dict())
    nvt.restore(back)


@pytest.mark.parametrize("mode", ["in step()", "deferred"])
def test_a_failure_between_parts_is_retried_from_the_part_it_stopped_at(
        swapdir, small, mode):
    ref, off, ro, oo = _pair(swapdir, **STEP_MODES[mode])
    data = batches(3)
    equal_steps(ref, ro, off, oo, data[:1], 1.0)
    nvt.wait(off)  # (the deferred step: its state registered)
    layer = next(la for la, p in oo._parts.items() if len(p) >= 2)
    gid = _parts.group(layer, 1)
    oo._swap = spy = Failing(oo._swap, gid)
    err = failing_step(ref, ro, off, oo, data[1])
    assert err.errno == errno.EIO
    assert f"layer {layer}" in str(err)
    assert oo._partial[layer][0] == 1  # part 0 stepped, kept
    if mode == "in step()":
        with pytest.raises(nvswap.Error) as ei:
            oo.state_dict()  # a step half done is not read
        assert ei.value.errno == errno.EBUSY
        oo.step()  # finishes the step: the parts left, once
    else:
        nvt.wait(off)  # the deferred update, retried
    assert spy.failed == 1 and not oo._partial
    # each part of the layer swapped in once: part 1 by the retry only
    mine = [g for g in spy.swapped_in if g % _parts.STRIDE == layer]
    assert mine == [_parts.group(layer, k)
                    for k in range(len(oo._parts[layer]))]
    oo.zero_grad()
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    equal_steps(ref, ro, off, oo, data[2:], 1.0)
    same(ref.state_dict(), off.state_dict())
    oo._swap = spy._swap
    nvt.restore(off)


def test_a_buffer_that_cannot_hold_a_grain_of_state_is_refused(swapdir):
    """A 5120-element weight: its gradient region (20 KB) fits a 24 KB
    buffer, 4096 elements of its two AdamW state tensors (32 KB) do
    not."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 80))
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                optimizer_buffer_size=24 << 10)
    with pytest.raises(nvswap.Error) as ei:
        nvt.AdamW(model.parameters(), lr=1e-2)
    assert ei.value.errno == errno.EFBIG
    assert "(24576 bytes) cannot hold 4096 elements of the state of " \
        "layer 0 (0.weight, 0.bias)" in str(ei.value)
    nvt.restore(model)
