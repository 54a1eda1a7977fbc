# SPDX-License-Identifier: MIT
"""offload(dtype=torch.bfloat16): bf16 parameters for forward and backward
with fp32 master weights and Adam state in the optimizer set, bit for bit
as the reference written here (a bf16 model, fp32 master copies stepped
by torch.optim.AdamW, the bf16 copies refreshed after each step), with
half the bytes read."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402
from torchhelp import (GPT, MasterAdamW, batches, clip_train,  # noqa: E402
                       same, same_optimizer)

BF16 = torch.bfloat16


def run(model, opt, data, clip=None, accumulate=1):
    """Losses and clipped norms (clip: max_norm, or None: no clipping)."""
    losses, norms = clip_train(
        model, opt, data, clip and torch.nn.utils.clip_grad_norm_,
        accumulate, **({"max_norm": clip} if clip else {}))
    return losses, [n.item() for n in norms]


def pair(swapdir, tie=True, rank=0, **kw):
    torch.manual_seed(0)
    src = GPT(tie=tie)
    ref = copy.deepcopy(src).to(BF16)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=BF16, rank=rank)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, **kw)
    return ref, off, ro, oo


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("clip", [None, 0.5])
def test_bf16_with_fp32_masters_is_bit_for_bit(swapdir, tie, clip):
    ref, off, ro, oo = pair(swapdir, tie=tie)
    assert {p.dtype for p in off.parameters()} == {BF16}
    assert off.mask.dtype == BF16  # buffers too, as model.to(bf16)
    data = batches(4)
    want, got = run(ref, ro, data, clip), run(off, oo, data, clip)
    assert want == got
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)
    assert nvt.stats(off)["dtype"] == BF16


def test_bf16_gradients_accumulate_as_torchs(swapdir):
    ref, off, ro, oo = pair(swapdir)
    data = batches(6)
    assert (run(ref, ro, data, clip=1.0, accumulate=3) ==
            run(off, oo, data, clip=1.0, accumulate=3))
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)


def test_bf16_step_in_backward(swapdir):
    ref, off, ro, oo = pair(swapdir, step_in_backward=True)
    data = batches(3)
    assert run(ref, ro, data) == run(off, oo, data)
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)


def test_bf16_reads_half_the_parameter_bytes(swapdir):
    torch.manual_seed(0)
    src = GPT(layers=2)
    runs = {}
    for rank, dtype in enumerate((None, BF16)):
        m = copy.deepcopy(src)
        nvt.offload(m, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                    dtype=dtype, rank=rank)
        opt = nvt.AdamW(m.parameters(), lr=1e-2)
        # wait() ends each deferred step, so the window holds one whole
        # step: what a step overlapping the next forward finds still
        # resident depends on timing, and would vary the count
        run(m, opt, batches(1))
        nvt.wait(m)
        before = nvt.stats(m)["param"]["bytes_read"]
        run(m, opt, batches(1, seed=2))  # a step after the first
        nvt.wait(m)
        runs[dtype] = nvt.stats(m)["param"]["bytes_read"] - before
        assert nvt.stats(m)["parameter_bytes"] == sum(
            p.numel() * (2 if dtype else 4) for p in src.parameters())
    ratio = runs[BF16] / runs[None]
    assert 0.45 < ratio < 0.56, runs  # 64-byte packing aside, a half


def test_optimizer_state_dict_with_masters_round_trips(swapdir, diskdir):
    ref, off, ro, oo = pair(swapdir)
    data = batches(4)
    run(ref, ro, data)
    run(off, oo, data[:2])
    saved_model, saved_opt = off.state_dict(), oo.state_dict()
    torch.save(saved_opt, diskdir + "/opt.pt")
    nvt.restore(off)
    torch.manual_seed(5)
    again = GPT(tie=True)
    nvt.offload(again, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=BF16, rank=1)
    again.load_state_dict(saved_model)
    opt = nvt.AdamW(again.parameters(), lr=1e-2)
    opt.load_state_dict(torch.load(diskdir + "/opt.pt"))
    run(again, opt, data[2:])
    same(ref.state_dict(), again.state_dict())
    same_optimizer(ro, opt)


def test_persistent_bf16_resumes_bit_for_bit(swapdir):
    ref, off, ro, _ = pair(swapdir)
    data = batches(4)
    run(ref, ro, data)
    nvt.restore(off)
    torch.manual_seed(0)
    src = GPT(tie=True)
    first = copy.deepcopy(src)
    nvt.offload(first, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=BF16, rank=2, persist="persistent")
    opt = nvt.AdamW(first.parameters(), lr=1e-2)
    run(first, opt, data[:2])
    nvt.checkpoint(first).wait()
    nvt.restore(first)
    with pytest.raises(ValueError, match="dtype"):
        nvt.offload(copy.deepcopy(src), nvme_path=swapdir,
                    buffer_size="64K", buffer_count=4, rank=2,
                    persist="resume")
    second = copy.deepcopy(src)
    nvt.offload(second, nvme_path=swapdir, buffer_size="64K",
                buffer_count=4, dtype=BF16, rank=2, persist="resume")
    opt = nvt.AdamW(second.parameters(), lr=1e-2)
    run(second, opt, data[2:])
    same(ref.state_dict(), second.state_dict())
    same_optimizer(ro, opt)


def test_dtype_bad_input(swapdir):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="float16 needs loss scaling"):
        nvt.offload(GPT(), nvme_path=swapdir, dtype=torch.float16)
    with pytest.raises(ValueError, match="must be torch.bfloat16"):
        nvt.offload(GPT(), nvme_path=swapdir, dtype=torch.int8)
    model = GPT()
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                dtype=torch.float32)  # none: no masters
    assert nvt.stats(model)["dtype"] is None
    assert "master" not in nvt.AdamW(model.parameters()).state_dict()


def test_masters_that_do_not_fit_an_optimizer_buffer_are_named(swapdir):
    torch.manual_seed(0)
    model = GPT()
    with pytest.raises(OSError) as ei:
        nvt.offload(model, nvme_path=swapdir, buffer_size="64K",
                    dtype=BF16, optimizer_buffer_size="4K")
    assert "fp32 master weights of layer" in str(ei.value)
    assert "an optimizer pool buffer (4096 bytes) cannot hold 4096 " \
        "elements of the fp32 master weights of layer" in str(ei.value)
    assert "optimizer_buffer_size" in str(ei.value)
    assert all(p.dtype == torch.float32 and not p.is_meta
               for p in model.parameters())  # given back as they were


@pytest.mark.parametrize("file_dtype", [torch.float32, BF16])
def test_weights_load_into_bf16_layers_and_fp32_masters(swapdir, diskdir,
                                                        file_dtype):
    """weights= with dtype=bf16: the masters take the file's values (an
    fp32 file's exactly), the layers them rounded; then training is the
    reference's from the same values."""
    torch.manual_seed(0)
    src = GPT(tie=True).to(file_dtype)
    nvt.save_pretrained(src, diskdir + "/w")
    torch.manual_seed(9)  # other values: the file's must win
    off = GPT(tie=True)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=BF16, weights=diskdir + "/w")
    ref = copy.deepcopy(src).to(BF16)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    same(ref.state_dict(), off.state_dict())  # before any step
    assert all(torch.equal(m.detach(), oo.state_dict()["master"][i])
               for i, m in enumerate(ro.masters))
    data = batches(3)
    assert run(ref, ro, data, clip=1.0) == run(off, oo, data, clip=1.0)
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)


def test_a_state_dict_loaded_into_a_bf16_model_reaches_the_masters(swapdir):
    """load_state_dict() writes the layers and, in full precision, the
    fp32 masters: the next step steps from the loaded values (it stepped
    from the old masters, silently undoing the load, before)."""
    torch.manual_seed(0)
    src = GPT(tie=True)
    torch.manual_seed(3)
    loaded = GPT(tie=True)  # fp32 values to load
    ref = copy.deepcopy(loaded).to(BF16)
    ro = MasterAdamW(ref.parameters(), loaded.parameters(), lr=1e-2)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=BF16)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    off.load_state_dict(loaded.state_dict())
    same(ref.state_dict(), off.state_dict())
    data = batches(2)
    assert run(ref, ro, data) == run(off, oo, data)
    same(ref.state_dict(), off.state_dict())
    same_optimizer(ro, oo)


def test_gathered_modify_reaches_the_masters(swapdir):
    ref, off, ro, oo = pair(swapdir)
    with nvt.gathered(off.head, modify=True):
        with torch.no_grad():
            off.head.weight.mul_(0.5)
    with torch.no_grad():
        ref.head.weight.mul_(0.5)
        ro.masters[0].copy_(ref.head.weight)  # tied: emb = head
    data = batches(2)
    assert run(ref, ro, data) == run(off, oo, data)
    same(ref.state_dict(), off.state_dict())


def test_the_optimizer_pool_must_hold_a_steps_groups(swapdir):
    torch.manual_seed(0)
    model = GPT()
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K", dtype=BF16,
                optimizer_buffer_count=2)
    with pytest.raises(ValueError, match="3 optimizer pool buffers, the "
                       "pool has 2"):
        nvt.AdamW(model.parameters())
    nvt.AdamW(model.parameters(), step_in_backward=True)  # state+masters


def test_a_bad_master_entry_is_refused_before_anything_is_written(swapdir):
    ref, off, ro, oo = pair(swapdir)
    run(off, oo, batches(1))
    sd = oo.state_dict()
    before = copy.deepcopy(sd)
    bad = copy.deepcopy(sd)
    bad["master"][1] = torch.zeros(3)  # a wrong shape, after a good one
    bad["master"][0] = torch.zeros_like(bad["master"][0])
    with pytest.raises(ValueError, match="has shape"):
        oo.load_state_dict(bad)
    same(before["master"], oo.state_dict()["master"])  # nothing written
