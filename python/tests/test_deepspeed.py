# SPDX-License-Identifier: MIT
"""nvswap.deepspeed.install() against a real DeepSpeed (from PyPI).

make test installs DeepSpeed into the PyPI interpreter's venv; elsewhere
(Debian's interpreter, no PyPI) these tests skip and say why. DeepSpeed's
own tests/unit/v1/nvme/test_aio.py is not in its PyPI sdist: with
NVSWAP_DEEPSPEED_TESTS=<DeepSpeed checkout>/tests it runs unchanged on
nvswap (through ds_harness/sitecustomize.py), without building any op.
"""
import os
import pathlib
import subprocess
import sys

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")
torch = pytest.importorskip("torch")
try:
    import deepspeed  # noqa: F401
except Exception as e:  # ImportError, or a DeepSpeed that cannot start here
    pytest.skip(f"DeepSpeed is not importable here ({type(e).__name__}: {e}); "
                "make test installs it from PyPI for the PyPI interpreter",
                allow_module_level=True)

import nvswap
import nvswap.deepspeed

HARNESS = pathlib.Path(__file__).resolve().parent / "ds_harness"


@pytest.fixture
def installed():
    nvswap.deepspeed.install()
    yield
    nvswap.deepspeed.uninstall()


def test_async_io_builder_loads_nvswap(installed):
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from deepspeed.accelerator import get_accelerator

    assert AsyncIOBuilder().is_compatible()
    assert AsyncIOBuilder().load() is nvswap
    assert get_accelerator().create_op_builder("AsyncIOBuilder").load() is nvswap
    assert nvswap.deepspeed.installed()


def test_gds_builder_loads_nvswap_with_gds_handle(installed):
    try:
        from deepspeed.ops.op_builder.gds import GDSBuilder
    except Exception as e:  # absent in this release
        pytest.skip(f"no GDSBuilder in this DeepSpeed ({e})")
    info = nvswap.gpu_info()
    assert GDSBuilder().load() is nvswap
    assert GDSBuilder().load().gds_handle is nvswap.gds_handle
    assert GDSBuilder().is_compatible() is (info["device_count"] > 0
                                            and info["cufile"])


def test_uninstall_restores_deepspeeds_builder():
    from deepspeed.ops.op_builder import AsyncIOBuilder

    before = AsyncIOBuilder.__dict__.get("load")
    nvswap.deepspeed.install()
    assert AsyncIOBuilder.__dict__.get("load") is not before
    nvswap.deepspeed.uninstall()
    assert AsyncIOBuilder.__dict__.get("load") is before
    assert not nvswap.deepspeed.installed()
    try:
        from deepspeed.ops.op_builder.gds import GDSBuilder
    except Exception:
        return
    assert "load" not in GDSBuilder.__dict__
    assert GDSBuilder.__dict__["is_compatible"] is not \
        nvswap.deepspeed._is_compatible


def test_deepspeed_handle_round_trips_a_tensor(installed, diskdir):
    from deepspeed.ops.aio import AsyncIOBuilder

    op = AsyncIOBuilder().load()
    h = op.aio_handle(1 << 20, 32, False, True, 2)
    src = h.new_cpu_locked_tensor(3 << 18, torch.empty(0, dtype=torch.float16))
    src.copy_(torch.arange(3 << 18, dtype=torch.float16))
    dst = torch.empty_like(src)
    path = os.path.join(diskdir, "t.swp")
    assert h.async_pwrite(src, path) == 0
    assert h.wait() == 1
    assert h.sync_pread(dst, path) == 1
    assert torch.equal(src, dst)
    assert os.path.getsize(path) == src.numel() * 2


def test_pin_memory_op_shares_the_pinned_pool(installed):
    from deepspeed.ops.op_builder import PinMemoryBuilder

    pin = PinMemoryBuilder().load().pin_handle()
    h = nvswap.aio_handle()
    t = pin.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.float32))
    assert pin.is_pinned(t) and h.is_pinned(t) and h.is_pinned(t[100:200])
    u = h.new_cpu_locked_tensor(4096, torch.empty(0, dtype=torch.float32))
    assert pin.is_pinned(u)
    assert pin.free_cpu_locked_tensor_by_ptr(t.data_ptr())
    assert t.numel() == 0
    assert not pin.free_cpu_locked_tensor_by_ptr(12345)
    assert h.free_cpu_locked_tensor(u)


def test_deepspeeds_own_test_aio_passes_unchanged(tmp_path):
    tests = os.environ.get("NVSWAP_DEEPSPEED_TESTS")
    if not tests:
        pytest.skip("DeepSpeed's unit tests are not in its PyPI sdist: set "
                    "NVSWAP_DEEPSPEED_TESTS=<DeepSpeed checkout>/tests")
    test = pathlib.Path(tests) / "unit" / "v1" / "nvme" / "test_aio.py"
    assert test.is_file(), test
    env = dict(os.environ, NVSWAP_DS_INSTALL="1", DS_ACCELERATOR="cpu",
               # no cached DeepSpeed op to fall back on: nvswap or nothing
               TORCH_EXTENSIONS_DIR=str(tmp_path / "torch_extensions"))
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HARNESS), str(pathlib.Path(nvswap.__file__).parents[1])]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    r = subprocess.run([sys.executable, "-m", "pytest", "-q",
                        "-p", "no:cacheprovider", str(test)],
                       cwd=tests, env=env, capture_output=True, text=True,
                       timeout=1200)
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and " failed" not in r.stdout, tail
    assert not (tmp_path / "torch_extensions" / "async_io").exists()
