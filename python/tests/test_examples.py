# SPDX-License-Identifier: MIT
"""The examples in examples/python run, say they succeeded, and leave
the directory as they found it (what they made of a missing one
removed)."""
import os
import pathlib
import re
import select
import shutil
import subprocess
import sys
import time

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def run(name, *args, cwd=None):
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args],
                          capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_deepnvme_rw_round_trips(diskdir):
    pytest.importorskip("torch")
    r = run("deepnvme_rw.py", diskdir, "64")
    assert r.returncode == 0, r.stderr
    assert "bit-exact" in r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == []


def test_deepnvme_rw_default_dir_is_made_and_removed(diskdir):
    pytest.importorskip("torch")
    r = run("deepnvme_rw.py", cwd=diskdir)  # ./nvme_swap, 256 MiB
    assert r.returncode == 0, r.stderr
    assert "bit-exact" in r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == []


@pytest.mark.parametrize("where", ["given", "default"])
def test_swapper_example_matches_memory(diskdir, where):
    pytest.importorskip("torch")
    r = (run("swapper.py", diskdir) if where == "given"
         else run("swapper.py", cwd=diskdir))  # ./nvme_swap, made
    assert r.returncode == 0, r.stderr
    assert "bit for bit" in r.stdout
    # the swapper removed its files and the directories it made on close
    assert list(pathlib.Path(diskdir).iterdir()) == []


@pytest.mark.parametrize("mode", [[], ["--step-in-backward"]])
def test_train_offloaded_example_is_bit_identical(diskdir, mode):
    pytest.importorskip("torch")
    r = run("train_offloaded.py", "--dir", diskdir, "--steps", "2",
            "--width", "64", "--layers", "2", "--context", "16", *mode)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith("verdict: after 2 steps") and last.endswith(
        "bit for bit: equal"), r.stdout
    # restore() at the end removed the swap files
    assert sorted(p.name for p in pathlib.Path(diskdir).rglob("*")
                  if p.is_file()) == []


def test_train_offloaded_into_a_pipe_shows_each_step_as_it_ends(diskdir):
    # | tee log: stdout is a pipe, and each line comes as it is printed,
    # not in blocks of 8 KiB (about 90 steps' lines) or at exit
    pytest.importorskip("torch")
    p = subprocess.Popen([sys.executable, str(EXAMPLES / "train_offloaded.py"),
                          "--dir", diskdir, "--steps", "3000", "--width",
                          "64", "--layers", "2", "--context", "16"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env={k: v for k, v in os.environ.items()
                              if k != "PYTHONUNBUFFERED"})
    try:
        got, deadline = b"", time.monotonic() + 120
        while not any(ln.split()[:1] == [b"1"] for ln in got.splitlines()):
            left = deadline - time.monotonic()
            assert left > 0 and select.select([p.stdout], [], [], left)[0], \
                f"no step 1 in 120 s: {got}"
            chunk = os.read(p.stdout.fileno(), 65536)
            assert chunk, f"exit {p.wait()} before step 1 was shown: {got}"
            got += chunk
        # a block-buffered pipe would hand over 8 KiB (about 90 steps)
        assert len(got) < 8192 and p.poll() is None, \
            f"step 1 came in a block of {len(got)} bytes"
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


@pytest.mark.parametrize("mode", [[], ["--step-in-backward"]])
def test_train_offloaded_stops_and_resumes_bit_identical(diskdir, mode):
    pytest.importorskip("torch")
    size = ["--dir", diskdir, "--steps", "4", "--width", "64", "--layers",
            "2", "--context", "16", *mode]
    r = run("train_offloaded.py", *size, "--stop-after", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "saved 'nvswap.torch:1:step 2' as generations (1, 1)" in r.stdout
    assert "verdict: after 2 steps" in r.stdout and "equal" in r.stdout
    assert r.stdout.rstrip().endswith("run again with --resume to finish")
    sets = sorted(str(p.relative_to(diskdir)) for p in
                  pathlib.Path(diskdir).rglob("manifest.*"))
    assert sets == ["nvswap/optimizer/rank0/manifest.00000000000000000001",
                    "nvswap/param/rank0/manifest.00000000000000000001"]

    r = run("train_offloaded.py", *size, "--stop-after", "2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "holds a saved run (step 2)" in r.stdout
    # a run without persistence (make demo-python) says what to do
    r = run("train_offloaded.py", *size)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == (
        f"train_offloaded: {diskdir} holds the persistent swap sets of an "
        "interrupted run: finish it with --resume (and the options it ran "
        f"with), or remove them: rm -r {diskdir}/nvswap/param/rank0 "
        f"{diskdir}/nvswap/optimizer/rank0"), r.stdout

    r = run("train_offloaded.py", *size, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed after step 2 ('step 2', generations (1, 1))" in r.stdout
    steps = [ln.split()[0] for ln in r.stdout.splitlines()
             if ln[:4].strip().isdigit()]
    assert steps == ["2", "3"], r.stdout
    last = r.stdout.splitlines()[-2]
    assert last.startswith("verdict: after 4 steps") and last.endswith(
        "bit for bit: equal"), r.stdout
    # complete: its sets are removed (--keep would keep them), and the
    # directory is as the first run found it
    assert r.stdout.splitlines()[-1].startswith(
        "removed the persistent swap sets under "), r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == []


def test_train_offloaded_over_one_set_without_checkpoints_starts_afresh(
        diskdir):
    """A kill in the first checkpoint can leave one set committed and the
    other not: nothing to resume, and a new run starts afresh over it
    (it once failed: 'none in common, so they cannot resume together')."""
    pytest.importorskip("torch")
    size = ["--dir", diskdir, "--steps", "2", "--width", "64", "--layers",
            "2", "--context", "16", "--checkpoint-every", "1"]
    r = run("train_offloaded.py", *size, "--stop-after", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    param = pathlib.Path(diskdir) / "nvswap" / "param" / "rank0"
    opt = pathlib.Path(diskdir) / "nvswap" / "optimizer" / "rank0"
    # A parameter set lost (moved) beside saved optimizer steps is no
    # first checkpoint cut short: refused, the steps kept.
    moved = pathlib.Path(diskdir) / "moved"
    param.rename(moved)
    r = run("train_offloaded.py", *size)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "none in common" in r.stdout, r.stdout
    assert len(list(opt.glob("manifest.*"))) == 2
    shutil.rmtree(param, ignore_errors=True)
    moved.rename(param)
    # The first checkpoint's parameter commit alone: no step saved.
    max(param.glob("manifest.*")).unlink()
    for m in opt.glob("manifest.*"):
        m.unlink()
    r = run("train_offloaded.py", *size, "--resume")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no persistent swap set to resume in" in r.stdout, r.stdout
    r = run("train_offloaded.py", *size)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step 0' as generations" in r.stdout, r.stdout
    assert "bit for bit: equal" in r.stdout, r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == [], r.stdout


def lose_newest_optimizer_manifest(diskdir):
    """What a kill between the parameters' commit and the optimizer's
    leaves: the optimizer set without its newest manifest."""
    opt = pathlib.Path(diskdir) / "nvswap" / "optimizer" / "rank0"
    max(opt.glob("manifest.*")).unlink()


def test_train_offloaded_killed_between_the_commits_twice_resumes(diskdir):
    pytest.importorskip("torch")
    size = ["--dir", diskdir, "--steps", "4", "--width", "64", "--layers",
            "2", "--context", "16", "--checkpoint-every", "1"]
    r = run("train_offloaded.py", *size, "--stop-after", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    lose_newest_optimizer_manifest(diskdir)
    r = run("train_offloaded.py", *size, "--stop-after", "2", "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    # step 1 (checkpoint 2) both hold; the parameters commit it again
    assert "resumed after step 1 ('step 1', generations (4, 2))" in \
        r.stdout, r.stdout
    assert "bit for bit: equal" in r.stdout, r.stdout
    # the same kill again: the parameters still hold checkpoint 2
    lose_newest_optimizer_manifest(diskdir)
    r = run("train_offloaded.py", *size, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed after step 1 ('step 1', generations (6, 2))" in \
        r.stdout, r.stdout
    assert "bit for bit: equal" in r.stdout, r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == [], r.stdout


def test_train_offloaded_resume_needs_a_saved_run(diskdir):
    pytest.importorskip("torch")
    r = run("train_offloaded.py", "--dir", diskdir, "--steps", "2",
            "--width", "64", "--layers", "2", "--context", "16", "--resume")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no persistent swap set to resume in" in r.stdout, r.stdout


def torchrun(nproc, *args):
    """examples/python/ddp_offloaded.py under this interpreter's
    torch.distributed.run, on a free port of 127.0.0.1."""
    import socket

    import torch.distributed as dist
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("this torch has no torch.distributed with gloo")
    from torch.distributed.elastic.multiprocessing.api import Std
    # torch < 2's Std.from_str("0") finds no member on Python >= 3.11 (a
    # Flag's iteration skips NONE) and torch.distributed.run fails in
    # to_map; redirecting rank 0's stdout with a copy to the console
    # (what --tee does) avoids the default "0" of both options.
    dodge = ([] if Std.from_str("0") is not None
             else ["--redirects", "0:1", "--tee", "0:1"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
         "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
         "--master_port", str(port), *dodge,
         str(EXAMPLES / "ddp_offloaded.py"), *args],
        capture_output=True, text=True, timeout=600)


def verdict(out):
    """The verdict line (after any "[default0]:" of --tee)."""
    lines = [ln[ln.index("verdict: "):] for ln in out.splitlines()
             if "verdict: " in ln]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("nproc,mode", [
    (4, []), (2, ["--step-in-backward"]), (2, ["--activations", "0"])])
def test_ddp_offloaded_ranks_equal_the_reference(diskdir, nproc, mode):
    """Every rank equals the single-process reference, also with each
    rank's saved activations in a store of its own (every one: 0 bytes
    and up), all of them read back."""
    pytest.importorskip("torch")
    r = torchrun(nproc, "--dir", diskdir, "--steps", "2", "--width", "64",
                 "--layers", "2", "--context", "16", *mode)
    assert r.returncode == 0, r.stdout + r.stderr
    if "--activations" in mode:
        m = re.search(r"activations: (\d+) tensors, (\d+) bytes to NVMe on "
                      r"rank 0, 0 left; (\d+) read back", r.stdout)
        assert m and int(m.group(1)) > 0, r.stdout
        assert int(m.group(3)) >= int(m.group(1)), r.stdout
    assert verdict(r.stdout) == (
        f"verdict: after 2 steps on {nproc} ranks every rank's weights and "
        "AdamW state are equal to the single-process reference, bit for "
        "bit: equal")
    # restore() at the end removed every rank's swap files, and rank 0
    # the nvswap/ level the ranks shared
    assert list(pathlib.Path(diskdir).iterdir()) == []


def test_ddp_offloaded_removes_the_dir_it_made(diskdir):
    pytest.importorskip("torch")
    r = torchrun(2, "--dir", os.path.join(diskdir, "run", "swap"),
                 "--steps", "1", "--width", "64", "--layers", "2",
                 "--context", "16")
    assert r.returncode == 0, r.stdout + r.stderr
    assert verdict(r.stdout).endswith("bit for bit: equal")
    assert list(pathlib.Path(diskdir).iterdir()) == []


def test_ddp_offloaded_without_averaging_says_different(diskdir):
    pytest.importorskip("torch")
    r = torchrun(2, "--dir", diskdir, "--steps", "1", "--width", "64",
                 "--layers", "2", "--context", "16", "--no-average")
    assert r.returncode != 0, r.stdout + r.stderr
    assert verdict(r.stdout) == (
        "verdict: after 1 steps on 2 ranks the weights of ranks [1] and the "
        "AdamW state of ranks [1] differ from the single-process reference:"
        " DIFFERENT")


@pytest.mark.parametrize("mode", [[], ["--bf16"]])
def test_hf_trainer_example_is_bit_for_bit(diskdir, mode):
    """make demo-hf: safetensors to NVMe, the Trainer with clipping and
    checkpointing, the verdict last; nothing left behind."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers", reason="transformers is not "
                        "installed for this interpreter (Debian packages "
                        "no transformers)")
    r = run("hf_trainer.py", "--dir", os.path.join(diskdir, "nvme_swap"),
            "--steps", "3", "--layers", "2", "--hidden", "128", "--vocab",
            "512", "--context", "32", *mode)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith("verdict: the offloaded Trainer's losses") and \
        last.endswith("equal the in-memory run's bit for bit"), r.stdout
    steps = [x for x in r.stdout.splitlines() if x.startswith("step ")]
    assert len(steps) == 3 and all("grad_norm" in x for x in steps)
    assert list(pathlib.Path(diskdir).iterdir()) == []


def test_train_offloaded_keeps_a_default_dir_it_did_not_make(diskdir):
    """A complete persistent run removes its sets, and ./nvme_swap only
    when it made it (it once removed the user's empty one)."""
    pytest.importorskip("torch")
    (pathlib.Path(diskdir) / "nvme_swap").mkdir()
    r = run("train_offloaded.py", "--steps", "2", "--width", "64",
            "--layers", "2", "--context", "16", "--checkpoint-every", "1",
            cwd=diskdir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "removed the persistent swap sets" in r.stdout, r.stdout
    assert [p.name for p in pathlib.Path(diskdir).rglob("*")] == [
        "nvme_swap"]


@pytest.mark.parametrize("cgroup", ["64M", "0"])
def test_generate_offloaded_example(diskdir, cgroup):
    """make demo-infer, small: the tokens equal the in-memory run's, the
    offloaded run in a memory cgroup where one can be made (its peak
    printed) and otherwise run without one, saying why; nothing left
    behind. 64M is below what the child interpreter needs: the cgroup is
    real when the run is killed for it (the next case runs without)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers", reason="transformers is not "
                        "installed for this interpreter (Debian packages "
                        "no transformers)")
    sys.path.insert(0, str(EXAMPLES))
    try:
        import memcgroup
    finally:
        sys.path.remove(str(EXAMPLES))
    why = memcgroup.why_not()
    args = ["--dir", os.path.join(diskdir, "nvme_swap"), "--hidden", "64",
            "--layers", "2", "--inter", "128", "--vocab", "256",
            "--new-tokens", "8", "--memory", "1M", "--cgroup"]
    if cgroup == "64M":
        if why is not None:
            pytest.skip(f"no memory cgroup here: {why}")
        r = run("generate_offloaded.py", *args, "64M")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "offloaded run in a 0.06 GiB memory cgroup" in r.stdout
        assert "failed (exit -9: killed, by the cgroup's OOM killer? " \
            "raise --cgroup)" in r.stdout, r.stdout
        r = run("generate_offloaded.py", *args, "2G")
        assert "offloaded in a 2.00 GiB memory cgroup" in r.stdout, \
            r.stdout
        assert ", cgroup peak " in r.stdout, r.stdout
    else:
        r = run("generate_offloaded.py", *args, "0")
        assert "offloaded without a memory cgroup (--cgroup 0)" in \
            r.stdout, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == \
        "tokens: equal to the in-memory run (8 of 8)", r.stdout
    assert "the compute-bound limit" in r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == []


# What each example needs installed, named where a reader of the file
# looks first (its docstring), with the extra README's table lists.
NEEDS = {"deepnvme_rw.py": "torch", "swapper.py": "torch",
         "train_offloaded.py": "torch", "ddp_offloaded.py": "torch",
         "hf_trainer.py": "hf", "generate_offloaded.py": "hf"}


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_each_example_names_its_extra_and_its_command(name):
    import ast
    text = (EXAMPLES / name).read_text()
    doc = ast.get_docstring(ast.parse(text))
    assert f"pip install '.[{NEEDS[name]}]'" in doc, name
    # the command it gives runs the file with the interpreter alone: no
    # PYTHONPATH into a build tree, which has no transformers or torch
    assert "PYTHONPATH" not in doc, name
    assert f"examples/python/{name}" in doc, name
    readme = (EXAMPLES.parents[1] / "README.md").read_text()
    assert f"`.[{NEEDS[name]}]`" in readme


def test_every_example_is_listed():
    have = {p.name for p in EXAMPLES.glob("*.py")} - {"memcgroup.py"}
    assert have == set(NEEDS)
