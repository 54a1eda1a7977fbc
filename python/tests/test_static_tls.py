# SPDX-License-Identifier: MIT
"""nvswap loads late: after twenty other extension modules (and torch),
in a fresh interpreter without any GLIBC_TUNABLES. A shared object marked
STATIC_TLS can be dlopen()ed only while glibc's small static TLS surplus
lasts, which the modules loaded before it use up ("cannot allocate memory
in static TLS block").

Nothing here imports nvswap into the test process itself, so that a
build marked STATIC_TLS fails these tests with the loader's own message
instead of failing to collect them."""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

EXTENSIONS = [
    "_decimal", "_ssl", "_sqlite3", "_ctypes", "zlib", "array", "_json",
    "_pickle", "_datetime", "_bz2", "_lzma", "_hashlib", "_socket", "select",
    "mmap", "_csv", "_struct", "math", "_random", "_elementtree", "_asyncio",
    "_multibytecodec", "_codecs_jp", "_queue", "_uuid", "_zoneinfo",
    "_posixshmem", "_multiprocessing", "resource", "termios", "_curses",
    "_contextvars", "_lsprof", "unicodedata", "binascii", "_blake2",
]
MIN_EXTENSIONS = 20

CHILD = """
    import importlib, json, os, sys
    names, with_torch, d = json.loads(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
    loaded, shared = [], []
    for name in names:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        loaded.append(name)
        if getattr(mod, "__file__", "").endswith(".so"):
            shared.append(name)
    if with_torch:
        import torch
        torch.ones(4).sum()
    import nvswap
    h = nvswap.aio_handle()
    p = os.path.join(d, "f")
    data = os.urandom(10000)
    h.sync_pwrite(data, p)
    buf = bytearray(10000)
    h.sync_pread(buf, p)
    print(json.dumps({"loaded": loaded, "shared": shared,
                      "ok": buf == data, "torch": "torch" in sys.modules}))
"""


def package_dir():
    spec = importlib.util.find_spec("nvswap")  # finds it, runs nothing
    assert spec is not None and spec.submodule_search_locations, \
        "nvswap is not importable"
    return spec.submodule_search_locations[0]


def extension_file():
    d = package_dir()
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        f = os.path.join(d, "_nvswap" + suffix)
        if os.path.exists(f):
            return f
    pytest.fail(f"no _nvswap extension in {d}")


def fresh_env():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    pkg = os.path.dirname(package_dir())
    env["PYTHONPATH"] = os.pathsep.join(
        [pkg] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def load_late(diskdir, with_torch):
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), json.dumps(EXTENSIONS),
         "1" if with_torch else "0", diskdir],
        capture_output=True, text=True, env=fresh_env(), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"imported {len(out['loaded'])} extension modules before nvswap "
          f"({len(out['shared'])} from shared objects: "
          f"{' '.join(out['shared'])}), torch: {out['torch']}")
    assert len(out["loaded"]) >= MIN_EXTENSIONS, out["loaded"]
    assert out["ok"] is True
    assert out["torch"] is with_torch
    return out


def test_nvswap_loads_after_twenty_extension_modules(diskdir):
    load_late(diskdir, False)


def test_nvswap_loads_after_torch_and_twenty_extension_modules(diskdir):
    if importlib.util.find_spec("torch") is None:
        why = f"torch is not importable by {sys.executable}"
        print(why)
        pytest.skip(why)
    load_late(diskdir, True)


def test_the_extension_is_not_marked_static_tls():
    readelf = shutil.which("readelf")
    if readelf is None:
        why = "readelf is not installed (binutils)"
        print(why)
        pytest.skip(why)
    so = extension_file()
    # the file the interpreter loads as nvswap._nvswap
    r = subprocess.run([sys.executable, "-c",
                        "import nvswap; print(nvswap._nvswap.__file__)"],
                       capture_output=True, text=True, env=fresh_env())
    if r.returncode == 0:
        assert os.path.samefile(r.stdout.strip(), so)
    r = subprocess.run([readelf, "-dW", so], capture_output=True, text=True,
                       env=dict(os.environ, LC_ALL="C"))
    assert r.returncode == 0, r.stderr
    assert "(NEEDED)" in r.stdout  # a dynamic section was read
    flags = [line for line in r.stdout.splitlines() if "FLAGS" in line]
    assert not any("STATIC_TLS" in line for line in flags), (so, flags)
    assert "STATIC_TLS" not in r.stdout
