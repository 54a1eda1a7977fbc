# SPDX-License-Identifier: MIT
"""offload(inference=True, page_cache='auto'), the default of a model
served (issue 35): the page cache where the memory left beside nvswap's
budget holds every byte a forward streams, O_DIRECT where it does not (a cache smaller than the stream is
cycled through: slower than O_DIRECT, bench/RESULTS.md). The memory left
is MemAvailable and the room the process's memory cgroups leave
(_room.py), read for real here in a cgroup of our own."""
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="nvswap.torch needs torch")
import nvswap  # noqa: E402
import nvswap.torch as nvt  # noqa: E402
from filehelp import fd_direct, held_direct  # noqa: E402
from nvswap.torch import _room  # noqa: E402
from nvswap.torch._engine import engine_of  # noqa: E402
from torchhelp import memcgroup_or_skip  # noqa: E402

MIB = 1 << 20


def model():
    torch.manual_seed(8)
    return torch.nn.Sequential(*[torch.nn.Linear(256, 256)
                                 for _ in range(8)])  # 8 x 257 KiB


def offload_auto(swapdir, **kw):
    m = model()
    ref = model()
    nvt.offload(m, nvme_path=swapdir, inference=True, page_cache="auto",
                **kw)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(m(x), ref(x))
    eng = engine_of(m)
    swap = os.path.join(eng.pswap.dirs[0], "swap.0")
    return m, nvt.stats(m)["page_cache"], held_direct(swap)


def test_auto_caches_when_memory_is_left(swapdir):
    """This machine has gigabytes left beside a 2 MiB model: 'auto' opens
    the swap file without O_DIRECT, and stats() says so."""
    assert _room.available() > 64 * MIB
    m, cached, direct = offload_auto(swapdir, memory=MIB)
    try:
        assert cached is True and direct is False
    finally:
        nvt.restore(m)


@pytest.mark.parametrize("memory", [None, MIB])
def test_auto_keeps_o_direct_when_the_stream_does_not_fit(swapdir,
                                                          monkeypatch,
                                                          memory):
    """With less memory left than what a forward streams (memory left
    injected: the one figure a test cannot set on a shared machine),
    'auto' keeps O_DIRECT: with memory= (the budget is taken from what is
    left) and without (every parameter streams)."""
    every = 8 * (256 * 256 + 256) * 4  # memory=1 MiB keeps one resident
    held = memory or 0
    monkeypatch.setattr(_room, "available", lambda: held + every // 2)
    m, cached, direct = offload_auto(swapdir, memory=memory)
    try:
        assert cached is False and direct is True
    finally:
        nvt.restore(m)
    monkeypatch.setattr(_room, "available", lambda: held + 2 * every)
    m, cached, direct = offload_auto(swapdir, memory=memory)
    try:
        assert cached is True and direct is False
    finally:
        nvt.restore(m)


def test_auto_is_the_default_of_a_served_model_only(swapdir):
    """inference=True without page_cache= is 'auto' (here: memory is
    left, the cache is taken); unless the config sets nvswap.page_cache
    (false: O_DIRECT), or is an nvswap.Config made from text (its keys
    cannot be told from defaults: the config's false stands). A training
    model's default stays O_DIRECT."""
    cfg = {"zero_optimization": {"offload_param": {
        "device": "nvme", "nvme_path": swapdir}},
        "nvswap": {"page_cache": False}}
    other = {"zero_optimization": cfg["zero_optimization"]}
    made = nvswap.Config.from_str(json.dumps(other))
    for kw, inference, cached in (({}, True, True),
                                  ({"config": cfg}, True, False),
                                  ({"config": other}, True, True),
                                  ({"config": made}, True, False),
                                  ({}, False, False)):
        m = model()
        nvt.offload(m, **({} if kw else {"nvme_path": swapdir}), **kw,
                    inference=inference)
        try:
            eng = engine_of(m)
            swap = os.path.join(eng.pswap.dirs[0], "swap.0")
            assert held_direct(swap) is (not cached), (kw, inference)
            if inference:
                assert nvt.stats(m)["page_cache"] is cached
        finally:
            nvt.restore(m)


def test_the_keyword_overrides_the_configs_page_cache(swapdir):
    """page_cache=False over a config's nvswap.page_cache true is
    O_DIRECT, True over its false is the cache: the swap file and an
    embedding's row table alike, served or trained."""
    for said, kw in ((True, False), (False, True)):
        for inference in (True, False):
            cfg = {"zero_optimization": {"offload_param": {
                "device": "nvme", "nvme_path": swapdir}},
                "nvswap": {"page_cache": said}}
            m = torch.nn.Sequential(torch.nn.Embedding(4096, 256), *model())
            nvt.offload(m, config=cfg, inference=inference, page_cache=kw,
                        memory=(2 * MIB if inference else None))
            try:
                eng = engine_of(m)
                swap = os.path.join(eng.pswap.dirs[0], "swap.0")
                assert held_direct(swap) is (not kw), (said, inference)
                assert eng.page_cache is kw
                if inference:
                    assert nvt.stats(m)["page_cache"] is kw
                    [table] = eng.rows.values()  # read by rows here
                    assert fd_direct(table.fd) is (not kw)
            finally:
                nvt.restore(m)


def test_auto_is_refused_for_training(swapdir):
    with pytest.raises(ValueError, match="page_cache='auto' decides from "
                       "the bytes a forward streams: inference=True only"):
        nvt.offload(model(), nvme_path=swapdir, page_cache="auto")
    with pytest.raises(TypeError, match="page_cache must be True, False or "
                       "'auto', not 'yes'"):
        nvt.offload(model(), nvme_path=swapdir, inference=True,
                    page_cache="yes")


def test_cgroup_room_reads_v1_and_v2_up_to_the_root(tmp_path):
    """The least room over the process's cgroup and its ancestors, from
    files laid out as the kernel's: v2 (memory.max 'max' is no limit),
    v1 (its page-rounded 2^63 - 1 is none either); None without any."""
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    for d, files in ((v2 / "a", {"memory.max": "max",
                                 "memory.current": "5"}),
                     (v2 / "a" / "b", {"memory.max": str(900 * MIB),
                                       "memory.current": str(300 * MIB)}),
                     (v1 / "x", {"memory.limit_in_bytes": str(500 * MIB),
                                 "memory.usage_in_bytes": str(420 * MIB)}),
                     (v1, {"memory.limit_in_bytes": "9223372036854771712",
                           "memory.usage_in_bytes": "1"})):
        d.mkdir(parents=True, exist_ok=True)
        for k, v in files.items():
            (d / k).write_text(v + "\n")
    pc = tmp_path / "cgroup"
    pc.write_text("0::/a/b\n")
    assert _room.cgroup_room(str(pc), str(v2), str(v1)) == 600 * MIB
    pc.write_text("4:memory:/x\n0::/a/b\n")  # hybrid: both count
    assert _room.cgroup_room(str(pc), str(v2), str(v1)) == 80 * MIB
    pc.write_text("4:memory:/\n0::/a\n")
    assert _room.cgroup_room(str(pc), str(v2), str(v1)) is None


def test_cgroup_room_in_a_real_memory_cgroup():
    """A child in a 512 MiB memory cgroup reads its room: above zero and
    below the limit by what the child already uses."""
    memcgroup = memcgroup_or_skip()
    # _room.py alone (it needs only os): a child without torch stays
    # small in the cgroup, under ASan's preload too
    code = ("import importlib.util as u\n"
            f"s = u.spec_from_file_location('r', {_room.__file__!r})\n"
            "r = u.module_from_spec(s)\ns.loader.exec_module(r)\n"
            "print(r.cgroup_room(), r.available())")
    r, _ = memcgroup.run_in(512 * MIB, [sys.executable, "-c", code],
                            capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    room, avail = (int(x) for x in r.stdout.split())
    assert 0 < room < 512 * MIB
    # read one after the other: the cgroup's usage may move by a few
    # pages between them (it did by 4 KiB in a fresh-ci run)
    assert 0 < avail <= room + (64 << 10)
