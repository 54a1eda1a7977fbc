# SPDX-License-Identifier: MIT
"""ParamSwapper, OptimizerSwapper, GradSwapper over a Swapper."""
import errno
import gc
import os
import struct
import threading
import weakref

import pytest

import nvswap
from filehelp import raises_errno

MiB = 1 << 20


@pytest.fixture
def swapper(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=3)
    yield s
    s.close()


def blob(n, seed):
    return bytes((i * 37 + seed) & 0xFF for i in range(n))


# ---- parameters -------------------------------------------------------------


def test_layers_round_trip_as_memoryviews(swapper):
    p = nvswap.ParamSwapper(swapper)
    a, b = blob(1000, 1), blob(333, 2)
    p.add_layer(0, [a, b])
    p.add_layer(1, [4096])
    assert swapper.stats()["tensors"] == 2
    # layer 0 is one swapper tensor: packed at 64-byte aligned offsets
    assert swapper.info(0)["nbytes"] == 1024 + 333
    views = p.acquire_layer(0, memoryview=True)
    assert [bytes(v) for v in views] == [a, b]
    views[1][:] = blob(333, 9)
    p.release_layer(0, True)
    for v in views:
        with pytest.raises(ValueError):
            v[0]
    p.evict_layer(0)
    swapper.wait_all()
    assert swapper.info(0)["state"] == "on_nvme"
    views = p.acquire_layer(0, memoryview=True)
    assert [bytes(v) for v in views] == [a, blob(333, 9)]
    p.release_layer(0, False)
    zeros = p.acquire_layer(1, memoryview=True)
    assert bytes(zeros[0]) == bytes(4096)
    p.release_layer(1, False)
    p.close()
    assert swapper.stats()["tensors"] == 0


def test_layers_round_trip_as_tensors_with_dtypes_and_shapes(swapper):
    torch = pytest.importorskip("torch")
    w = torch.randn(16, 8)
    bias = torch.arange(8, dtype=torch.float16)
    idx = torch.tensor([[1, 2], [3, 4]], dtype=torch.int64)
    p = nvswap.ParamSwapper(swapper)
    p.add_layer(3, [w, bias, idx, 10])
    ts = p.acquire_layer(3)
    assert [t.dtype for t in ts] == [torch.float32, torch.float16,
                                    torch.int64, torch.uint8]
    assert [tuple(t.shape) for t in ts] == [(16, 8), (8,), (2, 2), (10,)]
    assert torch.equal(ts[0], w) and torch.equal(ts[1], bias)
    assert torch.equal(ts[2], idx) and ts[3].sum().item() == 0
    ts[0].mul_(3)
    p.release_layer(3, True)
    assert all(t.numel() == 0 for t in ts)  # revoked
    p.evict_layer(3)
    swapper.wait_all()
    ts = p.acquire_layer(3)
    assert torch.equal(ts[0], w * 3)
    p.release_layer(3, False)


def test_meta_tensors_add_typed_zeros_without_io(swapper):
    torch = pytest.importorskip("torch")
    p = nvswap.ParamSwapper(swapper)
    p.add_layer(0, [torch.empty(3, 5, dtype=torch.bfloat16, device="meta"),
                    torch.empty(7, dtype=torch.int32, device="meta")])
    assert swapper.stats()["bytes_written"] == 0
    assert swapper.info(0)["nbytes"] == 64 + 28
    ts = p.acquire_layer(0)
    assert swapper.stats()["bytes_read"] == 0  # zeros: nothing to read
    assert [(t.dtype, tuple(t.shape)) for t in ts] == [
        (torch.bfloat16, (3, 5)), (torch.int32, (7,))]
    assert all(t.count_nonzero().item() == 0 for t in ts)
    ts[0].fill_(1.5)
    ts[1].copy_(torch.arange(7, dtype=torch.int32))
    p.release_layer(0, True)
    p.evict_layer(0)
    swapper.wait_all()
    assert swapper.info(0)["state"] == "on_nvme"
    ts = p.acquire_layer(0)
    assert torch.equal(ts[0], torch.full((3, 5), 1.5, dtype=torch.bfloat16))
    assert ts[1].tolist() == list(range(7))
    p.release_layer(0, False)
    e = raises_errno(errno.EINVAL, p.add_layer, 1,
                     [torch.empty(0, device="meta")])  # as an int 0
    assert "tensor 0 has 0 bytes" in str(e)
    p.close()


def test_acquire_layer_reads_ahead_in_the_walks_direction(swapper):
    p = nvswap.ParamSwapper(swapper, lookahead=1)
    for layer in range(3):
        p.add_layer(layer, [blob(5000, layer)])
    p.acquire_layer(0, memoryview=True)
    swapper.wait_all()
    assert swapper.info(1 << 20)["state"] == "resident"  # layer 1 ahead
    assert swapper.info(2 << 20)["state"] == "on_nvme"
    p.release_layer(0, False)
    p.evict_layer(0)
    # backward: acquiring layer 1 after... layer 2 reads layer 1 ahead
    p.evict_layer(1)
    swapper.wait_all()
    p.acquire_layer(2, memoryview=True)
    p.release_layer(2, False)
    views = p.acquire_layer(1, memoryview=True)
    swapper.wait_all()
    assert swapper.info(0)["state"] == "resident"  # layer 0 ahead, downwards
    assert bytes(views[0]) == blob(5000, 1)
    p.release_layer(1, False)


def test_max_in_cpu_keeps_whole_layers_out_of_the_swapper(swapper):
    p = nvswap.ParamSwapper(swapper, max_in_cpu="8K")
    p.add_layer(0, [blob(4000, 1), blob(4000, 2)])  # 4032 + 4000 <= 8192
    p.add_layer(1, [blob(4000, 3)])                 # does not fit any more
    assert p.layer_in_cpu(0) is True
    assert p.layer_in_cpu(1) is False
    assert p.layer_in_cpu(99) is False
    assert swapper.stats()["tensors"] == 1
    views = p.acquire_layer(0, memoryview=True)
    assert [bytes(v) for v in views] == [blob(4000, 1), blob(4000, 2)]
    p.release_layer(0, False)
    p.evict_layer(0)  # a no-op in CPU memory


def test_add_layer_in_cpu_false_streams_it(swapper):
    p = nvswap.ParamSwapper(swapper, max_in_cpu="8K")
    p.add_layer(0, [blob(4000, 1)], in_cpu=False)  # would fit: streamed
    p.add_layer(1, [blob(4000, 2)], in_cpu=True)
    assert [p.layer_in_cpu(0), p.layer_in_cpu(1)] == [False, True]
    assert swapper.stats()["tensors"] == 1
    views = p.acquire_layer(0, memoryview=True)
    assert bytes(views[0]) == blob(4000, 1)
    p.release_layer(0, False)
    with pytest.raises(TypeError):
        nvswap.OptimizerSwapper(swapper, id_base=1 << 40).add_group(
            0, [100], in_cpu=False)  # add_group has no such keyword


def test_param_errors(swapper):
    p = nvswap.ParamSwapper(swapper)
    p.add_layer(0, [100])
    raises_errno(errno.EEXIST, p.add_layer, 0, [100])
    raises_errno(errno.EINVAL, p.add_layer, 1, [])
    raises_errno(errno.EINVAL, p.add_layer, 1, [0])
    raises_errno(errno.EINVAL, p.add_layer, 1 << 20, [100])
    e = raises_errno(errno.EFBIG, p.add_layer, 1, [MiB, 1])
    assert "layer 1" in e.strerror
    with pytest.raises(ValueError, match="at most 64"):
        p.add_layer(1, [1] * 65)
    with pytest.raises(TypeError):
        p.add_layer(1, 100)
    for fn in (p.prefetch_layer, p.acquire_layer, p.evict_layer):
        raises_errno(errno.ENOENT, fn, 7)
    raises_errno(errno.ENOENT, p.release_layer, 7, False)
    raises_errno(errno.EBUSY, p.release_layer, 0, False)
    p.acquire_layer(0, memoryview=True)
    raises_errno(errno.EBUSY, p.acquire_layer, 0)
    raises_errno(errno.EBUSY, p.evict_layer, 0)
    p.release_layer(0, False)
    with pytest.raises(ValueError, match="layer or group"):
        p.acquire_layer(-1)


def test_set_walk_reads_ahead_in_the_traced_order(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=8)
    p = nvswap.ParamSwapper(s, lookahead=2)
    for layer in range(6):
        p.add_layer(layer, [blob(5000, layer)])

    def ahead_of(layer):
        """Acquire layer: the layers it started reading ahead."""
        before = s.stats()["prefetches"]
        views = p.acquire_layer(layer, memoryview=True)
        assert bytes(views[0]) == blob(5000, layer)
        started = s.stats()["prefetches"] - before
        off_disk = {k for k in range(6)
                    if k != layer and s.info(k << 20)["state"] != "on_nvme"}
        p.release_layer(layer, False)
        for k in range(6):
            p.evict_layer(k)
        s.wait_all()
        assert started == len(off_disk)
        return off_disk

    p.set_walk([4, 0, 2, 4])  # layer 4 tied: used first and last
    assert ahead_of(4) == {0, 2}
    assert ahead_of(0) == {2, 4}
    assert ahead_of(2) == {4, 0}  # on past the end: backward comes back
    assert ahead_of(4) == {2, 0}  # the end of the forward pass (4 kept)
    assert ahead_of(4) == {2, 0}  # backward starts where forward ended
    assert ahead_of(2) == {0, 4}
    assert ahead_of(0) == {4, 2}  # on past the end: the next step
    assert ahead_of(4) == {0, 2}
    assert ahead_of(5) == set()   # not in the walk
    p.set_walk(range(0))          # back to numbers: downwards after 5
    assert ahead_of(4) == {3, 2}
    p.set_walk((1, 3))
    assert ahead_of(1) == {3}
    p.close()
    s.close()


def test_set_walk_errors(swapper):
    p = nvswap.ParamSwapper(swapper)
    p.add_layer(0, [100])
    p.add_layer(1, [100])
    e = raises_errno(errno.ENOENT, p.set_walk, [0, 1, 9])
    assert "entry 2 of the walk is layer 9, which was not added" in e.strerror
    with pytest.raises(TypeError, match="sequence of layer numbers"):
        p.set_walk(5)
    with pytest.raises(TypeError):
        p.set_walk([0, "1"])
    with pytest.raises(ValueError, match="layer or group"):
        p.set_walk([0, -1])
    with pytest.raises(ValueError, match="at most 4194304"):
        p.set_walk([0] * (4 * 2**20 + 1))
    p.set_walk([1, 0])
    p.close()
    with pytest.raises(ValueError):
        p.set_walk([0])


def test_roles_share_a_swapper_with_different_id_bases(swapper):
    p = nvswap.ParamSwapper(swapper, id_base=0)
    o = nvswap.OptimizerSwapper(swapper, id_base=1 << 40)
    p.add_layer(0, [b"p" * 10])
    o.add_group(0, [b"o" * 10])
    assert swapper.info(0)["nbytes"] == 10
    assert swapper.info(1 << 40)["nbytes"] == 10
    # the same id_base collides
    p2 = nvswap.ParamSwapper(swapper)
    raises_errno(errno.EEXIST, p2.add_layer, 0, [10])


# ---- optimizer state --------------------------------------------------------


def test_optimizer_state_round_trips_through_swap_out(swapper):
    o = nvswap.OptimizerSwapper(swapper, pipeline_read=True,
                                pipeline_write=True)
    n = 256
    for g in range(3):
        o.add_group(g, [struct.pack(f"{n}f", *([float(g)] * n)), n * 4])
    for step in range(2):
        for g in range(3):
            master, exp_avg = o.swap_in(g, memoryview=True)
            m = master.cast("f")
            e = exp_avg.cast("f")
            for i in range(n):
                e[i] = e[i] + 1.0
                m[i] = m[i] + 0.5
            o.swap_out(g)
    swapper.wait_all()
    for g in range(3):
        master, exp_avg = o.swap_in(g, memoryview=True)
        assert master.cast("f").tolist() == [g + 1.0] * n
        assert exp_avg.cast("f").tolist() == [2.0] * n
        o.swap_out(g)
    assert swapper.stats()["io_errors"] == 0


def test_swap_in_with_torch_and_swap_out_revokes(swapper):
    torch = pytest.importorskip("torch")
    o = nvswap.OptimizerSwapper(swapper)
    state = [torch.zeros(10), torch.ones(10), torch.full((10,), 2.0)]
    o.add_group(5, state)
    ts = o.swap_in(5)
    assert all(torch.equal(t, s) for t, s in zip(ts, state))
    ts[2].add_(1)
    o.swap_out(5)  # without pipeline_write: written when it returns
    assert swapper.info(5 << 20)["state"] == "on_nvme"
    assert ts[2].numel() == 0
    assert torch.equal(o.swap_in(5)[2], torch.full((10,), 3.0))
    o.swap_out(5)


def test_optimizer_errors(swapper):
    o = nvswap.OptimizerSwapper(swapper)
    raises_errno(errno.ENOENT, o.swap_in, 0)
    raises_errno(errno.ENOENT, o.swap_out, 0)
    o.add_group(0, [10])
    raises_errno(errno.EBUSY, o.swap_out, 0)
    o.swap_in(0, memoryview=True)
    raises_errno(errno.EBUSY, o.swap_in, 0)
    with pytest.raises(TypeError):
        o.swap_out(0, True)  # swap_out always writes back
    o.swap_out(0)


# ---- gradients --------------------------------------------------------------


def test_gradients_are_written_behind_and_read_back(swapper):
    g = nvswap.GradSwapper(swapper)
    g.add_group(0, 64)
    assert bytes(g.acquire(0, memoryview=True)) == bytes(64)
    g.release(0)
    g.write(0, 0, struct.pack("4f", 1, 2, 3, 4))
    g.write(0, 16, struct.pack("4f", 5, 6, 7, 8))
    g.write(0, 0, struct.pack("4f", 10, 10, 10, 10), "accumulate_f32")
    g.flush(0)
    mv = g.acquire(0, "f", memoryview=True)
    assert mv.readonly
    assert mv.tolist()[:8] == [11, 12, 13, 14, 5, 6, 7, 8]
    assert mv.tolist()[8:] == [0.0] * 8
    g.release(0)
    with pytest.raises(ValueError):
        mv[0]
    swapper.wait(0)  # the acquire took the buffer during the write-back
    st = swapper.info(0)
    assert (st["state"], st["on_disk"]) == ("on_nvme", True)
    g.zero(0)
    assert bytes(g.acquire(0, memoryview=True)) == bytes(64)
    g.release(0)


def test_gradients_with_torch(swapper):
    torch = pytest.importorskip("torch")
    g = nvswap.GradSwapper(swapper, id_base=7)
    g.add_group(2, 4 * 6)
    g.write(2, 0, torch.arange(6, dtype=torch.float32))
    g.write(2, 0, torch.ones(6), mode="accumulate_f32")
    t = g.acquire(2, torch.float32, (2, 3))  # flushes first
    assert torch.equal(t, torch.arange(1, 7, dtype=torch.float32).view(2, 3))
    g.release(2)
    assert t.numel() == 0


def test_gradient_errors(swapper):
    g = nvswap.GradSwapper(swapper)
    g.add_group(0, 16)
    raises_errno(errno.EEXIST, g.add_group, 0, 16)
    raises_errno(errno.EINVAL, g.add_group, 1, 0)
    raises_errno(errno.ENOENT, g.write, 9, 0, b"x")
    raises_errno(errno.EINVAL, g.write, 0, 12, b"12345")
    raises_errno(errno.EINVAL, g.write, 0, 2, b"1234", "accumulate_f32")
    with pytest.raises(ValueError, match="mode"):
        g.write(0, 0, b"1234", "add")
    raises_errno(errno.ENOENT, g.flush, 9)
    raises_errno(errno.ENOENT, g.acquire, 9)
    raises_errno(errno.ENOENT, g.release, 9)
    raises_errno(errno.ENOENT, g.zero, 9)
    raises_errno(errno.EBUSY, g.release, 0)
    g.write(0, 0, b"abcd")
    raises_errno(errno.EBUSY, g.zero, 0)  # open until flushed
    g.acquire(0, memoryview=True)
    raises_errno(errno.EBUSY, g.write, 0, 0, b"abcd")
    raises_errno(errno.EBUSY, g.acquire, 0)
    with pytest.raises(TypeError):
        g.release(0, dirty=True)
    g.release(0)


# ---- life -------------------------------------------------------------------


def test_role_close_unregisters_and_use_after_close_raises(swapper):
    p = nvswap.ParamSwapper(swapper)
    p.add_layer(0, [b"a" * 100])
    views = p.acquire_layer(0, memoryview=True)
    assert p.swapper is swapper
    p.close()
    p.close()
    assert p.closed
    assert swapper.stats()["tensors"] == 0
    with pytest.raises(ValueError):
        views[0][0]
    for call in (lambda: p.add_layer(1, [10]), lambda: p.acquire_layer(0),
                 lambda: p.release_layer(0, False), lambda: p.evict_layer(0),
                 lambda: p.layer_in_cpu(0), p.__enter__):
        with pytest.raises(ValueError, match="ParamSwapper is closed"):
            call()


def test_swapper_close_closes_its_roles_first(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=2)
    p = nvswap.ParamSwapper(s)
    g = nvswap.GradSwapper(s, id_base=1 << 40)
    p.add_layer(0, [b"a" * 100])
    g.add_group(0, 100)
    views = p.acquire_layer(0, memoryview=True)
    s.close()
    assert p.closed and g.closed
    with pytest.raises(ValueError):
        views[0][0]
    with pytest.raises(ValueError, match="closed"):
        p.acquire_layer(0)
    p.close()  # nothing left to do


def test_a_role_keeps_its_swapper_alive(swapdir):
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=2)
    d = s.dirs[0]
    o = nvswap.OptimizerSwapper(s)
    o.add_group(0, [b"x" * 10])
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is not None
    assert bytes(o.swap_in(0, memoryview=True)[0]) == b"x" * 10
    o.swap_out(0)
    del o
    gc.collect()
    assert ref() is None
    assert not os.path.exists(d)


def test_context_managers(swapdir):
    with nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB,
                        buffer_count=2) as s:
        with nvswap.ParamSwapper(s) as p:
            p.add_layer(0, [10])
            assert s.stats()["tensors"] == 1
        assert p.closed
        assert s.stats()["tensors"] == 0


def test_constructor_errors(swapdir):
    with pytest.raises(TypeError, match="nvswap.Swapper"):
        nvswap.ParamSwapper(object())
    s = nvswap.Swapper(nvme_path=swapdir, buffer_size=MiB, buffer_count=2)
    s.close()
    with pytest.raises(ValueError, match="Swapper is closed"):
        nvswap.GradSwapper(s)
    with pytest.raises(ValueError, match="lookahead"):
        nvswap.ParamSwapper(s, lookahead=-1)


def test_a_role_serializes_calls_from_threads(swapper):
    p = nvswap.ParamSwapper(swapper)
    for layer in range(8):
        p.add_layer(layer, [blob(2000, layer)])
    errors = []
    lock = threading.Lock()  # the walk itself is one thread's at a time

    def walk(k):
        try:
            for rep in range(20):
                layer = (k * 3 + rep) % 8
                with lock:
                    views = p.acquire_layer(layer, memoryview=True)
                    ok = bytes(views[0]) == blob(2000, layer)
                    p.release_layer(layer, False)
                assert ok
                p.prefetch_layer((layer + 1) % 8)
                p.layer_in_cpu(layer)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=walk, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
