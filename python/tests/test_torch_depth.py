# SPDX-License-Identifier: MIT
"""The read-ahead depth of a served model, chosen from measured disk and
compute times (issue 35; nvswap/torch/_depth.py): the pipeline model on
times worked out by hand, then real models whose forwards the Tuner
times, the choice it makes, and what that choice reads afterwards."""
import copy
import errno
import time

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from nvswap.torch import _depth, _infer  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402


# ------------------------------------------------------------ the model
def test_a_disk_bound_walk_takes_its_reads_and_keeping_saves_them():
    """10 layers, each 1 s of compute and 2 s of read: the disk sets the
    pace (20 s); each layer kept saves its read (2 s) and the depth lost
    costs nothing (2 buffers still keep the disk busy)."""
    walk = [(0.0, 1.0, 2.0)] * 10
    for buffers in (2, 3, 4, 8):
        assert _depth.simulate(walk, buffers, buffers - 1) == \
            pytest.approx(20.0)
    preds, kept = _depth.plan(walk, list(range(10)), 4, 3)
    assert preds == pytest.approx([20.0, 18.0, 16.0])
    assert len(kept) == 2 and len(set(kept)) == 2
    assert _depth.choose(preds) == 2
    # two layers in one: 2 + 2 s of read, 1 + 1 s of compute
    assert _depth.simulate([(0.0, 1.0, 2.0)] * 2, 2, 1) == \
        pytest.approx(4.0)


def test_a_compute_bound_walk_hides_its_reads_at_any_depth():
    """Reads shorter than the compute: 20 s whatever the depth; the ties
    go to keeping the most (fewer bytes read)."""
    walk = [(0.0, 2.0, 1.0)] * 10
    preds, _ = _depth.plan(walk, list(range(10)), 5, 4)
    assert preds == pytest.approx([20.0] * 4)
    assert _depth.choose(preds) == 3


def test_compute_in_bursts_needs_the_depth():
    """6 layers read in 1 s each, all the compute (6 s) in one burst
    before the first: the burst hides B - 1 reads, the rest run one
    after another: 6 + (6 - (B - 1)) = 13 - B seconds."""
    walk = [(6.0, 0.0, 1.0)] + [(0.0, 0.0, 1.0)] * 5
    for buffers in range(2, 8):
        assert _depth.simulate(walk, buffers, buffers - 1) == \
            pytest.approx(13.0 - buffers), buffers
    # a shallower lookahead than the pool reads less ahead
    assert _depth.simulate(walk, 7, 2) == pytest.approx(10.0)
    # two bursts per forward (before layers 0 and 6 of 12): a buffer
    # hides a read at each, a layer kept saves one: keep none
    walk = [(6.0 if i % 6 == 0 else 0.0, 0.0, 1.0) for i in range(12)]
    preds, _ = _depth.plan(walk, list(range(12)), 4, 3)
    assert preds == pytest.approx([18.0, 19.0, 20.0])
    assert _depth.choose(preds) == 0


def test_a_layer_walked_twice_is_kept_at_both_places():
    """A tied embedding used first and last: keeping it drops both of
    its reads (disk-bound: 4 reads of 2 s, then 2)."""
    walk = [(0.0, 0.5, 2.0)] * 4
    preds, kept = _depth.plan(walk, [7, 1, 2, 7], 3, 2)
    assert kept == [7] and preds == pytest.approx([8.0, 4.0])
    # the same with 1 s of compute each: reads 4 s, compute 4 s, but
    # with 2 buffers layer 2's read starts at layer 1's acquire, after
    # the kept layer's 2 s of compute: 5 s
    walk = [(0.0, 1.0, 2.0)] * 4
    preds, kept = _depth.plan(walk, [7, 1, 2, 7], 3, 2)
    assert kept == [7] and preds == pytest.approx([8.0, 5.0])


def test_the_model_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match="buffers must be at least 1"):
        _depth.simulate([(0.0, 1.0, 1.0)], 0, 0)
    # nothing streamed: the compute alone
    assert _depth.simulate([(1.0, 2.0, None)] * 3, 2, 1) == \
        pytest.approx(9.0)


# ------------------------------------------------------ served models
class Busy(torch.nn.Module):
    """Compute that takes s[0] seconds (a sleep: no parameters; s a list
    the test may change between forwards)."""

    def __init__(self, s):
        super().__init__()
        self.s = s

    def forward(self, x):
        time.sleep(self.s[0])
        return x


def slow_mlp(n=6, s=0.02):
    """n layers of 64 x 64 (16,640 bytes each) with s seconds of compute
    after each (s: a number, or a list of one shared by every layer):
    reads of 16 KiB hide under it at any depth."""
    torch.manual_seed(5)
    s = s if isinstance(s, list) else [s]
    mods = []
    for _ in range(n):
        mods += [torch.nn.Linear(64, 64), Busy(s)]
    return torch.nn.Sequential(*mods).eval()


def serve(model, swapdir):
    """model offloaded for inference through 4 buffers of 32 KiB (the
    read-ahead 3 deep): its engine."""
    nvt.offload(model, nvme_path=swapdir, inference=True,
                buffer_size=32768, buffer_count=4)
    return engine_of(model)


def run(model, x, n):
    with torch.no_grad():
        return [model(x) for _ in range(n)]


def test_a_compute_bound_model_keeps_a_layer_per_buffer_it_spares(
        swapdir, monkeypatch):
    """6 layers through 4 buffers (lookahead 3), 20 ms of compute each:
    timed over forwards 2-5, the reads hide at any depth, so 2 buffers of
    read-ahead do, and the other 2 keep a layer each for good: no more
    pinned memory, those layers never read again, the same outputs.
    (The check after the choice undoes it when forwards turn out 5 %
    slower: 6 ms of a 120 ms forward here, which a loaded CI host's
    sleeps overshoot; so this test allows them twice as long, and
    test_a_choice_that_turns_out_slower_is_undone doubles the compute.)"""
    monkeypatch.setattr(_depth, "SLOWER", 1.0)
    ref = slow_mlp()
    m = copy.deepcopy(ref)
    x = torch.randn(3, 64)
    want = run(ref, x, 1)[0]
    eng = serve(m, swapdir)
    try:
        layer_bytes = eng.layer_bytes
        assert nvt.stats(m)["lookahead"] == 3
        assert nvt.stats(m)["read_ahead"]["state"] == "waiting"
        for y in run(m, x, _depth.WARMUP + _depth.MEASURE - 1):
            assert torch.equal(y, want)
        s = nvt.stats(m)
        assert s["read_ahead"]["state"] == "measuring"
        assert s["last_forward_bytes_read"] == sum(layer_bytes)
        pinned = nvswap.pinned_stats()["bytes_in_use"]
        assert torch.equal(run(m, x, 1)[0], want)  # the last one timed
        s = nvt.stats(m)
        ra = s["read_ahead"]
        assert ra["state"] == "checking", ra
        assert ra["forwards_timed"] == _depth.MEASURE
        assert ra["buffers"] == 2 and len(ra["kept"]) == 2
        assert ra["measured_s"] >= 6 * 0.02
        assert ra["disk_bytes_per_s"] > 0 and ra["read_s"] > 0
        assert len(ra["predicted_s"]) == 3
        assert s["lookahead"] == 1
        assert s["resident_layers"] == 2
        assert s["resident_bytes"] == sum(layer_bytes[i]
                                          for i in ra["kept"])
        assert nvswap.pinned_stats()["bytes_in_use"] == pinned
        assert set(ra["kept"]) <= eng.bound
        assert eng.walk == [i for i in range(6) if i not in ra["kept"]]
        for _ in range(_depth.MEASURE):
            assert torch.equal(run(m, x, 1)[0], want)
            assert nvt.stats(m)["last_forward_bytes_read"] == \
                sum(b for i, b in enumerate(layer_bytes)
                    if i not in ra["kept"])
        # timed after the choice as well: as fast, so it stays
        ra = nvt.stats(m)["read_ahead"]
        assert ra["state"] == "tuned", ra
        assert ra["after_s"] <= ra["forward_s"] * (1 + _depth.SLOWER)
        assert nvt.stats(m)["resident_layers"] == 2
        # a state dict reads the kept layers from their buffers
        sd = m.state_dict()
        for k, v in ref.state_dict().items():
            assert torch.equal(sd[k], v), k
    finally:
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)


def test_a_choice_that_turns_out_slower_is_undone(swapdir):
    """The compute doubles once the layers are kept (what a disk that
    needs a deeper queue would do to the reads): the forwards timed
    after the choice are slower than before, so the layers kept are
    released and streamed again, the walk, the depth and the bytes read
    as they were, the outputs the same."""
    delay = [0.02]
    ref = slow_mlp(s=0.0)
    m = slow_mlp(s=delay)
    x = torch.randn(3, 64)
    want = run(ref, x, 1)[0]
    eng = serve(m, swapdir)
    try:
        pinned = nvswap.pinned_stats()["bytes_in_use"]
        for y in run(m, x, _depth.WARMUP + _depth.MEASURE):
            assert torch.equal(y, want)
        ra = nvt.stats(m)["read_ahead"]
        assert ra["state"] == "checking" and len(ra["kept"]) == 2, ra
        delay[0] = 0.04
        for y in run(m, x, _depth.MEASURE):
            assert torch.equal(y, want)
        s = nvt.stats(m)
        ra = s["read_ahead"]
        assert ra["state"] == "undone", ra
        assert ra["reason"].startswith("a forward took ")
        assert ra["after_s"] > ra["forward_s"] * (1 + _depth.SLOWER)
        assert ra["kept"] == [] and ra["buffers"] == 4
        assert s["resident_layers"] == 0 and s["lookahead"] == 3
        assert not eng.bound and not eng.kept_streamed
        assert eng.walk == list(range(6))
        assert nvswap.pinned_stats()["bytes_in_use"] == pinned
        assert torch.equal(run(m, x, 1)[0], want)
        assert s["param"]["buffers_in_use"] <= 4
        assert nvt.stats(m)["last_forward_bytes_read"] == \
            sum(eng.layer_bytes)
    finally:
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)


class FailingReads:
    """The engine's ParamSwapper, whose acquire_layer() fails with EIO
    from its fail-th call on (a fault injected: the disk refusing a read
    of a layer the choice keeps), once armed; the rest passes through."""

    def __init__(self, real, fail):
        self.real, self.fail, self.calls, self.armed = real, fail, [], False

    def acquire_layer(self, layer):
        if self.armed:
            self.calls.append(layer)
            if len(self.calls) >= self.fail:
                raise nvswap.Error(errno.EIO, f"injected: layer {layer}")
        return self.real.acquire_layer(layer)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_choice_whose_layer_cannot_be_read_is_not_made(swapdir,
                                                         monkeypatch):
    """The choice keeps 2 layers; reading the second fails (EIO): the
    forward that ended still returns its output, the first layer is let
    go again (released, streamed), the depth stays as it was and the
    report says why; the next forwards stream every layer."""
    ref = slow_mlp()
    m = copy.deepcopy(ref)
    x = torch.randn(3, 64)
    want = run(ref, x, 1)[0]
    eng = serve(m, swapdir)
    real = eng.params
    eng.params = fake = FailingReads(real, 2)
    keep = _infer.keep_streamed

    def armed(e, layers):
        fake.armed = True
        try:
            return keep(e, layers)
        finally:
            fake.armed = False
    monkeypatch.setattr(_infer, "keep_streamed", armed)
    try:
        pinned = nvswap.pinned_stats()["bytes_in_use"]
        for y in run(m, x, _depth.WARMUP + _depth.MEASURE):
            assert torch.equal(y, want)
        s = nvt.stats(m)
        ra = s["read_ahead"]
        assert len(fake.calls) == 2, fake.calls
        assert ra["state"] == "kept" and ra["kept"] == [], ra
        assert ra["buffers"] == 4 and s["lookahead"] == 3
        assert ra["reason"].startswith("keeping 2 layers failed: "), ra
        assert f"injected: layer {fake.calls[1]}" in ra["reason"]
        assert not eng.bound and not eng.kept_streamed
        assert s["resident_layers"] == 0
        assert eng.walk == list(range(6))
        for p in eng.layers[fake.calls[0]]:
            assert p.data_ptr() == p._nvswap.placeholder.data_ptr()
        real.evict_layer(fake.calls[0])  # EBUSY were it still acquired
        assert nvswap.pinned_stats()["bytes_in_use"] == pinned
        for _ in range(2):
            assert torch.equal(run(m, x, 1)[0], want)
            assert nvt.stats(m)["last_forward_bytes_read"] == \
                sum(eng.layer_bytes)
    finally:
        eng.params = real
        nvt.restore(m)
    for a, b in zip(ref.parameters(), m.parameters()):
        assert torch.equal(a, b)


def test_the_depth_is_left_alone_when_told_or_when_it_cannot_pay(swapdir):
    """No Tuner: lookahead= given, 2 buffers (nothing to spare), a
    training model. A walk that changes from forward to forward keeps
    the depth and says why."""
    for kw in (dict(inference=True, buffer_count=4, lookahead=3),
               dict(inference=True, buffer_count=2),
               dict(buffer_count=4)):
        m = slow_mlp(s=0.0)
        nvt.offload(m, nvme_path=swapdir, buffer_size=32768, **kw)
        try:
            run(m, torch.randn(2, 64), 6)
            assert nvt.stats(m)["read_ahead"] is None, kw
        finally:
            nvt.restore(m)

    class Alternate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = slow_mlp(3, 0.0)
            self.b = slow_mlp(3, 0.0)
            self.n = 0

        def forward(self, x):
            self.n += 1
            return self.a(x) if self.n % 2 else self.b(x)

    m = Alternate().eval()
    serve(m, swapdir)
    try:
        run(m, torch.randn(2, 64), 8)
        ra = nvt.stats(m)["read_ahead"]
        assert ra["state"] == "kept"
        assert ra["reason"] == "the forwards timed walked different layers"
        assert nvt.stats(m)["resident_layers"] == 0
    finally:
        nvt.restore(m)


def test_the_disk_rate_is_the_bytes_over_the_time_reads_were_in_flight(
        swapdir):
    """io_busy_ns (nvs_aio_stats.busy_ns): above 0 once layers were read,
    never more than the wall time, still while nothing is read."""
    m = slow_mlp(s=0.0)
    t0 = time.perf_counter_ns()
    nvt.offload(m, nvme_path=swapdir, inference=True, buffer_size=32768,
                buffer_count=2)
    try:
        run(m, torch.randn(2, 64), 2)
        ps = engine_of(m).pswap.stats()
        assert ps["bytes_read"] > 0
        assert 0 < ps["io_busy_ns"] <= time.perf_counter_ns() - t0
        time.sleep(0.05)
        assert engine_of(m).pswap.stats()["io_busy_ns"] == ps["io_busy_ns"]
    finally:
        nvt.restore(m)
