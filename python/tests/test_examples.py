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
