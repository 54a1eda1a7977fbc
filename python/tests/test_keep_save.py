# SPDX-License-Identifier: MIT
"""nvswap.save under the red-team round's cases (issue 34, "keep what
works"): torch.save's bytes for every option, the previous file intact
and loadable after a full disk or a kill -9 at any point, and a symlink
at the target replaced, its target untouched."""
import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import nvswap
from filehelp import child_env, crash_rng

torch = pytest.importorskip("torch")
MiB = 1 << 20


def dtypes():
    names = ["uint8", "int8", "int16", "int32", "int64", "float16",
             "bfloat16", "float32", "float64", "complex64", "complex128",
             "bool", "uint16", "uint32", "float8_e4m3fn", "float8_e5m2"]
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


def obj():
    g = torch.Generator().manual_seed(3)
    raw = torch.randint(0, 256, (3 * MiB,), dtype=torch.uint8, generator=g)
    d = {}
    for i, dt in enumerate(dtypes()):
        size = torch.empty(0, dtype=dt).element_size()
        piece = raw[i * 4096:(i + 1) * 4096 + size * 5].clone()
        d[str(dt)] = piece.view(dt)
    base = torch.randn(64, 32, generator=g)
    d["shared"] = [base, base, base[3:9], base.t(), base[:, ::2],
                   base.view(32, 64), base.view(-1)[100:]]
    big = torch.randn(MiB, generator=g)  # past the 1 MiB deferral cut
    d["big"], d["big_tail"] = big, big[-1000:]
    d["meta"] = {"step": 7, "name": "adamw", "lrs": (1e-3, 2e-4)}
    return d


@pytest.mark.parametrize("opts", [
    {},
    {"pickle_protocol": 4},
    {"buffer_size": 4096, "buffer_count": 2},
    {"buffer_size": "64K", "buffer_count": 3, "defer": False},
    {"fsync": False, "size_hint": 0, "background": False},
    {"background": False, "defer": False, "size_hint": 64 * MiB},
])
def test_save_writes_torch_saves_bytes_for_every_option(diskdir, opts):
    o = obj()
    ref = io.BytesIO()
    torch.save(o, ref, pickle_protocol=opts.get("pickle_protocol", 2))
    path = os.path.join(diskdir, "c.pt")
    assert nvswap.save(o, path, **opts).wait() is True
    with open(path, "rb") as f:
        assert f.read() == ref.getvalue()
    # torch 2.6+'s weights-only unpickler refuses protocol 4's opcodes,
    # in torch.save's own files too
    kw = {"weights_only": False} if "pickle_protocol" in opts else {}
    back = torch.load(path, **kw)
    for k, v in o.items():
        if isinstance(v, torch.Tensor):
            assert back[k].dtype == v.dtype and back[k].shape == v.shape
            assert torch.equal(back[k].view(torch.uint8),
                               v.contiguous().view(torch.uint8)), k
    sh = back["shared"]
    assert sh[0] is sh[1]  # one object, as saved
    assert sh[2].data_ptr() == sh[0].data_ptr() + 3 * 32 * 4
    assert sh[3].stride() == (1, 32) and torch.equal(sh[3], o["shared"][3])
    assert torch.equal(sh[6], o["shared"][6])
    assert back["meta"] == o["meta"]


def test_a_symlink_at_the_target_is_replaced_its_target_untouched(diskdir):
    victim = os.path.join(diskdir, "victim")
    with open(victim, "wb") as f:
        f.write(b"victim")
    link, dangling = (os.path.join(diskdir, n) for n in ("c.pt", "d.pt"))
    os.symlink(victim, link)
    os.symlink(os.path.join(diskdir, "nowhere"), dangling)
    for path in (link, dangling):
        nvswap.save({"a": torch.arange(5)}, path).wait()
        assert not os.path.islink(path) and os.path.isfile(path)
        assert torch.equal(torch.load(path)["a"], torch.arange(5))
    with open(victim, "rb") as f:
        assert f.read() == b"victim"
    assert sorted(os.listdir(diskdir)) == ["c.pt", "d.pt", "victim"]


def test_a_full_disk_leaves_the_previous_checkpoint_loadable(small_tmpfs):
    path = str(small_tmpfs / "c.pt")
    old = {"k": torch.tensor(0), "w": torch.full((1000,), 0.5)}
    torch.save(old, path)
    with open(path, "rb") as f:
        before = f.read()
    new = {"k": torch.tensor(1), "w": torch.ones(MiB)}  # 4 MiB: no room
    for kw in ({}, {"size_hint": 0}, {"size_hint": 0, "defer": False}):
        try:
            h = nvswap.save(new, path, buffer_size="64K", buffer_count=2,
                            **kw)
            h.wait()
        except nvswap.Error as e:
            assert e.errno == 28, e  # ENOSPC, from save() or wait()
        else:
            pytest.fail(f"4 MiB saved on a 2 MiB disk with {kw}")
        with open(path, "rb") as f:
            assert f.read() == before
        back = torch.load(path)
        assert int(back["k"]) == 0 and torch.equal(back["w"], old["w"])
        assert os.listdir(small_tmpfs) == ["c.pt"]


SAVER = """
    import sys
    import torch
    import nvswap
    path = sys.argv[1]
    for k in range(1, 100000):
        sd = {"k": torch.tensor(k), "w": torch.full((2 << 20,), float(k)),
              "small": torch.arange(k, k + 100)}
        h = nvswap.save(sd, path, buffer_size="256K", buffer_count=2)
        print("start", k, flush=True)
        h.wait()
        print("done", k, flush=True)
"""


@pytest.mark.parametrize("round_", range(3))
def test_a_kill_9_anywhere_leaves_a_whole_loadable_file(diskdir, round_):
    seed, rng = crash_rng(round_)
    path = os.path.join(diskdir, "c.pt")
    torch.save({"k": torch.tensor(0), "w": torch.zeros(2 << 20),
                "small": torch.arange(0, 100)}, path)
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(SAVER),
                          path], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=child_env())
    started = done = 0
    try:
        line = p.stdout.readline()
        assert line.startswith("start "), (line, p.stderr.read())
        started = 1
        time.sleep(rng.uniform(0, 0.6))
        p.kill()
    finally:
        rc = p.wait(timeout=60)
        for line in p.stdout.read().splitlines():
            what, k = line.split()
            if what == "start":
                started = int(k)
            else:
                done = int(k)
        p.stdout.close()
        p.stderr.close()
    assert rc == -signal.SIGKILL, (seed, rc)
    back = torch.load(path)
    k = int(back["k"])
    print(f"killed with save {started} started, {done} done; file has {k}")
    assert done <= k <= started, (seed, done, k, started)
    assert torch.equal(back["w"], torch.full((2 << 20,), float(k)))
    assert torch.equal(back["small"], torch.arange(k, k + 100))
    others = [n for n in os.listdir(diskdir) if n != "c.pt"]
    assert all(n.startswith("c.pt.tmp.") for n in others), others
