# SPDX-License-Identifier: MIT
"""What a person reads (issue 48): nvt.summary(model), stats() on one
screen, and nvt.progress(model), an opt-in line (or a dict to a
callable) after each optimizer step, or each forward when serving: the
figures each report gives add up to the model's own counters."""
import io
import re

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap.torch as nvt  # noqa: E402


def stack(n=4, width=64):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width)
                                 for _ in range(n)])


def train(model, opt, steps):
    for _ in range(steps):
        model(torch.randn(8, 64)).square().mean().backward()
        opt.step()
        opt.zero_grad()


def test_summary_of_a_trained_model_says_where_and_what_it_cost(swapdir):
    model = nvt.offload(stack(), nvme_path=swapdir)
    opt = nvt.AdamW(model.parameters(), lr=1e-3)
    train(model, opt, 3)
    nvt.wait(model)
    s = nvt.stats(model)
    lines = nvt.summary(model).splitlines()
    assert len(lines) == 4, lines
    assert lines[0].startswith("nvswap.torch: 4 layers, 8 parameters (")
    assert f"on NVMe in {swapdir}/nvswap/param/rank0 " \
        f"({s['param']['backend']})" in lines[0]
    assert lines[1].startswith(
        f"  pools: parameters {s['param']['buffer_count']} x ")
    assert "gradients and optimizer state" in lines[1]
    assert lines[2].startswith("  trained: 3 optimizer steps (")
    assert lines[3].startswith("  I/O: read ")
    assert f"waited {s['io_exposed_s']:.3f} s for it" in lines[3]
    nvt.restore(model)


def test_summary_of_a_served_model(swapdir):
    model = nvt.offload(stack(6).eval(), nvme_path=swapdir,
                        inference=True)
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(2, 64))
    text = nvt.summary(model)
    assert "  served: 3 forwards, the last read " in text
    assert "trained" not in text and "optimizer state" not in text
    nvt.restore(model)


def test_progress_figures_add_up_to_the_counters(swapdir):
    model = nvt.offload(stack(), nvme_path=swapdir)
    opt = nvt.AdamW(model.parameters(), lr=1e-3)
    got = []
    before = nvt.stats(model)
    nvt.progress(model, got.append)
    train(model, opt, 4)
    after = nvt.stats(model)
    assert [g["step"] for g in got] == [1, 2, 3, 4]
    # each report's figures are what moved since the one before
    for key in ("bytes_read", "bytes_written"):
        total = before[key]
        for g in got:
            total += g[key]
            assert g[key + "_total"] == total, (key, got)
        assert total <= after[key]  # write-behind may still add
    assert sum(g["io_exposed_s"] for g in got) <= \
        after["io_exposed_s"] - before["io_exposed_s"] + 1e-9
    assert all(g["seconds"] > 0 and g["bytes_per_s"] == pytest.approx(
        (g["bytes_read"] + g["bytes_written"]) / g["seconds"])
        for g in got)
    assert sum(g["bytes_read"] for g in got) > 0
    nvt.progress(model, None)  # off: nothing more reported
    train(model, opt, 1)
    assert len(got) == 4
    nvt.restore(model)


LINE = re.compile(r"^nvswap step (\d+): \d+\.\d\d s, read \S+ \S+, written "
                  r"\S+ \S+ \(\S+ \S+/s\), waited \d+\.\d{3} s for I/O "
                  r"\(\d+%\)$")


def test_progress_lines_to_a_file_every_other_step(swapdir):
    model = nvt.offload(stack(), nvme_path=swapdir)
    opt = nvt.AdamW(model.parameters(), lr=1e-3)
    out = io.StringIO()
    nvt.progress(model, out, every=2)
    train(model, opt, 5)
    lines = out.getvalue().splitlines()
    assert [int(LINE.match(ln).group(1)) for ln in lines] == [2, 4], lines
    nvt.restore(model)


def test_progress_when_serving_is_per_forward(swapdir):
    model = nvt.offload(stack(6).eval(), nvme_path=swapdir,
                        inference=True)
    got = []
    nvt.progress(model, got.append)
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(2, 64))
    assert [g["forward"] for g in got] == [1, 2, 3]
    assert all(g["bytes_written"] == 0 for g in got)
    nvt.restore(model)


@pytest.mark.parametrize("kw, exc, words", [
    ({"every": 0}, ValueError, "every=0: a count of steps"),
    ({"every": 1.5}, ValueError, "every=1.5"),
    ({"every": True}, ValueError, "every=True"),
    ({"out": 5}, TypeError, "out=5: a file, a callable"),
])
def test_progress_refuses_what_it_cannot_use(swapdir, kw, exc, words):
    model = nvt.offload(stack(2), nvme_path=swapdir)
    with pytest.raises(exc, match=re.escape(words)):
        nvt.progress(model, **kw)
    assert nvt.engine_of(model).progress is None
    nvt.restore(model)


def test_a_model_not_offloaded_is_refused(swapdir):
    with pytest.raises(ValueError):
        nvt.summary(stack(1))
    with pytest.raises(ValueError):
        nvt.progress(stack(1))
