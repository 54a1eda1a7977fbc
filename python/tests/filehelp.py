# SPDX-License-Identifier: MIT
"""Small helpers the tests share (importable: this directory is on
sys.path under pytest's default import mode)."""
import os

import pytest

import nvswap


def rand(n):
    return os.urandom(n)


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def pattern(n, seed=1):
    """n bytes that differ from any shifted copy of themselves."""
    return bytes((i * 131 + seed * 7 + (i >> 8)) & 0xFF for i in range(n))


def raises_errno(err, fn, *args, **kw):
    """fn(*args, **kw) raises nvswap.Error with errno err; the error."""
    with pytest.raises(nvswap.Error) as ei:
        fn(*args, **kw)
    assert ei.value.errno == err, ei.value
    return ei.value


def child_env():
    """os.environ with this nvswap package first on PYTHONPATH, for a
    child interpreter that must import the same build."""
    env = dict(os.environ)
    pkg = os.path.dirname(os.path.dirname(nvswap.__file__))
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env
