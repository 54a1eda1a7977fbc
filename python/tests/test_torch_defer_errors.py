# SPDX-License-Identifier: MIT
"""A deferred optimizer step's error paths (issue 47): a write of its
Adam state or fp32 masters that fails behind and is written again by
the next call that drains; a close (restore()) with a step pending whose
update fails; a read ahead of the next layer's data that fails. Each
checks the errno and the sentence the user gets, and the values read
back after the fault is gone, bit for bit against the same steps in
memory."""
import copy
import errno
import glob
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch._common import GRAD_BASE, STATE_BASE  # noqa: E402
from nvswap.torch._mixed import MASTER_BASE  # noqa: E402

from torchhelp import MasterAdamW, same  # noqa: E402
from test_torch_step_txn import (_batch, _fill, _model,  # noqa: E402
                                 _offload, _resumes_equal)

HERE = os.path.dirname(__file__)
KINDS = {GRAD_BASE: "gradients", STATE_BASE: "state",
         MASTER_BASE: "masters"}


def _backward(model, k, dtype=None):
    model(_batch(k).to(dtype or torch.float32)).square().mean().backward()


def _forward(model, dtype=None):
    with torch.no_grad():
        return model(_batch(9).to(dtype or torch.float32))


def _split(param_dir, opt_dir):
    """A config with the parameter set in param_dir and the optimizer
    set (gradients, Adam state, fp32 masters) in opt_dir, with buffers
    enough that a deferred update never waits for one."""
    return {"zero_optimization": {
        "offload_param": {"device": "nvme", "nvme_path": str(param_dir),
                          "buffer_size": 128 << 10, "buffer_count": 3},
        "offload_optimizer": {"device": "nvme", "nvme_path": str(opt_dir),
                              "buffer_size": 256 << 10, "buffer_count": 6}}}


def _dtype_kw(dtype):
    return {} if dtype is None else {"dtype": dtype}


def _split_pair(cfg, dtype):
    """(ref, off, ro, oo): the model in memory (bf16 with fp32 masters
    when dtype) and its copy offloaded to persistent sets by cfg."""
    src = _model()
    off = copy.deepcopy(src)
    nvt.offload(off, config=cfg, persist="persistent", **_dtype_kw(dtype))
    oo = nvt.AdamW(off.parameters(), lr=1e-2, speculate=False)
    if dtype is None:
        ref = src
        ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    else:
        ref = copy.deepcopy(src).to(dtype)
        ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2)
    return ref, off, ro, oo


def _same_optimizer(ro, got):
    """got (an nvswap.torch optimizer's state dict) equals ro's state,
    and its fp32 masters ro's (MasterAdamW), bit for bit."""
    rs = ro.state_dict()
    assert rs["param_groups"] == got["param_groups"]
    same(rs["state"], got["state"])
    masters = getattr(ro, "masters", None)
    assert ("master" in got) == (masters is not None)
    for i, m in enumerate(masters or ()):
        assert torch.equal(m.detach(), got["master"][i]), i


def _unwritten(eng):
    """[(kind, layer)] of every tensor of both sets whose data is not
    on NVMe yet (dirty)."""
    out = []
    for sw in (eng.pswap, eng.gswap):
        for i in sw.ids():
            if sw.info(i)["dirty"]:
                base = i & ~((1 << 40) - 1)
                kind = "param" if sw is eng.pswap else KINDS.get(base, base)
                out.append((kind, (i >> 20) & 0xFFFFF))
    return sorted(out)


def _resumed(cfg, dtype, out):
    """What a child resuming the sets of cfg reads back: {tag, model,
    opt} (the model's and the optimizer's state dicts)."""
    code = textwrap.dedent(f"""
    import sys
    import torch, nvswap.torch as nvt
    sys.path.insert(0, {HERE!r})
    from test_torch_step_txn import _model
    dtype = {None if dtype is None else str(dtype)[len("torch."):]!r}
    kw = {{}} if dtype is None else {{"dtype": getattr(torch, dtype)}}
    back = nvt.offload(_model(), config={cfg!r}, persist="resume", **kw)
    bo = nvt.AdamW(back.parameters(), lr=1e-2, speculate=False)
    torch.save({{"tag": nvt.stats(back)["resumed"]["tag"],
                "model": back.state_dict(), "opt": bo.state_dict()}},
               {str(out)!r})
    nvt.restore(back)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return torch.load(str(out))


# ------------------------------------------ a write that failed behind
@pytest.mark.parametrize("dtype", [None, torch.bfloat16],
                         ids=["fp32", "bf16-masters"])
def test_a_state_write_that_failed_behind_is_written_again_by_wait(
        diskdir, small_tmpfs, dtype):
    """The next forward applies a deferred step while the optimizer
    set's disk is full (a 2 MiB tmpfs; the parameters elsewhere): the
    writes of the Adam state (and fp32 masters) go behind and fail.
    nvt.wait() raises ENOSPC naming the file while that lasts, the data
    kept in memory; once space is back nvt.wait() writes it again
    (drain(): the failure was the state's, not a gradient's) and leaves
    nothing unwritten, and what is read back (the state dicts, a
    checkpoint reopened in a child) equals the same steps in memory."""
    cfg = _split(diskdir, small_tmpfs)
    ref, off, ro, oo = _split_pair(cfg, dtype)
    for m, o in ((ref, ro), (off, oo)):
        _backward(m, 1, dtype)
        o.step()
        o.zero_grad()
    nvt.checkpoint(off, "one").wait()
    for m in (ref, off):
        _backward(m, 2, dtype)
    nvt.wait(off)  # the gradients written behind
    ro.step()
    oo.step()  # pending
    eng = nvt.engine_of(off)
    filler = _fill(small_tmpfs, 0)
    assert torch.equal(_forward(off, dtype), _forward(ref, dtype))
    kept = [("state", 0), ("state", 1)]
    if dtype is not None:
        kept += [("masters", 0), ("masters", 1)]
    for _ in range(2):  # raises again while the disk is full
        with pytest.raises(nvswap.Error) as ei:
            nvt.wait(off)
        assert ei.value.errno == errno.ENOSPC, ei.value
        assert f"{small_tmpfs}/nvswap/optimizer/rank0/set.data" in \
            str(ei.value), ei.value
        assert "No space left on device" in str(ei.value), ei.value
        # (the parameters' writes, on the other disk, may be in flight)
        assert [t for t in _unwritten(eng) if t[0] != "param"] == \
            sorted(kept)
    os.unlink(filler)
    nvt.wait(off)
    assert _unwritten(eng) == []
    assert not nvt.stats(off)["step_pending"]
    same(ref.state_dict(), off.state_dict())
    _same_optimizer(ro, oo.state_dict())
    ro.zero_grad()
    oo.zero_grad()
    nvt.checkpoint(off, "two").wait()
    nvt.restore(off)
    got = _resumed(cfg, dtype, os.path.join(diskdir, "resumed.pt"))
    assert got["tag"] == "two"
    same(ref.state_dict(), got["model"])
    _same_optimizer(ro, got["opt"])


# --------------------------------------- close with a step pending
def _pending_over_a_cut_file(mnt):
    """(ref, off, ro, oo): step 1 checkpointed as "one", step 2 taken by
    ref and pending in oo, every layer on NVMe and the parameter set's
    file cut to 0 bytes; and the function that puts it back."""
    ref = _model()
    off = copy.deepcopy(ref)
    _offload(off, mnt)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, speculate=False)
    for k in (1, 2):
        for m, o in ((ref, ro), (off, oo)):
            _backward(m, k)
            o.step()
            o.zero_grad()
        if k == 1:
            nvt.checkpoint(off, "one").wait()
    nvt.engine_of(off).write_back()  # the update must read each layer
    assert nvt.stats(off)["step_pending"]
    (f,) = glob.glob(os.path.join(mnt, "nvswap/param/rank0/set.data"))
    with open(f, "rb") as fh:
        keep = fh.read()
    os.truncate(f, 0)

    def put_back():
        with open(f, "r+b") as fh:
            fh.write(keep)

    return ref, off, ro, oo, put_back


def _assert_step_stopped(e):
    assert e.errno == errno.EIO, e
    text = str(e)
    assert "optimizer step 2 (deferred) stopped at layer 0: reading " \
        "layer 0 (0.weight, 0.bias): " in text, text
    assert "/nvswap/param/rank0/set.data at offset 0 failed: the swap " \
        "file ends at 0 bytes" in text, text
    assert text.endswith("; the next call that needs the step retries "
                         "it, each layer once"), text


def test_restore_with_a_pending_step_that_fails_changes_nothing(swapdir):
    """restore() over a persistent set with a deferred step pending whose
    update cannot read its layer (EIO): it raises naming the step and
    the layer before it changes anything (still offloaded, the step
    still pending), as it refuses a step half done; restore() again once
    the file is back finishes the step and saves it ("close")."""
    ref, off, ro, oo, put_back = _pending_over_a_cut_file(swapdir)
    with pytest.raises(nvswap.Error) as ei:
        nvt.restore(off)
    _assert_step_stopped(ei.value)
    assert nvt.stats(off)["step_pending"]  # offloaded, open
    assert all(hasattr(p, "_nvswap") for p in off.parameters())
    put_back()
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())
    _resumes_equal(swapdir, ref, ro, "close")


def test_close_with_a_pending_step_that_fails_closes_nothing(swapdir):
    """The engine's close(save=True) with a deferred step pending whose
    update fails raises it with nothing closed: it once swallowed the
    failure, closed, and saved nothing (the step lost from the set
    without a word). close() again, once the file is back, saves the
    step whole."""
    ref, off, ro, oo, put_back = _pending_over_a_cut_file(swapdir)
    eng = nvt.engine_of(off)
    with pytest.raises(nvswap.Error) as ei:
        eng.close()
    _assert_step_stopped(ei.value)
    assert not eng.closed and nvt.stats(off)["step_pending"]
    put_back()
    eng.close()
    assert eng.closed
    _resumes_equal(swapdir, ref, ro, "close")


# ------------------------------------------ a read ahead that fails
def _read_ahead_pair(swapdir):
    """(ref, off, ro, oo, (path, offset, byte)): one step taken by each,
    backward 2 written behind; the scratch optimizer file (checksummed)
    and where layer 1's Adam state starts in it."""
    ref = _model()
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="128K", buffer_count=3,
                optimizer_buffer_size="256K", optimizer_buffer_count=5,
                checksum=True)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, speculate=False)
    for m, o in ((ref, ro), (off, oo)):
        _backward(m, 1)
        o.step()
        o.zero_grad()
    # layer 1's state group starts with 1.weight's exp_avg
    head = ro.state[ref[1].weight]["exp_avg"].numpy().tobytes()[:64]
    for m in (ref, off):
        _backward(m, 2)
    nvt.wait(off)
    eng = nvt.engine_of(off)
    (f,) = glob.glob(os.path.join(eng.gswap.dirs[0], "swap.*"))
    with open(f, "rb") as fh:
        data = fh.read()
    assert data.count(head) == 1
    at = data.find(head)
    return ref, off, ro, oo, (f, at, data[at])


def test_a_read_ahead_that_fails_is_raised_by_the_update_needing_it(
        swapdir):
    """A bit flipped in layer 1's Adam state: its read ahead, started
    while layer 0 is updated, fails in flight (a checksum mismatch); the
    forward raises it when it reaches layer 1 (EBADMSG naming the step,
    the layer, the state, the file and the offset), with layer 0
    updated. Once the bit is back the next forward updates layer 1,
    each layer once, equal to memory."""
    ref, off, ro, oo, (f, at, byte) = _read_ahead_pair(swapdir)
    ro.step()
    oo.step()
    with open(f, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes([byte ^ 1]))
    eng = nvt.engine_of(off)
    before = eng.gswap.stats()
    with pytest.raises(nvswap.Error) as ei:
        _forward(off)
    after = eng.gswap.stats()
    # read ahead in layer 0's update: layer 1's gradients and state
    assert after["prefetches"] - before["prefetches"] == 2
    assert after["checksum_errors"] - before["checksum_errors"] == 1
    e = ei.value
    assert e.errno == errno.EBADMSG, e
    assert e.strerror.startswith(
        "nvswap.torch: optimizer step 2 (deferred) stopped at layer 1: "
        "reading the optimizer state of layer 1 (1.weight, 1.bias): "), e
    assert f"checksum mismatch reading {f} at offset {at}" in str(e), e
    assert nvt.stats(off)["step_pending"] and sorted(oo._done) == [0]
    with open(f, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes([byte]))
    assert torch.equal(_forward(off), _forward(ref))
    assert not nvt.stats(off)["step_pending"]
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


def test_a_read_ahead_that_cannot_start_leaves_the_read_to_the_update(
        swapdir):
    """try_prefetch() raising (injected once, for layer 1's Adam state)
    is not the update's failure: layer 0's update goes on, layer 1's
    acquire reads the state itself, and the step equals memory."""
    ref, off, ro, oo, _ = _read_ahead_pair(swapdir)
    ro.step()
    oo.step()
    eng = nvt.engine_of(off)
    real = eng.gswap
    failing = [STATE_BASE + (1 << 20)]

    class FailingReadAhead:  # the optimizer set, one try_prefetch failing
        def __getattr__(self, name):
            return getattr(real, name)

        def try_prefetch(self, i):
            if i in failing:
                failing.remove(i)
                raise nvswap.Error(errno.EIO, "injected")
            return real.try_prefetch(i)

    before = real.stats()
    eng.gswap = FailingReadAhead()
    try:
        out = _forward(off)
    finally:
        eng.gswap = real
    after = real.stats()
    assert not failing  # it was tried
    assert after["prefetches"] - before["prefetches"] == 1  # gradients
    assert after["io_errors"] == before["io_errors"]
    assert torch.equal(out, _forward(ref))
    assert not nvt.stats(off)["step_pending"]
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)
