# SPDX-License-Identifier: MIT
"""The examples in examples/python run and say they succeeded."""
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def run(name, *args):
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args],
                          capture_output=True, text=True, timeout=300)


def test_deepnvme_rw_round_trips(diskdir):
    pytest.importorskip("torch")
    r = run("deepnvme_rw.py", diskdir, "64")
    assert r.returncode == 0, r.stderr
    assert "bit-exact" in r.stdout
    assert list(pathlib.Path(diskdir).iterdir()) == []


def test_swapper_example_matches_memory(diskdir):
    pytest.importorskip("torch")
    r = run("swapper.py", diskdir)
    assert r.returncode == 0, r.stderr
    assert "bit for bit" in r.stdout
    # the swapper removed its files and directories on close
    assert sorted(p.name for p in pathlib.Path(diskdir).rglob("*")
                  if p.is_file()) == []


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

    r = run("train_offloaded.py", *size, "--resume")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resumed after step 2 ('step 2', generations (1, 1))" in r.stdout
    steps = [ln.split()[0] for ln in r.stdout.splitlines()
             if ln[:4].strip().isdigit()]
    assert steps == ["2", "3"], r.stdout
    last = r.stdout.splitlines()[-1]
    assert last.startswith("verdict: after 4 steps") and last.endswith(
        "bit for bit: equal"), r.stdout


def test_train_offloaded_resume_needs_a_saved_run(diskdir):
    pytest.importorskip("torch")
    r = run("train_offloaded.py", "--dir", diskdir, "--steps", "2",
            "--width", "64", "--layers", "2", "--context", "16", "--resume")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no persistent swap set to resume in" in r.stdout, r.stdout
