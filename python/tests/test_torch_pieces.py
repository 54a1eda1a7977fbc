# SPDX-License-Identifier: MIT
"""A parameter larger than nvswap.torch._pieces.CHUNK elements is stepped
in pieces (views of its value, gradient and Adam state, each lent to
torch's optimizer as a parameter of its own, in rounds), so that torch's
temporaries and the clipped gradient are a piece's size, not the
parameter's. Adam and AdamW are
elementwise: the result must be the whole parameter's step bit for bit,
in every mode (deferred, in step(), speculated, step_in_backward), with
amsgrad, weight decay, bf16 weights with fp32 masters, and the step
counts torch keeps. CHUNK is lowered here so that the small GPT's
matrices are cut, the last piece of each a ragged one."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _pieces  # noqa: E402
from nvswap.torch._common import GRAPH_TASK  # noqa: E402

from torchhelp import GPT, MasterAdamW, batches, same  # noqa: E402

PIECE = 640  # a multiple of every vector width; 2048 = 3 x 640 + 128


@pytest.fixture
def pieces(monkeypatch):
    """CHUNK lowered; what torch was lent, every step: (elements, [lent
    sizes]) per parameter. At each of torch's steps, the gradients made
    for pieces are that round's only."""
    monkeypatch.setattr(_pieces, "CHUNK", PIECE)
    lent = []
    add, torch_step = _pieces.Lent.add, _pieces.Lent._torch_step

    def spy_add(self, gi, t, src, grad_of):
        out = add(self, gi, t, src, grad_of)
        lent.append((t.numel(), [c.numel() for c in out]))
        return out

    def spy_step(self):
        now = [c for g in self.inner.param_groups for c in g["params"]]
        for rnd in self.rounds:
            for _, c, grad in rnd:
                if grad is not None:  # a piece
                    assert (c.grad is not None) == any(c is x for x in now)
        return torch_step(self)

    monkeypatch.setattr(_pieces.Lent, "add", spy_add)
    monkeypatch.setattr(_pieces.Lent, "_torch_step", spy_step)
    return lent


def _loss(model, tok):
    return torch.nn.functional.cross_entropy(
        model(tok[:, :-1]).flatten(0, 1), tok[:, 1:].flatten())


def _train(model, opt, data, clip):
    out = []
    for tok in data:
        loss = _loss(model, tok)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        out.append((loss.item(), norm.item()))
    return out


def _check_pieces(lent):
    cut = [(n, sizes) for n, sizes in lent if len(sizes) > 1]
    assert cut, "no parameter was stepped in pieces"
    for n, sizes in lent:
        assert sum(sizes) == n
        assert all(s <= PIECE for s in sizes)
    # the ragged last piece of a 2048-element matrix
    assert (2048, [640, 640, 640, 128]) in cut


MODES = {
    "deferred": dict(speculate=False),
    "in step()": dict(defer=False),
    "speculated": dict(),
    "step_in_backward": dict(step_in_backward=True),
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind,kw", [
    ("AdamW", dict(weight_decay=0.1)),
    ("Adam", dict(amsgrad=True, weight_decay=0.01)),
])
def test_pieces_step_equals_the_whole_parameter_s(swapdir, pieces, mode,
                                                  kind, kw):
    torch.manual_seed(0)
    ref = GPT(layers=2)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ro = getattr(torch.optim, kind)(ref.parameters(), lr=1e-2, **kw)
    oo = getattr(nvt, kind)(off.parameters(), lr=1e-2, **kw, **MODES[mode])
    data = batches(4)
    # step_in_backward refuses clipping; the others: a clip that never
    # fires (so that the speculated steps are kept)
    if mode == "step_in_backward":
        for tok in data:
            _loss(ref, tok).backward()
            ro.step()
            ro.zero_grad()
            _loss(off, tok).backward()
            oo.step()
            oo.zero_grad()
    else:
        assert _train(ref, ro, data, 1e3) == _train(off, oo, data, 1e3)
    same(ro.state_dict(), oo.state_dict())  # step counts included
    same(ref.state_dict(), off.state_dict())
    if mode == "speculated" and GRAPH_TASK is not None:
        # (torch 1.x: never speculated, every step deferred; see
        # test_torch_spec.py)
        assert nvt.stats(off)["speculated_steps"] >= 2
        assert nvt.stats(off)["redone_steps"] == 0
    _check_pieces(pieces)
    nvt.restore(off)


def test_pieces_with_clipping_that_fires_and_a_redone_guess(swapdir,
                                                            pieces):
    torch.manual_seed(0)
    ref = GPT(layers=2)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1)
    data = batches(5)
    out = []
    for tok, clip in zip(data, [1e3, 1e3, 1e-3, 1e3, 1e3]):
        out.append((_train(ref, ro, [tok], clip), _train(off, oo, [tok],
                                                         clip)))
    assert all(a == b for a, b in out)
    if GRAPH_TASK is not None:  # torch 1.x never guesses
        assert nvt.stats(off)["redone_steps"] >= 1  # the guess at step 2
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    _check_pieces(pieces)
    nvt.restore(off)


def test_pieces_with_bf16_weights_and_fp32_masters(swapdir, pieces):
    torch.manual_seed(0)
    src = GPT(layers=2)
    ref = copy.deepcopy(src).to(torch.bfloat16)
    off = copy.deepcopy(src)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
                dtype=torch.bfloat16)
    ro = MasterAdamW(ref.parameters(), src.parameters(), lr=1e-2,
                     weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1,
                   speculate=False)
    data = batches(3)
    assert _train(ref, ro, data, 1e-3) == _train(off, oo, data, 1e-3)
    same(ref.state_dict(), off.state_dict())
    _check_pieces(pieces)
    nvt.restore(off)


def test_the_first_step_is_lent_in_pieces_with_torch_s_initial_state(
        swapdir, pieces):
    """The first step makes the state: zeros and a step count of 0 made
    as torch makes them (learned from torch's own first step), so that
    it too is lent in pieces; with an LR scheduler's keys in the group."""
    torch.manual_seed(0)
    ref = GPT(layers=1)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ro = torch.optim.Adam(ref.parameters(), lr=1e-2, amsgrad=True)
    oo = nvt.Adam(off.parameters(), lr=1e-2, amsgrad=True, defer=False)
    rs = torch.optim.lr_scheduler.StepLR(ro, 1, gamma=0.5)
    os_ = torch.optim.lr_scheduler.StepLR(oo, 1, gamma=0.5)
    data = batches(3)
    assert _train(ref, ro, data[:1], 1e3) == _train(off, oo, data[:1], 1e3)
    _check_pieces(pieces)  # the first step's
    same(ro.state_dict(), oo.state_dict())
    rs.step()
    os_.step()
    del pieces[:]
    assert _train(ref, ro, data[1:], 1e3) == _train(off, oo, data[1:], 1e3)
    _check_pieces(pieces)
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)


def test_a_state_form_first_state_does_not_know_is_left_to_torch(
        swapdir, monkeypatch):
    """Where first_state() does not know the form (it says {}), torch
    makes the first step's state itself, whole, and it is registered
    after the step (_register); the result is the same bit for bit."""
    monkeypatch.setattr(_pieces, "first_state", lambda *a: {})
    torch.manual_seed(0)
    ref = GPT(layers=1)
    off = copy.deepcopy(ref)
    nvt.offload(off, nvme_path=swapdir, buffer_size="64K", buffer_count=4)
    ro = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    oo = nvt.AdamW(off.parameters(), lr=1e-2, weight_decay=0.1,
                   defer=False)
    data = batches(3)
    assert _train(ref, ro, data, 1e-3) == _train(off, oo, data, 1e-3)
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)
