# SPDX-License-Identifier: MIT
"""What a new user meets first (issue 33): a missing nvme_path is made
(0700) or refused at once naming the level at fault, for the Swapper and
nvt.offload (keywords or a config in a fresh directory); nvt.offload
without buffer_size sizes its pool from the model, and a bad pool
keyword is named; a scratch offload leaves the directory as it found it
when the process exits without restore(), also by an exception."""
import errno
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest

import nvswap

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def tree(d):
    """Every path under d (relative), sorted."""
    return sorted(str(p.relative_to(d)) for p in pathlib.Path(d).rglob("*"))


def test_swapper_makes_missing_levels_0700_and_removes_them(diskdir):
    os.chmod(diskdir, 0o755)
    path = os.path.join(diskdir, "a", "b")
    with nvswap.Swapper(nvme_path=path, buffer_size=1 << 16,
                        buffer_count=2) as s:
        s.register(1, bytes(range(256)) * 16)
        assert mode(os.path.join(diskdir, "a")) == 0o700
        assert mode(path) == 0o700
        assert s.dirs == [os.path.join(path, "nvswap", "rank0")]
        assert os.path.exists(os.path.join(s.dirs[0], "swap.0"))
    assert os.listdir(diskdir) == []
    assert mode(diskdir) == 0o755


def test_swapper_refuses_a_file_in_the_way_naming_it(diskdir):
    f = os.path.join(diskdir, "f")
    with open(f, "wb"):
        pass
    path = os.path.join(f, "swap")
    with pytest.raises(nvswap.Error) as ei:
        nvswap.Swapper(nvme_path=path, buffer_size=1 << 16, buffer_count=2)
    assert ei.value.errno == errno.ENOTDIR
    assert isinstance(ei.value, NotADirectoryError)
    assert ei.value.strerror == (f"nvswap: nvme_path {path}: {f} is not a "
                                 "directory")
    assert os.listdir(diskdir) == ["f"]


def test_swapper_names_a_level_it_may_not_make(diskdir):
    if os.geteuid() != 0:
        pytest.skip("needs root to run the case as user nobody")
    os.chmod(diskdir, 0o755)
    ro = os.path.join(diskdir, "ro")
    os.mkdir(ro, 0o755)
    code = textwrap.dedent(f"""
        import os, nvswap
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        try:
            nvswap.Swapper(nvme_path={os.path.join(ro, 'a', 'b')!r},
                           buffer_size=1 << 16, buffer_count=2,
                           pin_memory=False)
        except nvswap.Error as e:
            print(e.errno, e.strerror)
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    path = os.path.join(ro, "a", "b")
    assert r.stdout.strip() == (
        f"{errno.EACCES} nvswap: nvme_path {path}: cannot create "
        f"{os.path.join(ro, 'a')}: Permission denied")
    assert os.listdir(ro) == []


def tiny():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 8))


def test_offload_with_the_sample_config_in_a_fresh_directory(diskdir,
                                                            monkeypatch):
    torch = pytest.importorskip("torch")
    import nvswap.torch as nvt
    shutil.copy(EXAMPLES / "ds_config.json", diskdir)
    monkeypatch.chdir(diskdir)
    model = tiny()
    x = torch.randn(4, 64)
    want = model(x)
    model = nvt.offload(model, config="ds_config.json")
    assert mode("nvme_swap") == 0o700  # the config's nvme_path, made
    assert torch.equal(model(x), want)
    nvt.restore(model)
    assert tree(diskdir) == ["ds_config.json"]


def test_offload_without_buffer_size_sizes_the_pool_from_the_model(diskdir):
    torch = pytest.importorskip("torch")
    import nvswap.torch as nvt
    model = tiny()
    x = torch.randn(4, 64)
    want = model(x)
    model = nvt.offload(model, nvme_path=diskdir)
    # the largest module: Linear(64, 64), 16 KiB weight + bias in 4 KiB
    # units; every module is one layer
    st = nvt.stats(model)
    assert st["param"]["buffer_size"] == 16384 + 4096
    assert st["param"]["buffer_count"] == 4
    assert torch.equal(model(x), want)
    nvt.restore(model)
    # bf16: half the bytes
    model = nvt.offload(tiny(), nvme_path=diskdir, dtype=torch.bfloat16)
    assert nvt.stats(model)["param"]["buffer_size"] == 8192 + 4096
    nvt.restore(model)


@pytest.mark.parametrize("kw,exc,text", [
    ({"buffer_size": 0}, ValueError, "buffer_size=0: must be a byte count "
     "> 0 (an int, or a str such as '64M')"),
    ({"buffer_size": "0K"}, ValueError, "buffer_size='0K': must be"),
    ({"buffer_size": "lots"}, ValueError, "buffer_size='lots': must be"),
    ({"buffer_size": 1.5}, TypeError, "buffer_size must be a byte count "
     "> 0 (an int, or a str such as '64M'), not float"),
    ({"buffer_count": 0}, ValueError, "buffer_count=0: must be a whole "
     "number > 0"),
    ({"buffer_count": True}, TypeError, "buffer_count must be a whole "
     "number > 0, not bool"),
    ({"optimizer_buffer_size": -4096}, ValueError,
     "optimizer_buffer_size=-4096: must be"),
    ({"optimizer_buffer_count": 0}, ValueError,
     "optimizer_buffer_count=0: must be"),
])
def test_a_bad_pool_keyword_is_named(diskdir, kw, exc, text):
    torch = pytest.importorskip("torch")
    import nvswap.torch as nvt
    model = tiny()
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(exc) as ei:
        nvt.offload(model, nvme_path=os.path.join(diskdir, "swap"), **kw)
    assert str(ei.value).startswith("nvswap.torch.offload: " + text), \
        str(ei.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert os.listdir(diskdir) == []  # nothing made


def test_a_size_string_is_taken(diskdir):
    pytest.importorskip("torch")
    import nvswap.torch as nvt
    model = nvt.offload(tiny(), nvme_path=diskdir, buffer_size="64KiB",
                        optimizer_buffer_size="1M", buffer_count=3)
    st = nvt.stats(model)
    assert (st["param"]["buffer_size"], st["param"]["buffer_count"]) == \
        (64 << 10, 3)
    assert st["optimizer"]["buffer_size"] == 1 << 20
    nvt.restore(model)


SCRIPT = textwrap.dedent("""
    import sys, torch, nvswap.torch as nvt
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64),
                                torch.nn.Linear(64, 8))
    model = nvt.offload(model, nvme_path=sys.argv[1])
    opt = nvt.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    opt.zero_grad()
    print("trained", flush=True)
    if sys.argv[2] == "raise":
        raise RuntimeError("the training failed")
    if sys.argv[2] == "exit":
        sys.exit(3)
    """)


@pytest.mark.parametrize("how,rc", [("end", 0), ("raise", 1), ("exit", 3)])
@pytest.mark.parametrize("made", [True, False])
def test_a_scratch_offload_leaves_nothing_when_the_process_exits(
        diskdir, how, rc, made):
    """No restore(): the swap files, lock and directories go with the
    process (atexit), whether it ends, raises or calls sys.exit."""
    pytest.importorskip("torch")
    path = os.path.join(diskdir, "run", "swap")
    if not made:
        os.makedirs(path)
    before = tree(diskdir)
    r = subprocess.run([sys.executable, "-c", SCRIPT, path, how],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == rc, r.stdout + r.stderr
    assert r.stdout == "trained\n"
    if how == "raise":
        assert r.stderr.rstrip().endswith("RuntimeError: the training "
                                          "failed")
    assert tree(diskdir) == before


def test_a_killed_process_leaves_files_the_next_offload_removes(diskdir):
    """SIGKILL cannot be handled: its files stay, and the next offload on
    the path removes them (their lock is free)."""
    torch = pytest.importorskip("torch")
    import nvswap.torch as nvt
    path = os.path.join(diskdir, "swap")
    code = SCRIPT + "\nimport os, signal\nos.kill(os.getpid(), 9)\n"
    r = subprocess.run([sys.executable, "-c", code, path, "kill"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == -9, r.stdout + r.stderr
    left = tree(diskdir)
    assert "swap/nvswap/param/rank0/swap.0" in left
    model = nvt.offload(torch.nn.Linear(4, 4), nvme_path=path)
    nvt.restore(model)
    # the files are reclaimed and the dead run's nvswap/ level goes with
    # them (adopted with its lock); the level of nvme_path the killed
    # process made, not nvswap's own, stays
    assert tree(diskdir) == ["swap"]


def test_the_persistent_set_of_a_process_that_exits_stays(diskdir):
    pytest.importorskip("torch")
    path = os.path.join(diskdir, "swap")
    code = SCRIPT.replace("nvme_path=sys.argv[1]",
                          "nvme_path=sys.argv[1], persist='persistent'")
    r = subprocess.run([sys.executable, "-c", code, path, "end"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    left = tree(diskdir)
    assert "swap/nvswap/param/rank0/set.data" in left, left
