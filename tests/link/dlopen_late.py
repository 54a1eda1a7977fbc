#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The shared objects nvswap ships load into Debian's Python late.

A library that needs static TLS can be dlopen()ed only while glibc's
small static TLS surplus lasts, which the extension modules loaded before
it (and PyTorch) use up: "cannot allocate memory in static TLS block".
Here a fresh /usr/bin/python3 first imports at least 20 extension modules
(shared objects, not built-ins) and, with --torch, PyTorch; then it loads
each LIB with ctypes.CDLL, and where the library has nvs_pinned_alloc,
allocates and frees through the private jemalloc on the main thread and
on a new one (its thread data is then allocated on first use).

Usage: dlopen_late.py [--torch] LIB.so...
Prints "N passed, N failed" (scripts/run-tests.sh adds them up); a skip
prints why, counts as Criterion counts it, and exits 77.
"""
import json
import os
import subprocess
import sys

PYTHON = "/usr/bin/python3"
MIN_EXTENSIONS = 20
# Shared-object modules of Debian's python3.11 and 3.13 (lib-dynload),
# with the C libraries several of them pull in (OpenSSL, SQLite, ncurses,
# libmpdec, liblzma, libbz2, libffi, libuuid, gdbm).
EXTENSIONS = [
    "_asyncio", "_bz2", "_codecs_cn", "_codecs_hk", "_codecs_iso2022",
    "_codecs_jp", "_codecs_kr", "_codecs_tw", "_contextvars", "_ctypes",
    "_curses", "_curses_panel", "_dbm", "_decimal", "_hashlib", "_json",
    "_lsprof", "_lzma", "_multibytecodec", "_multiprocessing",
    "_posixshmem", "_queue", "_sqlite3", "_ssl", "_uuid", "_zoneinfo",
    "mmap", "resource", "termios",
]
# Built into Debian's interpreter, imported too for good measure.
BUILTINS = [
    "_csv", "_datetime", "_elementtree", "_pickle", "_random", "_socket",
    "_struct", "array", "math", "select", "zlib",
]

CHILD = r"""
import ctypes, importlib, json, sys, threading
torch, libs = sys.argv[1] == "torch", sys.argv[2:]
extensions = json.loads(sys.stdin.read())
if torch:
    import torch as _torch
    _torch.ones(4).sum()
loaded = []
for name in extensions["ext"] + extensions["builtin"]:
    try:
        mod = importlib.import_module(name)
    except ImportError:
        continue
    if getattr(mod, "__file__", "").endswith(".so"):
        loaded.append(name)
print("extension modules from shared objects:", len(loaded))
if len(loaded) < extensions["min"]:
    sys.exit("only %d extension modules could be imported: %s"
             % (len(loaded), " ".join(loaded)))

def pinned_round_trip(lib):
    err = ctypes.c_int(-1)
    p = lib.nvs_pinned_alloc(ctypes.c_size_t(4096), ctypes.byref(err))
    if not p or err.value != 0:
        return "nvs_pinned_alloc: NULL, err %d" % err.value
    ctypes.memset(p, 0x5a, 4096)
    lib.nvs_pinned_free(ctypes.c_void_p(p))
    return None

for path in libs:
    lib = ctypes.CDLL(path)  # OSError here is the failure tested
    if not hasattr(lib, "nvs_pinned_alloc"):
        print(path, "loaded")
        continue
    lib.nvs_pinned_alloc.restype = ctypes.c_void_p
    lib.nvs_last_error.restype = ctypes.c_char_p
    res = [pinned_round_trip(lib)]
    t = threading.Thread(target=lambda: res.append(pinned_round_trip(lib)))
    t.start()
    t.join()
    for r in res:
        if r is not None:
            sys.exit("%s: %s (%s)" % (path, r, lib.nvs_last_error()))
    print(path, "loaded; pinned alloc/free on two threads")
"""


def report(passed, failed, skip=None):
    if skip:
        print("[SKIP] dlopen_late: " + skip)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(77 if skip else (1 if failed else 0))


def main(argv):
    torch = bool(argv) and argv[0] == "--torch"
    libs = [os.path.abspath(p) for p in (argv[1:] if torch else argv)]
    if not libs:
        sys.exit("usage: dlopen_late.py [--torch] LIB.so...")
    case = "after import torch" if torch else "after the extension modules"
    if not os.access(PYTHON, os.X_OK):
        report(1, 0, "no %s (apt-get install python3)" % PYTHON)
    env = dict(os.environ, NVSWAP_ALLOW_UNPINNED="1", NVSWAP_CUDA="off")
    if torch:
        probe = subprocess.run([PYTHON, "-I", "-c", "import torch"],
                               capture_output=True, text=True, env=env)
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or ["?"])[-1]
            report(1, 0, "%s cannot import torch (%s): apt-get install "
                   "python3-torch" % (PYTHON, why))
    spec = json.dumps({"ext": EXTENSIONS, "builtin": BUILTINS,
                       "min": MIN_EXTENSIONS})
    run = subprocess.run(
        [PYTHON, "-I", "-c", CHILD, "torch" if torch else "plain"] + libs,
        input=spec, capture_output=True, text=True,
        env=env)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        print("FAILED: loading %s %s in a fresh %s" % (
            " ".join(libs), case, PYTHON))
        report(0, 1)
    print("loaded %s in a fresh %s" % (case, PYTHON))
    report(1, 0)


if __name__ == "__main__":
    main(sys.argv[1:])
