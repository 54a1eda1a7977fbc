# SPDX-License-Identifier: MIT
"""A deferred optimizer step (issue 47, part 1): step() takes the step and
returns; each layer is updated when the next forward reaches it, and
everything that reads parameters or optimizer state sees the finished
step. Bit for bit against the same recipe in memory: clipping that fires
on one step and not the next, an LR scheduler, accumulation, zero_grad()
before or after step(), state dicts and checkpoints right after step(),
a model load_state_dict() between step() and forward, a full disk in the
middle of the deferred update, exit and kill -9 with a step pending."""
import copy
import errno
import os
import signal
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402

from torchhelp import GPT, batches, same  # noqa: E402

HERE = os.path.dirname(__file__)


def _pair(swapdir, layers=2, **opt_kw):
    # the deferred step itself: never speculated in backward (a loop
    # that does not clip would be; test_torch_spec.py)
    opt_kw.setdefault("speculate", False)
    torch.manual_seed(0)
    ref = GPT(layers=layers)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1, **opt_kw)
    return ref, off, ro, oo


def _loss(model, tok):
    return torch.nn.functional.cross_entropy(
        model(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())


def _run(model, opt, data, clips, accum=1, sched=None, zero_first=False):
    """The Hugging Face loop: accum micro-batches, clip at clips[step]
    (None: no clip), step, scheduler, zero_grad (before the step's
    scheduler when zero_first). [(losses, total norm)] per step."""
    out = []
    for s, max_norm in enumerate(clips):
        losses = []
        for k in range(accum):
            loss = _loss(model, data[(s * accum + k) % len(data)]) / accum
            loss.backward()
            losses.append(loss.item())
        norm = None
        if max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                  max_norm).item()
        opt.step()
        if zero_first:
            opt.zero_grad()
        if sched is not None:
            sched.step()
        if not zero_first:
            opt.zero_grad()
        out.append((losses, norm))
    return out


def _sched(opt):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))


@pytest.mark.parametrize("clips,accum,zero_first", [
    ([1e-3, 1e3, 1e-3, 1e3], 1, False),   # clipping fires, then not
    ([1e3, 1e-3, 1e3, 1e-3], 1, True),    # the reverse
    ([0.05, None, 0.05], 4, False),       # accumulation of 4
])
def test_deferred_steps_equal_memory_bit_for_bit(swapdir, clips, accum,
                                                 zero_first):
    ref, off, ro, oo = _pair(swapdir)
    data = batches(8)
    rs, os_ = _sched(ro), _sched(oo)
    assert _run(ref, ro, data, clips, accum, rs, zero_first) == \
        _run(off, oo, data, clips, accum, os_, zero_first)
    # the last step is pending until something needs it
    assert nvt.stats(off)["step_pending"]
    same(ro.state_dict(), oo.state_dict())  # finishes it
    assert not nvt.stats(off)["step_pending"]
    same(ref.state_dict(), off.state_dict())
    assert nvt.stats(off)["steps"] == len(clips)
    nvt.restore(off)


def test_the_next_forward_applies_the_step_in_its_order(swapdir):
    """step() reads and writes nothing; the forward updates each layer
    before using it, its walk unchanged, and the optimizer set's reads
    happen there."""
    ref, off, ro, oo = _pair(swapdir, layers=3)
    data = batches(3)
    _run(ref, ro, data[:1], [None])
    _run(off, oo, data[:1], [None])   # step 1: whole in that step()
    _loss(ref, data[1]).backward()
    _loss(off, data[1]).backward()
    eng = nvt.engine_of(off)
    walk = list(eng.walk)
    nvt.wait(off)
    before = nvt.stats(off)
    ro.step()
    oo.step()
    after = nvt.stats(off)
    assert after["step_pending"] and after["steps"] == 2
    assert after["bytes_read"] == before["bytes_read"]
    assert after["bytes_written"] == before["bytes_written"]
    # a forward in between: it alone sees the update, layer by layer
    with torch.no_grad():
        a, b = ref(data[2][:, :-1]), off(data[2][:, :-1])
    assert torch.equal(a, b)
    st = nvt.stats(off)
    assert not st["step_pending"] and eng.walk == walk
    assert st["optimizer"]["bytes_read"] > after["optimizer"]["bytes_read"]
    assert st["deferred_step_s"] > 0
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    nvt.restore(off)


def test_readers_right_after_step_see_the_finished_step(swapdir):
    ref, off, ro, oo = _pair(swapdir)
    data = batches(2)
    for m, o in ((ref, ro), (off, oo)):
        _run(m, o, data[:1], [1e-3])
        _loss(m, data[1]).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3)
        o.step()
    # gathered(): the layer's update comes first
    with nvt.gathered(off.blocks[0].linear1):
        for (n, a), b in zip(off.blocks[0].linear1.named_parameters(),
                             ref.blocks[0].linear1.parameters()):
            assert torch.equal(a, b), n
    assert nvt.stats(off)["step_pending"]   # the other layers wait
    same(ref.state_dict(), off.state_dict())
    assert not nvt.stats(off)["step_pending"]
    oo.zero_grad()
    ro.zero_grad()
    _loss(ref, data[0]).backward()
    _loss(off, data[0]).backward()
    ro.step()
    oo.step()
    same(ro.state_dict(), oo.state_dict())   # the optimizer's state dict
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())


def test_a_model_load_between_step_and_forward_wins(swapdir):
    """load_state_dict() on the model after step(): ordered after the
    pending update, never overwritten by it."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(3)
    _run(ref, ro, data[:1], [None])
    _run(off, oo, data[:1], [None])
    loaded = {k: v.clone() for k, v in ref.state_dict().items()}
    for m, o in ((ref, ro), (off, oo)):
        _loss(m, data[1]).backward()
        o.step()
        m.load_state_dict(loaded)   # the weights of before this step
        o.zero_grad()
    same(off.state_dict(), loaded)
    assert _run(ref, ro, data[2:], [None]) == _run(off, oo, data[2:], [None])
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


def test_step_twice_without_a_backward_steps_twice_as_torch(swapdir):
    ref, off, ro, oo = _pair(swapdir)
    data = batches(2)
    for m, o in ((ref, ro), (off, oo)):
        _loss(m, data[0]).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-2)
        o.step()
        o.step()   # the same (clipped) gradients again
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    assert nvt.stats(off)["steps"] == 2
    nvt.restore(off)


def test_step_inside_gathered_updates_the_held_layer_first(swapdir):
    """step() while gathered() holds a layer: that layer is updated at
    once, so what the block then reads is stepped and what it writes
    wins, as in memory."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(2)
    for m, o in ((ref, ro), (off, oo)):
        _loss(m, data[0]).backward()
        lin = m.blocks[0].linear1
        with (nvt.gathered(lin, modify=True) if m is off
              else torch.no_grad()):
            o.step()
            stepped = lin.bias.detach().clone()
            with torch.no_grad():
                lin.weight.fill_(0.5)
        if m is ref:
            want = stepped
        o.zero_grad()
    assert torch.equal(stepped, want)
    same(ref.state_dict(), off.state_dict())
    assert _run(ref, ro, data[1:], [None]) == _run(off, oo, data[1:], [None])
    same(ro.state_dict(), oo.state_dict())
    nvt.restore(off)


def test_a_failure_after_the_last_layer_s_arithmetic_ends_the_step(swapdir):
    """The last layer's update raises after torch's arithmetic (its
    release fails: injected): the step is whole all the same, and the
    steps after it train on equal to memory."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(3)
    _run(ref, ro, data[:1], [None])
    _run(off, oo, data[:1], [None])       # step 1 pending
    eng = nvt.engine_of(off)
    last = oo._pending.order[-1]
    real = eng.release

    def release(layer, dirty=False, evict=True):
        real(layer, dirty, evict)
        if eng.settling and layer == last:
            raise nvswap.Error(errno.EIO, "injected after the release")

    eng.release = release
    with pytest.raises(nvswap.Error) as ei:
        with torch.no_grad():
            off(data[1][:, :-1])
    del eng.release
    assert "injected" in str(ei.value)
    assert not nvt.stats(off)["step_pending"] and not oo._open
    assert _run(ref, ro, data[1:], [None, 1e-3]) == \
        _run(off, oo, data[1:], [None, 1e-3])
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    assert nvt.stats(off)["steps"] == 3
    nvt.restore(off)


def test_bf16_with_fp32_masters_deferred_equals_the_recipe(swapdir):
    from torchhelp import MasterAdamW
    torch.manual_seed(0)
    src = GPT(tie=True)
    ref = copy.deepcopy(src).to(torch.bfloat16)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=torch.bfloat16)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, speculate=False)
    data = batches(3)
    clips = [1e-3, 1e3, 1e-3]
    assert _run(ref, ro, data, clips, sched=_sched(ro)) == \
        _run(off, oo, data, clips, sched=_sched(oo))
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


# ---------------------------------------------- failures and exits
# (a persistent set on a small tmpfs, the models of test_torch_step_txn)
from test_torch_step_txn import (_backward, _batch, _fill,  # noqa: E402
                                 _model, _one_step, _resumes_equal,
                                 _two_steps_saved)


def _forward(model):
    with torch.no_grad():
        return model(_batch(9))


@pytest.mark.parametrize("leave_k,clip", [
    (0, False), (64, False), (128, False), (192, False), (16, True),
    (160, True), (320, False), (512, False), (768, False)])
def test_a_full_disk_under_a_deferred_update_loses_and_mixes_nothing(
        small_tmpfs, leave_k, clip):
    """The disk fills at a different point of the update the next forward
    applies (its writes go behind: a failure raises from the forward when
    the pool is full of data that could not be written, else from the
    next call that waits). While it lasts a checkpoint raises ENOSPC or
    commits the whole step; once space is back everything equals
    torch's two steps, each layer stepped twice, and resumes equal."""
    ref, off, ro, oo = _one_step(small_tmpfs, defer=True, speculate=False)
    for m in (ref, off):
        _backward(m, 2)
        if clip:
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1e-3)
    nvt.wait(off)  # the gradients written behind
    ro.step()
    oo.step()
    assert nvt.stats(off)["step_pending"]
    filler = _fill(small_tmpfs, leave_k << 10)
    try:
        _forward(off)
    except nvswap.Error as e:
        assert e.errno == errno.ENOSPC, e
    try:
        nvt.checkpoint(off, "full").wait()
        committed = True
    except nvswap.Error as e:
        assert e.errno == errno.ENOSPC, e
        committed = False
    assert leave_k or not committed, "a checkpoint on a full disk"
    if committed:  # then whole: the two steps
        _resumes_equal_copy(small_tmpfs, "full")
    os.unlink(filler)
    assert torch.equal(_forward(off), _forward(ref))
    assert not nvt.stats(off)["step_pending"]
    _two_steps_saved(small_tmpfs, ref, off, ro, oo)


def _resumes_equal_copy(mnt, tag):
    """The set at mnt (held by this process) copied and resumed in a
    child: its newest generation is tag, equal to two steps in memory."""
    code = textwrap.dedent(f"""
    import shutil, sys, tempfile
    import torch, nvswap.torch as nvt
    sys.path.insert(0, {HERE!r})
    from test_torch_defer import _reference
    from test_torch_step_txn import _resumes_equal
    d = tempfile.mkdtemp(dir="/var/tmp")
    shutil.copytree({str(mnt)!r} + "/nvswap", d + "/nvswap",
                    ignore=shutil.ignore_patterns("*.lock", "lock"))
    ref, ro = _reference(2)
    _resumes_equal(d, ref, ro, {tag!r})
    shutil.rmtree(d)
    print("equal")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=600)
    assert r.stdout == "equal\n", r.stdout + r.stderr


def test_a_failed_read_in_the_deferred_update_raises_and_is_retried(
        swapdir):
    """The parameters' swap file lost under a pending step: the forward
    that applies it raises EIO naming the layer, nothing is stepped;
    once the file is back the next forward steps every layer once."""
    import glob
    torch.manual_seed(0)
    ref = GPT()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                backend="psync")
    ro = torch.optim.Adam(ref.parameters(), lr=1e-2)
    oo = nvt.Adam(off.parameters(), lr=1e-2, speculate=False)
    data = batches(3)
    _run(ref, ro, data[:2], [None, None])
    _run(off, oo, data[:2], [None, None])
    # every layer written back and evicted, the step left pending
    nvt.engine_of(off).write_back()
    assert nvt.stats(off)["step_pending"]
    (f,) = glob.glob(swapdir + "/nvswap/param/rank0/swap.*")
    keep = open(f, "rb").read()
    os.truncate(f, 0)
    with pytest.raises(nvswap.Error) as ei:
        _loss(off, data[2])
    assert ei.value.errno == errno.EIO and "layer 0" in str(ei.value)
    assert nvt.stats(off)["step_pending"] and not oo._done
    with open(f, "r+b") as fh:
        fh.write(keep)
    assert _loss(off, data[2]).item() == _loss(ref, data[2]).item()
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    nvt.restore(off)


def _child(mnt, tail):
    code = textwrap.dedent(f"""
    import errno, os, signal, sys
    import torch, nvswap, nvswap.torch as nvt
    sys.path.insert(0, {HERE!r})
    from test_torch_step_txn import _model, _backward, _offload
    off = _model()
    _offload(off, {str(mnt)!r})
    oo = nvt.AdamW(off.parameters(), lr=1e-2, speculate=False)
    _backward(off, 1); oo.step(); oo.zero_grad()
    nvt.checkpoint(off, "one").wait()
    _backward(off, 2)
    oo.step()                       # pending
    """) + textwrap.dedent(tail)
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=600)


def _reference(steps):
    ref = _model()
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for k in range(1, steps + 1):
        _backward(ref, k)
        ro.step()
        ro.zero_grad()
    return ref, ro


@pytest.mark.parametrize("end,steps,tag", [
    ("nvt.restore(off)", 2, "close"),        # finished, then saved
    ("os.kill(os.getpid(), signal.SIGKILL)", 1, "one"),
])
def test_a_pending_step_at_close_or_kill_is_whole_or_absent(
        small_tmpfs, end, steps, tag):
    r = _child(small_tmpfs, end)
    assert r.returncode in (0, -signal.SIGKILL), r.stdout + r.stderr
    ref, ro = _reference(steps)
    _resumes_equal(small_tmpfs, ref, ro, tag)


def test_ctrl_c_inside_a_deferred_update_commits_nothing(small_tmpfs):
    """KeyboardInterrupt inside layer 1's update (torch's arithmetic): the
    step cannot be finished, checkpoint() and restore() refuse, and the
    set read back after exit is step 1 whole."""
    r = _child(small_tmpfs, """
    calls = [0]
    real = oo._inner.step
    def interrupted(*a, **k):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)
    oo._inner.step = interrupted
    try:
        with torch.no_grad():
            off(torch.randn(4, 128))
    except KeyboardInterrupt:
        print("interrupted", sorted(oo._done))
    for what, fn in (("checkpoint", lambda: nvt.checkpoint(off)),
                     ("restore", lambda: nvt.restore(off))):
        try:
            fn()
        except nvswap.Error as e:
            print(what, errno.errorcode[e.errno],
                  "cannot be finished" in str(e))
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ("interrupted [0, 1]\ncheckpoint EBUSY True\n"
                        "restore EBUSY True\n"), r.stdout
    ref, ro = _reference(1)
    _resumes_equal(small_tmpfs, ref, ro, "one")
