# SPDX-License-Identifier: MIT
"""The tools the package carries (nvswap/_bin/): the console scripts
nvswap-io, -report, -tune, -fsck and python -m nvswap exec them."""
import os
import subprocess
import sys

import pytest

import nvswap
from nvswap import _cli

TOOLS = ["nvswap-io", "nvswap-report", "nvswap-tune", "nvswap-fsck"]


def run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_the_package_carries_each_tool():
    assert list(_cli.TOOLS) == TOOLS
    for t in TOOLS:
        p = _cli.tool_path(t)
        assert p == os.path.join(os.path.dirname(nvswap.__file__), "_bin", t)
        assert os.access(p, os.X_OK), p


@pytest.mark.parametrize("tool", TOOLS)
def test_console_script_execs_its_tool(tool, diskdir):
    script = os.path.join(os.path.dirname(sys.executable), tool)
    try:
        with open(script, "rb") as f:
            ours = b"nvswap._cli" in f.read(4096)
    except OSError:
        ours = False
    if not ours:
        pytest.skip(f"no console script {script} (pip writes one; "
                    "PYTHONPATH=build/python has none)")
    got = run([script, "--help"], diskdir)
    want = run([_cli.tool_path(tool), "--help"], diskdir)
    assert (got.returncode, got.stdout, got.stderr) == (0, want.stdout,
                                                        want.stderr)
    assert got.stdout.startswith(f"usage: {tool}")


def test_python_m_nvswap_is_the_report(diskdir):
    r = run([sys.executable, "-m", "nvswap", "--nvme-path", diskdir], diskdir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"nvswap {nvswap.__version__}"
    assert f"nvme_path {diskdir}:" in lines
    assert "verdict: nvswap can run here" in lines
    assert len(lines) <= 40  # one screen
    assert os.listdir(diskdir) == []


@pytest.mark.parametrize("name", ["fsck", "nvswap-fsck"])
def test_python_m_nvswap_runs_a_tool(name, diskdir):
    got = run([sys.executable, "-m", "nvswap", name, "--help"], diskdir)
    want = run([_cli.tool_path("nvswap-fsck"), "--help"], diskdir)
    assert (got.returncode, got.stdout) == (0, want.stdout)


def test_python_m_nvswap_refuses_an_unknown_tool(diskdir):
    r = run([sys.executable, "-m", "nvswap", "fsk"], diskdir)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith(
        "python -m nvswap: no tool 'fsk' (one of io, report, tune, fsck)\n"
        "usage:\n    python -m nvswap [--nvme-path DIR] [--json]")


def test_a_missing_tool_says_so(monkeypatch, capsys, diskdir):
    monkeypatch.setattr(_cli, "BIN", diskdir)
    assert _cli.run("nvswap-io", ["--help"]) == 127
    assert capsys.readouterr().err == (
        f"nvswap-io: cannot run {diskdir}/nvswap-io: No such file or "
        "directory (this nvswap was built without its tools: meson "
        "-Dtools=false)\n")
    with pytest.raises(ValueError, match="unknown tool 'nvswap-x'"):
        _cli.tool_path("nvswap-x")
