# SPDX-License-Identifier: MIT
"""Activations to NVMe (issue 50), the store's pool and its swap file:
the newest pieces a forward saves stay in the pool unwritten and the
backward reads them from there (what a short forward saves never
touches the disk), and the space the steps free is overwritten in place
(the swap file's blocks stay allocated and do not grow)."""
import errno
import os

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402

PIECE = 16384  # bytes: a buffer, each saved tensor below, the threshold
# (torch 1.13 saves x * 1.5's scalar too: 8 bytes, kept in memory)


def chain(x, n):
    """n sin()s in a row: each saves its input, PIECE bytes (x * 1.5
    first, which saves nothing: sin would keep the leaf x as it is)."""
    x = x * 1.5
    for _ in range(n):
        x = x.sin()
    return x.sum()


def grads(x, n, act=None):
    x = x.detach().requires_grad_()
    if act is None:
        chain(x, n).backward()
    else:
        with act:
            y = chain(x, n)
        y.backward()
    return x.grad


def test_the_newest_pieces_are_read_back_from_the_pool_unwritten(diskdir):
    """A store of 8 buffers holds the newest 3 pieces unwritten
    ((8 - 1) // 2): a forward saving 3 is read back from the pool with
    nothing written or read; one saving 10 writes the first 7 only,
    exactly, and the gradients equal the ones computed in memory."""
    act = nvt.save_on_nvme(diskdir, memory=8 * PIECE, buffer_size=PIECE,
                           threshold=PIECE)
    assert act.hold == 3
    x = torch.randn(PIECE // 4, generator=torch.Generator().manual_seed(0))
    for n, written in ((3, 0), (10, 7 * PIECE)):
        before = act.swapper.stats()
        got = grads(x, n, act)
        st = act.stats()  # frees what the backward let go
        assert st["live"] == 0, st
        act.swapper.wait_all()  # a write read back while in flight
        after = act.swapper.stats()
        assert torch.equal(got, grads(x, n)), n
        assert after["bytes_written"] - before["bytes_written"] == written
        if n == 3:
            assert after["bytes_read"] == before["bytes_read"]
    assert act.stats()["saved_bytes"] == 13 * PIECE
    act.close()


def test_retain_graph_reads_unwritten_pieces_back_twice(diskdir):
    """backward(retain_graph=True) twice over pieces still held in the
    pool: both read them from there, the gradients twice the one's."""
    act = nvt.save_on_nvme(diskdir, memory=8 * PIECE, buffer_size=PIECE,
                           threshold=PIECE)
    x = torch.randn(PIECE // 4, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    with act:
        y = chain(x, 2)
    y.backward(retain_graph=True)
    y.backward()
    assert act.swapper.stats()["bytes_written"] == 0
    want = 2 * grads(x, 2)
    assert torch.equal(x.grad, want)
    del y
    assert act.stats()["live"] == 0
    act.close()


def test_pieces_held_past_the_backward_go_to_the_disk(diskdir):
    """Two forwards, then the first one's backward alone, with no
    read-ahead (lookahead=0): the first unpack reads from the disk, and
    the second forward's pieces the pool holds unwritten (saved after
    everything this backward reads) are written to free their buffers;
    both backwards give the gradients computed in memory."""
    act = nvt.save_on_nvme(diskdir, memory=8 * PIECE, buffer_size=PIECE,
                           threshold=PIECE, lookahead=0)
    g = torch.Generator().manual_seed(3)
    xa = torch.randn(PIECE // 4, generator=g, requires_grad=True)
    xb = torch.randn(PIECE // 4, generator=g, requires_grad=True)
    with act:
        ya = chain(xa, 10)
        yb = chain(xb, 3)
    act.swapper.wait_all()
    assert act.swapper.stats()["bytes_written"] == 10 * PIECE
    ya.backward()
    act.stats()
    act.swapper.wait_all()
    assert act.swapper.stats()["bytes_written"] == 13 * PIECE
    yb.backward()
    assert torch.equal(xa.grad, grads(xa, 10))
    assert torch.equal(xb.grad, grads(xb, 3))
    assert act.stats()["live"] == 0
    act.close()


class FailOnce:
    """The store's Swapper with one call (name, when its keywords match)
    failing once with err: a fault injected."""

    def __init__(self, real, name, err, **match):
        self.real, self.name, self.err, self.match = real, name, err, match
        self.fired = 0

    def __getattr__(self, name):
        call = getattr(self.real, name)
        if name != self.name:
            return call

        def once(*a, **kw):
            if not self.fired and all(kw.get(k, False) == v
                                      for k, v in self.match.items()):
                self.fired += 1
                raise nvswap.Error(self.err, f"injected: {name}")
            return call(*a, **kw)
        return once


@pytest.mark.parametrize("name,err,match", [
    ("evict", errno.EBUSY, {}),  # a held piece read on another thread
    ("acquire", errno.EIO, {"blank": False}),  # a read ahead that failed
])
def test_a_busy_write_or_a_failed_read_ahead_is_passed_over(
        diskdir, name, err, match):
    """The write of a held piece refused as busy (another thread reads it
    back: its unpack evicts it) is passed over, and a piece whose read
    ahead failed is acquired again: either way the forward and the
    backward go on, the gradients those computed in memory."""
    act = nvt.save_on_nvme(diskdir, memory=8 * PIECE, buffer_size=PIECE,
                           threshold=PIECE)
    act.swapper = fault = FailOnce(act.swapper, name, err, **match)
    x = torch.randn(PIECE // 4, generator=torch.Generator().manual_seed(4))
    assert torch.equal(grads(x, 10, act), grads(x, 10))
    assert fault.fired == 1
    assert act.stats()["live"] == 0
    act.swapper = fault.real
    act.close()


def blocks(act):
    return sum(os.stat(os.path.join(d, f)).st_blocks
               for d in act.swapper.dirs for f in os.listdir(d)
               if f.startswith("swap."))


def test_the_space_a_step_frees_is_overwritten_by_the_next(diskdir):
    """Steps of the same forward: once every piece is freed the swap
    file keeps its blocks (no hole punched), and later steps write over
    them: the blocks it holds after the first step are those it holds
    after the fifth."""
    act = nvt.save_on_nvme(diskdir, memory=4 * PIECE, buffer_size=PIECE,
                           threshold=PIECE)
    x = torch.randn(PIECE // 4, generator=torch.Generator().manual_seed(2))
    seen = []
    for _ in range(5):
        grads(x, 12, act)
        act.swapper.wait_all()
        assert act.stats()["live"] == 0
        seen.append(blocks(act))
    assert seen[0] >= (12 - act.hold) * PIECE // 512, seen
    assert seen == [seen[0]] * 5, seen
    act.close()
