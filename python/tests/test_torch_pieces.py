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

from torchhelp import (ADAM_KINDS, GPT, STEP_MODES, batches,  # noqa
                       clip_fires_once, equal_steps, masters_steps, same,
                       trained_in_mode)

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


def _check_pieces(lent):
    cut = [(n, sizes) for n, sizes in lent if len(sizes) > 1]
    assert cut, "no parameter was stepped in pieces"
    for n, sizes in lent:
        assert sum(sizes) == n
        assert all(s <= PIECE for s in sizes)
    # the ragged last piece of a 2048-element matrix
    assert (2048, [640, 640, 640, 128]) in cut


@pytest.mark.parametrize("mode", sorted(STEP_MODES))
@pytest.mark.parametrize("kind,kw", ADAM_KINDS)
def test_pieces_step_equals_the_whole_parameter_s(swapdir, pieces, mode,
                                                  kind, kw):
    off, _ = trained_in_mode(kind, kw, mode, nvme_path=swapdir,
                             buffer_size="64K", buffer_count=4)
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
    clip_fires_once(ref, ro, off, oo)
    _check_pieces(pieces)
    nvt.restore(off)


def test_pieces_with_bf16_weights_and_fp32_masters(swapdir, pieces):
    off, _ = masters_steps(lambda m: nvt.offload(
        m, nvme_path=swapdir, buffer_size="64K", buffer_count=4,
        dtype=torch.bfloat16))
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
    equal_steps(ref, ro, off, oo, data[:1], 1e3)
    _check_pieces(pieces)  # the first step's
    same(ro.state_dict(), oo.state_dict())
    rs.step()
    os_.step()
    del pieces[:]
    equal_steps(ref, ro, off, oo, data[1:], 1e3)
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
    equal_steps(ref, ro, off, oo, data, 1e-3)
    same(ro.state_dict(), oo.state_dict())
    same(ref.state_dict(), off.state_dict())
    nvt.restore(off)
