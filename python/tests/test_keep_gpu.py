# SPDX-License-Identifier: MIT
"""Launcher detection and the GPU calls without a GPU, against hostile
environments (issue 34, "keep what works"): bad launcher variables and
NVSWAP_LIBCUDA naming a missing, non-ELF or truncated library, a
directory, /dev/zero or a library without CUDA. Each is a clear error
(or status sentence), never a crash, and the CPU paths keep working."""
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import nvswap

LAUNCH_VARS = ("OMPI_", "PMI_", "SLURM_", "MPI_LOCAL", "MV2_")


def run(code, *args, **env):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(LAUNCH_VARS) and k not in (
             "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
             "NVSWAP_LIBCUDA", "NVSWAP_CUFILE", "NVSWAP_GPU")}
    pkg = os.path.dirname(os.path.dirname(nvswap.__file__))
    e["PYTHONPATH"] = os.pathsep.join(
        [pkg] + [p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code),
                           *args], env=e, capture_output=True, text=True,
                          timeout=120)


LAUNCH = """
    import json, nvswap
    try:
        print(json.dumps(nvswap.launch()))
    except nvswap.Error as e:
        print(e.errno, e.strerror)
"""


@pytest.mark.parametrize("env, says", [
    ({"RANK": "-1", "WORLD_SIZE": "2"},
     'RANK="-1" is out of range: from 0 to 2147483647'),
    ({"RANK": "18446744073709551616", "WORLD_SIZE": "2"},
     'RANK="18446744073709551616" is out of range: from 0 to 2147483647'),
    ({"RANK": "1x", "WORLD_SIZE": "2"},
     'RANK="1x" is not a whole number (from 0 to 2147483647)'),
    ({"RANK": "", "WORLD_SIZE": "2"},
     'RANK="" is not a whole number (from 0 to 2147483647)'),
    ({"RANK": "1", "WORLD_SIZE": "0"},
     'WORLD_SIZE="0" is out of range: from 1 to 2147483647'),
    ({"RANK": "5", "WORLD_SIZE": "2"},
     "RANK 5 is not below the world size WORLD_SIZE 2 (torch.distributed)"),
    ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "3",
      "LOCAL_WORLD_SIZE": "2"},
     "local rank LOCAL_RANK 3, local size LOCAL_WORLD_SIZE 2 and world "
     "size WORLD_SIZE 4 do not fit together (torch.distributed)"),
])
def test_bad_launcher_variables_are_einval_naming_them(env, says):
    r = run(LAUNCH, **env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{errno.EINVAL} nvs_launch_detect: {says}\n"


@pytest.mark.parametrize("env, want", [
    ({"RANK": "1"}, [1, 2, 0, 1, "torch.distributed"]),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
      "RANK": "2", "WORLD_SIZE": "4"}, [1, 4, 0, 1, "Open MPI"]),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}, [3, 4, 0, 1, "Slurm"]),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, [1, 2, 0, 1, "MPICH/PMI"]),
])
def test_each_launcher_is_detected(env, want):
    r = run(LAUNCH, **env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert [got[k] for k in ("rank", "world_size", "local_rank",
                             "local_size", "source")] == want


GPU = """
    import errno, os, sys
    import nvswap
    i = nvswap.gpu_info()
    print(i["device_count"], repr(i["driver_lib"]), i["cufile"])
    print(i["status"])
    print(i["cufile_status"])
    try:
        nvswap.gds_handle()
    except nvswap.Error as e:
        print(e.errno, e.strerror)
    p = os.path.join(sys.argv[1], "cpu")
    with nvswap.aio_handle() as h:  # the CPU path is unaffected
        assert h.sync_pwrite(b"cpu", p) == 1
        b = bytearray(3)
        assert h.sync_pread(b, p) == 1 and b == b"cpu"
    print("cpu ok")
"""


def libs(d):
    """name -> (path, the loader's complaint or None for no cuInit)"""
    os.makedirs(os.path.join(d, "a-directory"))
    with open(os.path.join(d, "text.so"), "w") as f:
        f.write("not an ELF file\n")
    libz = "/lib/x86_64-linux-gnu/libz.so.1"
    with open(libz, "rb") as f:
        head = f.read(64)
    with open(os.path.join(d, "headonly.so"), "wb") as f:
        f.write(head)
    nocuda = os.path.join(d, "libz-copy.so")
    shutil.copy(libz, nocuda)
    return {
        "missing": (os.path.join(d, "missing.so"),
                    "cannot open shared object file: No such file or "
                    "directory"),
        "non-ELF": (os.path.join(d, "text.so"), "file too short"),
        "truncated": (os.path.join(d, "headonly.so"),
                      "cannot read file data"),
        "directory": (os.path.join(d, "a-directory"),
                      "cannot read file data: Is a directory"),
        "/dev/zero": ("/dev/zero", "invalid ELF header"),
        "no CUDA": (nocuda, None),
    }


@pytest.mark.parametrize("kind", ["missing", "non-ELF", "truncated",
                                  "directory", "/dev/zero", "no CUDA"])
def test_a_bad_driver_library_is_a_sentence_not_a_crash(diskdir, kind):
    if not os.path.exists("/lib/x86_64-linux-gnu/libz.so.1"):
        pytest.skip("no /lib/x86_64-linux-gnu/libz.so.1 to copy")
    lib, why = libs(diskdir)[kind]
    r = run(GPU, diskdir, NVSWAP_LIBCUDA=lib)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    first, status, cufile, err, cpu = r.stdout.splitlines()
    assert first == "0 '' False"
    if why is None:
        assert status == f"the CUDA driver {lib} lacks cuInit (too old a " \
            "driver?)"
    else:
        assert status == (f"no CUDA driver: {lib} could not be loaded "
                          f"({lib}: {why}); set NVSWAP_LIBCUDA to its path "
                          "if it is installed")
    assert cufile == "not tried: no CUDA driver"
    assert err == f"{errno.ENODEV} nvs_aio_create (use_gds): cuFile: {status}"
    assert cpu == "cpu ok"


def test_a_library_cut_mid_file_is_a_sentence_not_sigbus(diskdir):
    """A library cut inside its segments made glibc's dlopen() touch
    pages past the end of the file: SIGBUS (rc -7). Its program headers
    are checked first now (src/gpu/elfcheck.c)."""
    libz = "/lib/x86_64-linux-gnu/libz.so.1"
    if not os.path.exists(libz):
        pytest.skip("no /lib/x86_64-linux-gnu/libz.so.1 to copy")
    lib = os.path.join(diskdir, "cut.so")
    with open(libz, "rb") as f, open(lib, "wb") as g:
        g.write(f.read(3000))
    r = run(GPU, diskdir, NVSWAP_LIBCUDA=lib)
    assert r.returncode == 0, (r.returncode, r.stderr)
    status = r.stdout.splitlines()[1]
    assert status.startswith(
        f"no CUDA driver: {lib} could not be loaded ({lib} ends at 3000 "
        "bytes, before the end of its loadable segment 0 ("), r.stdout
    assert status.endswith(": a truncated file?)"), r.stdout
