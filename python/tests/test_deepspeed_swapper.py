# SPDX-License-Identifier: MIT
"""DeepSpeed's parameter swapper on nvswap after nvswap.deepspeed.install().

With the real DeepSpeed (make test installs it from PyPI for the PyPI
interpreter): its own AsyncPartitionedParameterSwapper, as ZeRO-3 builds
it, swaps parameter partitions out to NVMe and back through nvswap's
aio_handle and pinned pool. Everywhere: a stub DeepSpeed package layout
(the builder classes install() patches) and the same sequence of calls
that swapper makes on the handle.
"""
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")


def _run(code, env=None):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _has_deepspeed():
    r = subprocess.run([sys.executable, "-c", "import deepspeed"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, DS_ACCELERATOR="cpu"))
    return r.returncode == 0, r.stderr.strip().splitlines()[-1:]


def test_deepspeeds_partitioned_param_swapper_runs_on_nvswap(diskdir):
    ok, why = _has_deepspeed()
    if not ok:
        pytest.skip(f"DeepSpeed is not importable here ({why}); make test "
                    "installs it from PyPI for the PyPI interpreter")
    out = _run(f"""
    import os, socket, types
    import torch
    import nvswap, nvswap.deepspeed
    nvswap.deepspeed.install()
    import deepspeed
    from deepspeed.runtime.swap_tensor import constants as C
    from deepspeed.runtime.swap_tensor.partitioned_param_swapper import (
        AsyncPartitionedParameterSwapper, PartitionedParamStatus)
    # The swapper asks deepspeed.comm for its rank: one gloo process.
    s = socket.socket(); s.bind(("127.0.0.1", 0))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(s.getsockname()[1]))
    s.close()
    deepspeed.init_distributed(dist_backend="gloo",
                               auto_mpi_discovery=False)
    # The two parts of a DeepSpeedConfig the swapper reads.
    aio = {{C.AIO_BLOCK_SIZE: 1 << 20, C.AIO_QUEUE_DEPTH: 8,
            C.AIO_SINGLE_SUBMIT: False, C.AIO_OVERLAP_EVENTS: True,
            C.AIO_INTRA_OP_PARALLELISM: 1, C.AIO_USE_GDS: False}}
    param = types.SimpleNamespace(nvme_path={diskdir!r},
                                  buffer_size=1 << 16, buffer_count=4)
    cfg = types.SimpleNamespace(
        zero_config=types.SimpleNamespace(offload_param=param),
        aio_config=aio)
    before = nvswap.pinned_stats()["bytes_in_use"]
    sw = AsyncPartitionedParameterSwapper(cfg, torch.float32)
    grown = nvswap.pinned_stats()["bytes_in_use"] - before
    print(">", type(sw.aio_read_handle).__module__,
          type(sw.aio_read_handle).__name__,
          sw.aio_read_handle.is_pinned(sw.buffers),
          grown >= sw.buffers.numel() * 4)  # its pool is nvswap's
    # ZeRO-3's partitions: a buffer from the swapper, filled, swapped out.
    gen = torch.Generator().manual_seed(3)
    sizes, params, data = [1000, 5000, 1 << 16, 7], [], []
    for i, n in enumerate(sizes):
        p = torch.nn.Parameter(torch.empty(0), requires_grad=False)
        p.ds_id = i
        p.ds_tensor = torch.empty(0)
        p.ds_tensor.ds_numel = n
        p.ds_tensor.status = PartitionedParamStatus.AVAILABLE
        d = torch.randn(n, generator=gen)
        sw.get_buffer(p, n).copy_(d)
        p.ds_tensor.data = sw.param_id_to_swap_buffer[i].narrow(0, 0, n)
        params.append(p)
        data.append(d)
    sw.swap_out_and_release(params)   # writes, waits, frees the buffers
    print(">", [p.ds_tensor.status.name for p in params],
          sw.available_swap_in_buffers())
    for p, d in zip(params, data):
        raw = open(sw.get_path(p, must_exist=True), "rb").read()
        print(">", len(raw), raw[:d.numel() * 4] == d.numpy().tobytes())
    sw.swap_in(params, async_op=False)
    print(">", [p.ds_tensor.status.name for p in params],
          all(torch.equal(p.ds_tensor, d) for p, d in zip(params, data)))
    """, env={"DS_ACCELERATOR": "cpu"})
    # DeepSpeed prints its own lines (op builds, warnings): ours start ">"
    lines = [ln[2:] for ln in out.splitlines() if ln.startswith("> ")]
    assert lines == [
        "nvswap aio_handle True True",
        "['NOT_AVAILABLE', 'NOT_AVAILABLE', 'NOT_AVAILABLE', "
        "'NOT_AVAILABLE'] 4",
        "4096 True", "20480 True", "262144 True", "1024 True",
        "['AVAILABLE', 'AVAILABLE', 'AVAILABLE', 'AVAILABLE'] True",
    ], out


STUB = {
    "deepspeed/__init__.py": "__version__ = '0.0.stub'\n",
    "deepspeed/ops/__init__.py": "__compatible_ops__ = {}\n",
    "deepspeed/ops/op_builder/__init__.py": textwrap.dedent("""
        class AsyncIOBuilder:
            NAME = "async_io"
            def load(self, verbose=True):
                raise RuntimeError("the stub would JIT-build its aio op")
            def is_compatible(self, verbose=False):
                return False
        class PinMemoryBuilder:
            NAME = "pin_memory"
            def load(self, verbose=True):
                raise RuntimeError("the stub would JIT-build pin_memory")
            def is_compatible(self, verbose=False):
                return False
        """),
}


def test_a_stub_deepspeeds_swapper_calls_go_through_nvswap(tmp_path,
                                                           diskdir):
    for name, text in STUB.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    out = _run(f"""
    import os, sys
    sys.path.insert(0, {str(tmp_path)!r})
    import torch
    import nvswap, nvswap.deepspeed
    import deepspeed
    assert deepspeed.__version__ == "0.0.stub", deepspeed.__file__
    nvswap.deepspeed.install()
    from deepspeed.ops.op_builder import AsyncIOBuilder
    # What AsyncPartitionedParameterSwapper does on the handle: a locked
    # buffer pool, a write of each partition to its own file, one wait
    # counting them, then reads back into the pool and one wait.
    op = AsyncIOBuilder().load(verbose=False)
    h = op.aio_handle(block_size=1 << 20, queue_depth=8,
                      single_submit=False, overlap_events=True,
                      intra_op_parallelism=1)
    n, count = 1 << 14, 4
    pool = h.new_cpu_locked_tensor(n * count, torch.empty(0))
    parts = [pool.narrow(0, i * n, n) for i in range(count)]
    gen = torch.Generator().manual_seed(4)
    want = [torch.randn(n, generator=gen) for _ in range(count)]
    paths = [os.path.join({diskdir!r}, f"{{i}}_param.tensor.swp")
             for i in range(count)]
    for part, w, path in zip(parts, want, paths):
        part.copy_(w)
        assert h.async_pwrite(part, path) == 0
    print(op is nvswap, type(h).__name__, h.is_pinned(pool),
          h.wait(), [os.path.getsize(p) for p in paths])
    pool.zero_()
    for part, path in zip(parts, paths):
        assert h.async_pread(part, path) == 0
    print(h.wait(), all(torch.equal(p, w) for p, w in zip(parts, want)))
    print(h.free_cpu_locked_tensor(pool), pool.numel())
    """)
    assert out.splitlines() == [
        f"True aio_handle True 4 {[n * 4 for n in [1 << 14] * 4]}",
        "4 True",
        "True 0",
    ], out
