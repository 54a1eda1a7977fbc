# SPDX-License-Identifier: MIT
"""Gradient clipping of an offloaded model: nvt.clip_grad_norm_ and
torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (routed) give torch's
total norm and torch's clipped training, bit for bit, with no extra read
of the gradients once the norm type is known."""
import copy
import math
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402
from torchhelp import GPT, batches, lm_loss, same  # noqa: E402
from torchhelp import clip_train as clipped_train  # noqa: E402


def pair(swapdir, tie=True, seed=0, lr=1e-2, rank=0, **opt_kw):
    torch.manual_seed(seed)
    ref = GPT(tie=tie)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                rank=rank)
    return (ref, off, torch.optim.AdamW(ref.parameters(), lr=lr),
            nvt.AdamW(off.parameters(), lr=lr, **opt_kw))


def check_same(ref_run, off_run):
    (rl, rn), (ol, on) = ref_run, off_run
    assert rl == ol
    assert len(rn) == len(on)
    for a, b in zip(rn, on):
        assert a.dtype == b.dtype and torch.equal(a, b), (a, b)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, 3.0])
@pytest.mark.parametrize("how", ["nvt", "torch"])
def test_clip_grad_norm_is_torchs_bit_for_bit(swapdir, norm_type, how):
    ref, off, ro, oo = pair(swapdir)
    data = batches(4)
    clip = (nvt.clip_grad_norm_ if how == "nvt"
            else torch.nn.utils.clip_grad_norm_)
    kw = {"max_norm": 0.5, "norm_type": norm_type}
    r = clipped_train(ref, ro, data, torch.nn.utils.clip_grad_norm_, **kw)
    o = clipped_train(off, oo, data, clip, **kw)
    check_same(r, o)
    assert all(n.item() > 0.5 for n in o[1])  # it really clipped
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())


def test_clipping_changes_training_as_in_memory(swapdir):
    """The check above would pass if neither clipped: clipped and
    unclipped runs differ, and the offloaded one follows the clipped."""
    ref, off, ro, oo = pair(swapdir)
    data = batches(3)
    free = copy.deepcopy(ref)
    fo = torch.optim.AdamW(free.parameters(), lr=1e-2)
    plain = [lm_loss(free, t).item() for t in data[:1]]
    losses = clipped_train(ref, ro, data, torch.nn.utils.clip_grad_norm_,
                           max_norm=0.1)[0]
    for tok in data:
        loss = lm_loss(free, tok)
        loss.backward()
        fo.step()
        fo.zero_grad()
        plain.append(loss.item())
    assert plain[1:] != losses
    assert clipped_train(off, oo, data, torch.nn.utils.clip_grad_norm_,
                         max_norm=0.1)[0] == losses


def test_accumulated_gradients_are_clipped_as_torch(swapdir):
    ref, off, ro, oo = pair(swapdir)
    data = batches(6)
    kw = {"max_norm": 0.3, "accumulate": 3}
    check_same(clipped_train(ref, ro, data, torch.nn.utils.clip_grad_norm_,
                             **kw),
               clipped_train(off, oo, data, nvt.clip_grad_norm_, **kw))
    same(ref.state_dict(), off.state_dict())


def test_norms_are_taken_in_backward_no_extra_read(swapdir):
    """Once a norm type was asked for, clipping reads nothing more than
    training without it: no gradient (nor state) byte more from the
    optimizer set. (The parameter pool's bytes are not compared: its
    read-ahead may give back a layer that landed after the walk passed
    it and read it again, by the timing of the disk, in either model.)"""
    # both deferred (a loop without clipping would be speculated, and
    # read its gradients back never)
    _, off, _, oo = pair(swapdir, seed=1, speculate=False)
    torch.manual_seed(1)
    other = GPT(tie=True)
    nvt.offload(other, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                rank=1)
    xo = nvt.AdamW(other.parameters(), lr=1e-2, speculate=False)
    data = batches(3)
    clipped_train(off, oo, data[:1], nvt.clip_grad_norm_, max_norm=1.0)
    clipped_train(other, xo, data[:1], lambda ps, **kw: None)
    def read(m):
        return nvt.stats(m)["optimizer"]["bytes_read"]

    a0, b0 = read(off), read(other)
    assert a0 > b0  # the first clip read the gradients back once
    clipped_train(off, oo, data[1:], nvt.clip_grad_norm_, max_norm=1.0)
    clipped_train(other, xo, data[1:], lambda ps, **kw: None)
    assert read(off) - a0 == read(other) - b0


def test_a_second_clip_sees_the_clipped_gradients(swapdir):
    ref, off, ro, oo = pair(swapdir)
    tok = batches(1)[0]

    def twice(ps, **kw):
        ps = list(ps)
        first = torch.nn.utils.clip_grad_norm_(ps, 0.2)
        return torch.stack([first, torch.nn.utils.clip_grad_norm_(ps, 0.1)])

    check_same(clipped_train(ref, ro, [tok], twice),
               clipped_train(off, oo, [tok], twice))
    same(ref.state_dict(), off.state_dict())


def test_clip_grad_value_is_torchs(swapdir):
    ref, off, ro, oo = pair(swapdir)
    data = batches(3)
    r = clipped_train(ref, ro, data, torch.nn.utils.clip_grad_value_,
                      clip_value=0.01)
    o = clipped_train(off, oo, data, torch.nn.utils.clip_grad_value_,
                      clip_value=0.01)
    assert r == o
    same(ref.state_dict(), off.state_dict())
    # and nvt's own name
    _, off2, _, oo2 = pair(swapdir, rank=1)
    assert clipped_train(off2, oo2, data, nvt.clip_grad_value_,
                         clip_value=0.01) == r
    same(ref.state_dict(), off2.state_dict())


def test_parameters_in_memory_and_offloaded_in_one_call(swapdir):
    torch.manual_seed(0)
    ref_a, ref_b = GPT(), torch.nn.Linear(64, 64)
    off_a, mem_b = copy.deepcopy(ref_a), copy.deepcopy(ref_b)
    nvt.offload(off_a, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    tok = batches(1)[0]
    for a, b in ((ref_a, ref_b), (off_a, mem_b)):
        b(a(tok[:, :-1])).sum().backward()
    want = torch.nn.utils.clip_grad_norm_(
        list(ref_a.parameters()) + list(ref_b.parameters()), 0.5)
    got = torch.nn.utils.clip_grad_norm_(
        list(off_a.parameters()) + list(mem_b.parameters()), 0.5)
    assert torch.equal(want, got)
    assert torch.equal(ref_b.weight.grad, mem_b.weight.grad)  # clipped now


def test_parameters_in_memory_alone_still_go_to_torch(swapdir):
    pair(swapdir)  # offload() routes torch's functions
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 4)
    b = copy.deepcopy(a)
    for m in (a, b):
        m(torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
          ).sum().backward()
    routed = torch.nn.utils.clip_grad_norm_
    original = nvt._clip._ORIGINAL["clip_grad_norm_"]  # torch's own
    assert original is not routed
    assert torch.equal(routed(a.parameters(), 0.1),
                       original(b.parameters(), 0.1))
    assert torch.equal(a.weight.grad, b.weight.grad)  # clipped in place
    assert routed([], 1.0).item() == 0.0


def test_a_nonfinite_norm_raises_as_torch_and_changes_nothing(swapdir):
    ref, off, ro, oo = pair(swapdir)
    tok = batches(1)[0]
    for m in (ref, off):
        (lm_loss(m, tok) * float("inf")).backward()
    with pytest.raises(RuntimeError) as want:
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0,
                                       error_if_nonfinite=True)
    before = off.state_dict()
    with pytest.raises(RuntimeError) as got:
        torch.nn.utils.clip_grad_norm_(off.parameters(), 1.0,
                                       error_if_nonfinite=True)
    assert str(got.value) == str(want.value)
    assert not nvt.engine_of(off).grad_ops  # nothing deferred
    same(before, off.state_dict())


def test_clipping_with_step_in_backward_is_refused(swapdir):
    torch.manual_seed(0)
    model = GPT()
    nvt.offload(model, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    opt = nvt.AdamW(model.parameters(), lr=1e-2, step_in_backward=True)
    lm_loss(model, batches(1)[0]).backward()
    for fn in (nvt.clip_grad_norm_, torch.nn.utils.clip_grad_norm_):
        with pytest.raises(ValueError, match="step_in_backward"):
            fn(model.parameters(), 1.0)
    with pytest.raises(ValueError, match="step_in_backward"):
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    opt.step()


def test_clip_never_silently_returns_zero(swapdir):
    """Issue 34 #4: torch's clip on offloaded parameters used to return 0
    (their p.grad is None)."""
    _, off, _, oo = pair(swapdir)
    lm_loss(off, batches(1)[0]).backward()
    assert all(p.grad is None for p in off.parameters())
    assert torch.nn.utils.clip_grad_norm_(off.parameters(), 1.0).item() > 0


def test_a_reference_taken_before_offload_is_routed_too(swapdir):
    """from torch.nn.utils import clip_grad_norm_ at the top of a script,
    before nvswap.torch is imported: that reference routes too (the
    function object itself is redirected, not only the attribute)."""
    script = textwrap.dedent(f"""
        import copy, sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import torch
        from torch.nn.utils import clip_grad_norm_ as early
        from torch.nn.utils.clip_grad import clip_grad_value_ as early_value
        import nvswap.torch as nvt
        from torchhelp import GPT, batches, lm_loss
        torch.manual_seed(0)
        ref = GPT()
        off = copy.deepcopy(ref)
        nvt.offload(off, nvme_path={swapdir!r}, buffer_size="64K")
        tok = batches(1)[0]
        for m in (ref, off):
            lm_loss(m, tok).backward()
        want, got = early(ref.parameters(), 0.5), early(off.parameters(), 0.5)
        assert torch.equal(want, got) and got.item() > 0.5, (want, got)
        early_value(off.parameters(), 0.01)  # routed: no error, deferred
        assert nvt.engine_of(off).grad_ops
        print("routed", got.item())
        """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("routed ")


def test_clip_grads_with_norm_is_routed_too(swapdir):
    """torch >= 2.6: clip_grads_with_norm_(params, max_norm, total)."""
    fn = getattr(torch.nn.utils, "clip_grads_with_norm_", None)
    if fn is None:
        pytest.skip(f"torch {torch.__version__} has no "
                    "torch.nn.utils.clip_grads_with_norm_")
    ref, off, ro, oo = pair(swapdir)
    tok = batches(1)[0]
    for m, o in ((ref, ro), (off, oo)):
        lm_loss(m, tok).backward()
        fn(m.parameters(), 0.5, torch.tensor(4.0))
        o.step()
        o.zero_grad()
    same(ref.state_dict(), off.state_dict())
