# SPDX-License-Identifier: MIT
"""The extras README names (pip install .[torch], .[hf], .[deepspeed])
are ranges this suite runs: the installed package's metadata lists them,
every version installed here falls in them (PyPI's venv has them all;
Debian's has torch and numpy), and the pins the test venv is made with
(scripts/python-venv.sh) do too."""
import importlib.metadata as md
import os
import pathlib
import re
import sys

import pytest

packaging = pytest.importorskip(
    "packaging.requirements", reason="the packaging module is not "
    "installed for this interpreter")
from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
USER_EXTRAS = ("torch", "hf", "deepspeed")


def extras():
    """{extra: [Requirement]} from the installed nvswap's metadata."""
    try:
        reqs = md.requires("nvswap") or []
    except md.PackageNotFoundError:
        pytest.skip("nvswap is not pip-installed here (make test installs "
                    "it into each venv): no metadata to check")
    out = {}
    for r in map(Requirement, reqs):
        m = re.search(r'extra\s*==\s*"([^"]+)"', str(r.marker or ""))
        if m:
            out.setdefault(m.group(1), []).append(r)
    return out


def installed(name):
    try:
        return Version(md.version(name))
    except md.PackageNotFoundError:
        return None


def test_the_extras_readme_names_are_in_the_metadata():
    got = extras()
    assert set(USER_EXTRAS) <= set(got), sorted(got)
    names = {k: {r.name for r in v} for k, v in got.items()}
    assert {"torch", "numpy"} <= names["torch"]
    assert {"torch", "numpy", "transformers", "accelerate",
            "safetensors"} <= names["hf"]
    assert {"torch", "numpy", "deepspeed"} <= names["deepspeed"]


def test_what_is_installed_falls_in_each_range():
    # make test says which venv this is; by hand, the interpreter does
    # (Debian's, under /usr, has no clients)
    mode = os.environ.get("NVS_VENV_MODE")
    pypi = mode == "pypi" if mode else sys.base_prefix != "/usr"
    checked = []
    for extra in (USER_EXTRAS if pypi else ("torch",)):
        for r in extras()[extra]:
            v = installed(r.name)
            assert v is not None, f"[{extra}]: {r.name} is not installed"
            # a local build tag (torch's +cpu) is not part of the range
            assert Version(v.public) in r.specifier, \
                f"[{extra}]: {r.name} {v} is outside {r}"
            checked.append(r.name)
    assert "torch" in checked and "numpy" in checked


def test_the_test_venvs_pins_fall_in_the_ranges():
    text = (ROOT / "scripts" / "python-venv.sh").read_text()
    pins = dict(re.findall(r"\b([a-z][a-z0-9_-]*)==([0-9][0-9.]*)", text))
    assert {"torch", "deepspeed", "transformers", "accelerate"} <= set(pins)
    ranges = {r.name: r for v in extras().values() for r in v}
    for name, version in pins.items():
        if name in ranges:
            assert Version(version) in ranges[name].specifier, \
                f"scripts/python-venv.sh pins {name}=={version}, outside " \
                f"{ranges[name]}"
