# SPDX-License-Identifier: MIT
"""A speculative step (issue 47, part 2): each layer stepped in backward
on the guess that step() will not clip, kept when the guess holds and
redone from the old values (kept on disk by an undoable step) when it
does not. Bit for bit against the same loop in memory: clipping that
fires after a step that did not, a non-finite gradient, accumulation
(the count learned, and a wrong guess), an LR scheduler, readers
between backward and step(), bf16 weights with fp32 masters."""
import copy
import os
import signal
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402

from nvswap.torch._common import GRAPH_TASK  # noqa: E402
from torchhelp import GPT, MasterAdamW, batches, same  # noqa: E402

HERE = os.path.dirname(__file__)
pytestmark = pytest.mark.skipif(
    GRAPH_TASK is None,
    reason=f"torch {torch.__version__}: speculation needs torch >= 2, which "
    "says whether a backward runs (torch 1.x cannot tell a forward after a "
    "backward that raised from a recomputation inside one); every step is "
    "deferred there, as test_torch_defer.py tests")


def _pair(swapdir, dtype=None, **opt_kw):
    torch.manual_seed(0)
    src = GPT(layers=2)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=dtype)
    if dtype is None:
        ref = copy.deepcopy(src)
        ro = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    else:
        ref = copy.deepcopy(src).to(dtype)
        ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2,
                         weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1, **opt_kw)
    return ref, off, ro, oo


def _loss(model, tok, scale=1.0):
    return torch.nn.functional.cross_entropy(
        model(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten()) * scale


def _run(model, opt, data, clips, accum=1, sched=None, scales=None):
    """The Hugging Face loop; clips[s]: max_norm (None: no clip);
    scales[s]: a factor on step s's loss (inf: a non-finite gradient).
    [(losses, total norm)] per step."""
    out = []
    for s, max_norm in enumerate(clips):
        losses = []
        for k in range(accum[s] if isinstance(accum, list) else accum):
            scale = scales[s] if scales else 1.0
            loss = _loss(model, data[(s * 4 + k) % len(data)], scale)
            loss.backward()
            losses.append(loss.item())
        norm = None
        if max_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                  max_norm).item()
        opt.step()
        if sched is not None:
            sched.step()
        opt.zero_grad()
        out.append((losses, norm))
    return out


def _sched(opt):
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))


def _counts(model):
    st = nvt.stats(model)
    return st["speculated_steps"], st["redone_steps"]


@pytest.mark.parametrize("clips,accum,want", [
    # no clipping: every step after the first is taken in backward
    ([None] * 4, 1, (3, 0)),
    # a clip that fires after one that did not: redone; after one that
    # fired, the step is deferred (not speculated)
    ([1e3, 1e-3, 1e3, 1e3, 1e-3], 1, (3, 2)),
    # accumulation of 4: the count is learned, the 4th backward steps
    ([1e3, 1e3, 1e3], 4, (2, 0)),
])
def test_speculative_steps_equal_memory_bit_for_bit(swapdir, clips, accum,
                                                    want):
    ref, off, ro, oo = _pair(swapdir)
    data = batches(8)
    assert _run(ref, ro, data, clips, accum, _sched(ro)) == \
        _run(off, oo, data, clips, accum, _sched(oo))
    assert _counts(off) == want
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    assert nvt.stats(off)["steps"] == len(clips)
    if want[1]:
        assert nvt.stats(off)["redo_s"] > 0
    nvt.restore(off)


def _nan_same(a, b):
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, dict):
            _nan_same(x, y)
        elif torch.is_tensor(x) and x.is_floating_point():
            assert x.dtype == y.dtype and x.shape == y.shape, k
            assert bool(((x == y) | (x.isnan() & y.isnan())).all()), k
        else:
            assert x == y, k


def test_a_non_finite_gradient_is_redone_as_torch_clips_it(swapdir):
    ref, off, ro, oo = _pair(swapdir)
    data = batches(4)
    clips, scales = [1e3, 1e3, 1e3], [1.0, 1.0, float("inf")]
    want = _run(ref, ro, data, clips, scales=scales)
    got = _run(off, oo, data, clips, scales=scales)
    assert str(want) == str(got)  # nan != nan: compared as text
    assert _counts(off) == (2, 1)
    _nan_same(ref.state_dict(), off.state_dict())
    _nan_same(ro.state_dict()["state"], oo.state_dict()["state"])
    nvt.restore(off)


def test_readers_between_backward_and_step_see_the_step_not_taken(swapdir):
    ref, off, ro, oo = _pair(swapdir)
    data = batches(3)
    _run(ref, ro, data, [None])
    _run(off, oo, data, [None])
    for m in (ref, off):
        _loss(m, data[1]).backward()
    assert nvt.stats(off)["speculating"]
    # torch has not stepped: neither has the offloaded model, to a reader
    same(ref.state_dict(), off.state_dict())
    assert not nvt.stats(off)["speculating"]
    same(ro.state_dict(), oo.state_dict())
    ro.step()
    oo.step()  # the deferred step, from the gradients kept
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    assert _counts(off) == (1, 1)
    assert _run(ref, ro, data[2:], [None]) == _run(off, oo, data[2:], [None])
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


def test_a_backward_more_than_learned_undoes_the_guess(swapdir):
    """One backward a step, then two: the first of the two guessed it
    was the last; the second undoes that and the step takes both."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(8)
    clips = [None, None, None, None]
    accum = [1, 1, 2, 1]
    assert _run(ref, ro, data, clips, accum) == \
        _run(off, oo, data, clips, accum)
    # steps 2 and 3 guessed; step 4 follows the count learned (2)
    assert _counts(off) == (2, 1)
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


def test_bf16_with_fp32_masters_speculated_equals_the_recipe(swapdir):
    ref, off, ro, oo = _pair(swapdir, dtype=torch.bfloat16)
    data = batches(4)
    clips = [None, 1e3, 1e-3, 1e3]
    assert _run(ref, ro, data, clips, sched=_sched(ro)) == \
        _run(off, oo, data, clips, sched=_sched(oo))
    assert _counts(off) == (2, 1)
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)
    same(ref.state_dict(), off.state_dict())


def test_speculate_false_defers_every_step(swapdir):
    ref, off, ro, oo = _pair(swapdir, speculate=False)
    data = batches(3)
    assert _run(ref, ro, data, [None] * 3) == _run(off, oo, data, [None] * 3)
    assert _counts(off) == (0, 0)
    assert nvt.stats(off)["step_pending"]
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


def _child(mnt, tail):
    """A child process: a persistent set at mnt, step 1 taken (deferred:
    the first) and checkpointed "one", step 2's backward speculated;
    then tail."""
    code = textwrap.dedent(f"""
    import os, signal, sys
    import torch, nvswap, nvswap.torch as nvt
    sys.path.insert(0, {HERE!r})
    from test_torch_step_txn import _model, _backward, _offload
    off = _model()
    _offload(off, {str(mnt)!r})
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    _backward(off, 1); oo.step(); oo.zero_grad()
    nvt.checkpoint(off, "one").wait()
    _backward(off, 2)
    assert nvt.stats(off)["speculating"]
    """) + textwrap.dedent(tail)
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("tail,steps,tag", [
    # killed between backward and step(): the step was never taken
    ("os.kill(os.getpid(), signal.SIGKILL)", 1, "one"),
    # step() keeps it; a checkpoint right after saves it whole
    ("""
     oo.step()
     assert nvt.stats(off)["speculated_steps"] == 1
     nvt.checkpoint(off, "two").wait()
     os.kill(os.getpid(), signal.SIGKILL)
     """, 2, "two"),
    # restore() before step(): undone, and its close saves step 1
    ("nvt.restore(off)", 1, "close"),
])
def test_a_persistent_set_resumes_at_a_whole_step(small_tmpfs, tail, steps,
                                                  tag):
    from test_torch_defer import _reference
    from test_torch_step_txn import _resumes_equal
    r = _child(small_tmpfs, tail)
    assert r.returncode in (0, -signal.SIGKILL), r.stdout + r.stderr
    ref, ro = _reference(steps)
    _resumes_equal(small_tmpfs, ref, ro, tag)


def test_ctrl_c_inside_a_speculative_step_undoes_it(swapdir):
    """KeyboardInterrupt inside torch's arithmetic of the second layer
    stepped in backward: raised, with every layer back as before the
    backward; the loop then trains on equal to memory."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(4)
    assert _run(ref, ro, data[:1], [None]) == _run(off, oo, data[:1], [None])
    _loss(ref, data[1]).backward()
    loss = _loss(off, data[1])  # its forward applies step 1
    calls = [0]
    real = oo._inner.step

    def interrupted(*a, **k):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    oo._inner.step = interrupted
    with pytest.raises(KeyboardInterrupt):
        loss.backward()
    oo._inner.step = real
    assert calls[0] == 2
    assert _counts(off) == (1, 1) and not nvt.stats(off)["speculating"]
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    ro.zero_grad()
    oo.zero_grad()
    assert _run(ref, ro, data[2:], [None, None]) == \
        _run(off, oo, data[2:], [None, None])
    same(ref.state_dict(), off.state_dict())
    same(ro.state_dict(), oo.state_dict())
    nvt.restore(off)


@pytest.mark.parametrize("clip", [None, 1e-3])
def test_step_with_a_closure_takes_the_closure_s_step(swapdir, clip):
    """The closure's backward is never speculated: step(closure) decides
    (a clip inside it applies)."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(4)
    res = []
    for m, o in ((ref, ro), (off, oo)):
        out = []
        for s in range(4):
            def closure():
                o.zero_grad()
                loss = _loss(m, data[s])
                loss.backward()
                if clip is not None:
                    torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
                return loss
            out.append(o.step(closure).item())
        res.append(out)
    assert res[0] == res[1]
    assert _counts(off) == (0, 0)
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


class _Twice(torch.nn.Module):
    """A block applied twice, each under activation checkpointing."""

    def __init__(self, reentrant):
        super().__init__()
        self.reentrant = reentrant
        self.emb = torch.nn.Embedding(64, 32)
        self.block = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 64)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        h = self.emb(x)
        for _ in range(2):
            h = checkpoint(lambda t: torch.tanh(self.block(t)), h,
                           use_reentrant=self.reentrant)
        return self.head(h)


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_layer_used_again_after_its_step_undoes_the_guess(swapdir,
                                                            reentrant):
    """Reentrant checkpointing gives a block applied twice its gradient
    in two parts, recomputing the first application after the second's
    gradient: the layer stepped on the first part is undone when it is
    used again, and the step is deferred (non-reentrant: one gradient,
    kept)."""
    torch.manual_seed(0)
    src = _Twice(reentrant)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=8)
    ref = copy.deepcopy(src)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    oo = nvt.AdamW(off.parameters(), lr=1e-2)
    data = batches(5)
    clips = [None] * 5
    assert _run(ref, ro, data, clips) == _run(off, oo, data, clips)
    # reentrant: steps 2 and 4 guessed and undone, then 1 and 2 steps
    # deferred without guessing (the back-off doubles)
    assert _counts(off) == ((2, 2) if reentrant else (4, 0))
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


class _Interrupting:
    """A swapper whose step_undo() is interrupted (Ctrl-C) right after
    the set undid its part, once armed."""

    def __init__(self, real):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "armed", False)

    def __getattr__(self, k):
        return getattr(self._real, k)

    def step_undo(self):
        n = self._real.step_undo()
        if self.armed:
            object.__setattr__(self, "armed", False)
            raise KeyboardInterrupt
        return n


def test_ctrl_c_between_the_two_sets_undos_is_finished_by_the_retry(
        swapdir):
    """The parameters' set undone, the optimizer set's not (Ctrl-C in
    between): step() again finishes the undo and takes the step, never
    a mix."""
    ref, off, ro, oo = _pair(swapdir)
    data = batches(4)
    eng = oo._eng
    px = _Interrupting(eng.pswap)
    eng.pswap = px
    clips = [1e3, 1e3, 1e-3, 1e3]
    want = _run(ref, ro, data, clips)
    got = []
    for s, c in enumerate(clips):
        loss = _loss(off, data[(s * 4) % len(data)])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(off.parameters(), c).item()
        if s == 2:  # it fires: the verdict undoes the guess
            px.armed = True
            with pytest.raises(KeyboardInterrupt):
                oo.step()
            assert nvt.stats(off)["speculating"]  # half undone, kept
        oo.step()
        oo.zero_grad()
        got.append(([loss.item()], norm))
    eng.pswap = px._real
    assert want == got
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)
