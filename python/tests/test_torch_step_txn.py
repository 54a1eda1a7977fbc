# SPDX-License-Identifier: MIT
"""An optimizer step is all or nothing (issue 46, finding 1): a disk that
fills up in the middle of opt.step() on a persistent set leaves the
layers stepped so far in memory, step() again steps each of the others
once, and no checkpoint, close or restore() saves part of a step.

These take the step in step() (defer=False); test_torch_defer.py holds
the same guarantees for a deferred step."""
import copy
import errno
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402

from torchhelp import same  # noqa: E402

W = 128  # two Linear(W) layers: 64 KiB of weights, 128 KiB of AdamW state


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.Linear(W, W))


def _batch(k):
    return torch.randn(4, W, generator=torch.Generator().manual_seed(k))


def _backward(model, k):
    model(_batch(k)).square().mean().backward()


def _fill(mnt, leave):
    """The filesystem at mnt full but for leave bytes (a filler file)."""
    path = os.path.join(mnt, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, bytes(1 << 16))
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    os.close(fd)
    return path


def _offload(model, mnt, persist="persistent"):
    return nvt.offload(model, nvme_path=str(mnt), buffer_size="128K",
                       buffer_count=3, optimizer_buffer_size="256K",
                       optimizer_buffer_count=3, persist=persist)


def _counts(opt_state):
    return [int(s["step"]) for _, s in sorted(opt_state["state"].items())]


def _one_step(mnt, tag=None, **opt_kw):
    """(ref, off, ro, oo): a model in memory and its offloaded copy on a
    persistent set at mnt, one AdamW step taken by each, checkpointed."""
    opt_kw.setdefault("defer", False)
    ref = _model()
    off = copy.deepcopy(ref)
    _offload(off, mnt)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, **opt_kw)
    for m, o in ((ref, ro), (off, oo)):
        _backward(m, 1)
        o.step()
        o.zero_grad()
    nvt.checkpoint(off, tag).wait()
    return ref, off, ro, oo


def _resumes_equal(mnt, ref, ro, tag, **opt_kw):
    """The set at mnt resumes at checkpoint tag, equal to ref and ro."""
    back = _offload(_model(), mnt, persist="resume")
    bo = nvt.AdamW(back.parameters(), lr=1e-2, **opt_kw)
    assert nvt.stats(back)["resumed"]["tag"] == tag
    same(ref.state_dict(), back.state_dict())
    same(ro.state_dict(), bo.state_dict())
    nvt.restore(back)


def _half_done(fn):
    with pytest.raises(nvswap.Error) as ei:
        fn()
    assert ei.value.errno == errno.EBUSY, ei.value
    assert "while an optimizer step is half done" in str(ei.value)
    return str(ei.value)


@pytest.mark.parametrize("leave_k,clip", [
    (0, False), (16, False), (64, False), (96, False), (128, False),
    (192, False), (256, False), (320, False), (16, True), (192, True)])
def test_a_full_disk_mid_step_is_finished_by_step_each_layer_once(
        small_tmpfs, leave_k, clip):
    """The disk fills at a different point of step 2 for each leave_k:
    whatever stopped, step() once the space is back equals torch's two
    steps bit for bit (each layer stepped twice; clipped alike when clip:
    the retry applies the same clip to the layers left), and the
    checkpoint after it resumes equal."""
    ref, off, ro, oo = _one_step(small_tmpfs)
    for m in (ref, off):
        _backward(m, 2)
        if clip:  # routed to nvt.clip_grad_norm_ for the offloaded model
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3)
    ro.step()
    nvt.wait(off)  # the gradients written behind: the step meets the full disk
    filler = _fill(small_tmpfs, leave_k << 10)
    try:
        oo.step()
        failed = None
    except nvswap.Error as e:
        failed = e
    if failed is not None:
        assert failed.errno == errno.ENOSPC, failed
        if oo._done:  # stopped half way: nothing may take part of it
            msg = _half_done(lambda: nvt.checkpoint(off))
            assert "No space left on device" in msg, msg
            assert "call step() again to finish it" in msg, msg
            _half_done(oo.zero_grad)
            _half_done(oo.state_dict)
            _half_done(lambda: nvt.restore(off))
            _half_done(lambda: _backward(off, 3))
    os.unlink(filler)
    if failed is not None:
        oo.step()  # continues: the layers not stepped, once each
    _two_steps_saved(small_tmpfs, ref, off, ro, oo)


def _two_steps_saved(mnt, ref, off, ro, oo):
    """off and oo equal ref and ro after two steps, each layer stepped
    twice; checkpointed as "two", restored, and resumed equal."""
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    assert _counts(oo.state_dict()) == [2, 2, 2, 2]
    assert nvt.stats(off)["steps"] == 2
    oo.zero_grad()
    nvt.checkpoint(off, "two").wait()
    nvt.restore(off)
    _resumes_equal(mnt, ref, ro, "two")


def test_some_leave_stops_the_step_half_way(small_tmpfs):
    """The sweep above is only worth its name if some point of it
    leaves a step half done: with 16 KiB left, step 2 stops after layer 0
    (its AdamW state's write-back fails), layer 1 not stepped."""
    off = _model()
    _offload(off, small_tmpfs)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, defer=False)
    _backward(off, 1)
    oo.step()
    oo.zero_grad()
    nvt.checkpoint(off).wait()
    _backward(off, 2)
    nvt.wait(off)
    filler = _fill(small_tmpfs, 16 << 10)
    with pytest.raises(nvswap.Error) as ei:
        oo.step()
    assert ei.value.errno == errno.ENOSPC, ei.value
    assert sorted(oo._done) == [0], str(ei.value)
    msg = _half_done(lambda: nvt.checkpoint(off))
    assert "layers [0] are stepped, [1] not" in msg, msg
    os.unlink(filler)
    oo.step()
    assert _counts(oo.state_dict()) == [2, 2, 2, 2]
    nvt.restore(off)


def test_a_half_done_step_is_never_committed_by_close_or_exit(small_tmpfs):
    """A process whose step stopped half way, that tries restore() and
    then exits without finishing it: its sets keep the last checkpoint
    (step 1), whole (the reported bug committed layer 0's new AdamW
    state with its old weights, and resume took it)."""
    here = os.path.dirname(__file__)
    code = textwrap.dedent(f"""
    import copy, errno, os, sys
    import torch, nvswap, nvswap.torch as nvt
    sys.path.insert(0, {here!r})
    from test_torch_step_txn import _model, _backward, _fill, _offload
    off = _model()
    _offload(off, {str(small_tmpfs)!r})
    oo = nvt.AdamW(off.parameters(), lr=1e-2, defer=False)
    _backward(off, 1); oo.step(); oo.zero_grad()
    nvt.checkpoint(off, "one").wait()
    _backward(off, 2)
    nvt.wait(off)
    filler = _fill({str(small_tmpfs)!r}, 16 << 10)
    try:
        oo.step()
    except nvswap.Error as e:
        print("step", errno.errorcode[e.errno], sorted(oo._done))
    os.unlink(filler)  # room for a commit, had one been made
    try:
        nvt.restore(off)
    except nvswap.Error as e:
        print("restore", errno.errorcode[e.errno])
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == "step ENOSPC [0]\nrestore EBUSY\n", r.stdout
    ref = _model()
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    _backward(ref, 1)
    ro.step()
    _resumes_equal(small_tmpfs, ref, ro, "one")


def test_a_step_in_backward_that_fails_half_way_is_never_committed(
        small_tmpfs):
    """step_in_backward: a full disk stops the backward after a layer was
    stepped; the gradients of the others are gone, so the step cannot be
    finished: step(), checkpoint() and restore() say so, and the set
    resumes at its last checkpoint."""
    ref, off, ro, oo = _one_step(small_tmpfs, "one", step_in_backward=True)
    filler = _fill(small_tmpfs, 16 << 10)
    with pytest.raises(nvswap.Error) as ei:
        _backward(off, 2)
    assert ei.value.errno == errno.ENOSPC, ei.value
    eng = nvt.engine_of(off)
    for sw in (eng.pswap, eng.gswap):  # the write-backs over, still full
        try:
            sw.wait_all()
        except nvswap.Error as e:
            assert e.errno == errno.ENOSPC, e
    os.unlink(filler)
    assert sorted(oo._done) == [1]  # the last layer, stepped first
    for fn in (oo.step, lambda: nvt.checkpoint(off), oo.state_dict,
               lambda: nvt.restore(off)):
        msg = _half_done(fn)
        assert "it cannot be finished" in msg, msg
    eng.close()  # as at exit: no checkpoint of the half-done step
    _resumes_equal(small_tmpfs, ref, ro, "one", step_in_backward=True)


def test_a_step_that_stepped_nothing_leaves_checkpoints_open(swapdir):
    """A failure before the first layer is stepped (an injected EIO on
    layer 0's gradient region) is no step: nothing is half done, so a
    checkpoint is taken (it holds the state before the step), and step()
    again trains on equal to torch."""
    ref = _model()
    off = copy.deepcopy(ref)
    _offload(off, swapdir)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, defer=False)
    for m in (ref, off):
        _backward(m, 1)
    ro.step()
    eng = nvt.engine_of(off)

    class FailOnce:  # the gradient swapper, its first acquire failing
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def acquire(self, layer):
            eng.grads = self.real
            raise nvswap.Error(errno.EIO, "injected")

    eng.grads = FailOnce(eng.grads)
    with pytest.raises(nvswap.Error, match="injected"):
        oo.step()
    assert not oo._done
    nvt.checkpoint(off, "before").wait()
    oo.step()
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    nvt.restore(off)


def test_torch_raising_inside_a_layer_s_step_is_never_committed(small_tmpfs):
    """torch's own step raising part way (out of memory for its
    temporaries, KeyboardInterrupt) leaves a layer part old, part new:
    it can be neither finished nor undone, so step() refuses to go on,
    nothing commits it, and the set resumes at its last checkpoint."""
    ref, off, ro, oo = _one_step(small_tmpfs, "one")
    _backward(off, 2)
    inner = oo._inner
    real = type(inner).step

    def half_then_raise(self, *a, **kw):  # the fault: the first layer's
        type(inner).step = real           # step dies after changing it
        with torch.no_grad():
            self.param_groups[0]["params"][0].add_(1.0)
        raise MemoryError("injected")

    type(inner).step = half_then_raise
    try:
        with pytest.raises(MemoryError, match="injected"):
            oo.step()
    finally:
        type(inner).step = real
    for fn in (oo.step, lambda: nvt.checkpoint(off), lambda: nvt.restore(off),
               oo.zero_grad):
        msg = _half_done(fn)
        assert "it cannot be finished: torch's step of layer" in msg, msg
        assert "MemoryError (injected)" in msg, msg
    nvt.engine_of(off).close()  # as at exit: nothing of it committed
    _resumes_equal(small_tmpfs, ref, ro, "one")


def test_step_in_backward_failing_at_its_first_layer_trains_on(small_tmpfs):
    """A step_in_backward backward whose very first layer's step fails
    stepped nothing: no half step stays behind, and once the space is
    back a new backward and step() train on, equal to torch."""
    ref = _model()
    off = copy.deepcopy(ref)
    _offload(off, small_tmpfs)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, step_in_backward=True)
    eng = nvt.engine_of(off)

    class FailOnce:  # the state swapper's first swap_in fails
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def swap_in(self, layer):
            oo._swap = self.real
            raise nvswap.Error(errno.EIO, "injected")

    _backward(ref, 1)
    ro.step()
    ro.zero_grad()
    _backward(off, 1)  # the first step: no state to swap in yet
    oo.step()
    oo.zero_grad()
    _backward(ref, 2)
    ro.step()
    oo._swap = FailOnce(oo._swap)
    with pytest.raises(nvswap.Error, match="injected"):
        _backward(off, 2)
    assert not oo._done and not oo._broken
    oo.zero_grad()  # lets go of what the failed backward held
    _backward(off, 2)
    oo.step()
    same(ref.state_dict(), off.state_dict())
    assert eng.optimizer is oo
    nvt.restore(off)


def test_step_in_backward_is_whole_after_its_backward_and_not_half(
        swapdir):
    """step_in_backward: once a backward stepped every layer the step is
    whole (a state dict and a checkpoint see it before step()); a
    backward that raises after stepping some layers (a grad_hook failing
    on layer 0's first gradient, layer 1 stepped) cannot be finished."""
    calls = []

    def hook(name, g):
        calls.append(name)
        if len(calls) == 7:  # the second backward, layer 0's first
            raise RuntimeError("hook failed")

    torch.manual_seed(0)
    ref = _model()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="128K", buffer_count=3,
                persist="persistent", grad_hook=hook)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, step_in_backward=True)
    _backward(ref, 1)
    ro.step()
    _backward(off, 1)
    same(ref.state_dict(), off.state_dict())  # before step(): whole
    nvt.checkpoint(off, "one").wait()
    oo.step()
    oo.zero_grad()
    with pytest.raises(RuntimeError, match="hook failed"):
        _backward(off, 2)
    msg = _half_done(oo.step)
    assert "it cannot be finished: the backward that stepped layers [1]" \
        in msg, msg
    nvt.engine_of(off).close()
    _resumes_equal(swapdir, ref, ro, "one", step_in_backward=True)


@pytest.mark.parametrize("defer", [False, True])
def test_restore_on_a_full_disk_raises_with_the_model_still_offloaded(
        small_tmpfs, defer):
    """restore() of a persistent set whose close checkpoint cannot be
    written: it raised ENOSPC with the sets already closed at their last
    checkpoint (the step since lost, no retry). Now it raises before it
    changes anything, and again once there is room saves and restores."""
    ref, off, ro, oo = _one_step(small_tmpfs, "one", defer=defer)
    for m, o in ((ref, ro), (off, oo)):
        _backward(m, 2)
        o.step()
        o.zero_grad()
    nvt.wait(off)  # the step (deferred: applied now) written
    filler = _fill(small_tmpfs, 0)
    with pytest.raises(nvswap.Error) as ei:
        nvt.restore(off)
    assert ei.value.errno == errno.ENOSPC, ei.value
    assert nvt.engine_of(off) is not None  # still offloaded
    os.unlink(filler)
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    _resumes_equal(small_tmpfs, ref, ro, "close", defer=defer)
