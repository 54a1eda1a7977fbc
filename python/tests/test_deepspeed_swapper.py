# SPDX-License-Identifier: MIT
"""ZeRO-3's parameter swapper on nvswap after nvswap.deepspeed.install().

Two layers:
- DeepSpeed's own AsyncPartitionedParameterSwapper (the class ZeRO-3's
  Init builds for offload_param.device "nvme"), driven the way
  partition_parameters.py drives it, on a real DeepSpeed: its swap
  buffers come from nvswap's pinned pool through the aio handle's
  new_cpu_locked_tensor, and every async_pwrite, async_pread and wait
  it issues goes through nvswap. Skips where DeepSpeed is not
  importable (Debian's interpreter).
- Without DeepSpeed: a stub DeepSpeed package (only the op_builder
  layout install() patches) whose AsyncIOBuilder().load() is nvswap after
  install(), and the swapper's call sequence replayed on its aio_handle
  with exact counts and bytes. Runs on every interpreter with torch.
"""
import gc
import os
import shutil
import sys
import tempfile

import pytest

os.environ.setdefault("DS_ACCELERATOR", "cpu")
torch = pytest.importorskip("torch")

import nvswap
import nvswap.deepspeed

# DeepSpeed's aio settings for both layers: two threads per op, so a
# partition is aligned to 2 KiB (AIO_ALIGNED_BYTES * intra_op_parallelism).
AIO = {"block_size": 1 << 20, "queue_depth": 8, "intra_op_parallelism": 2,
       "single_submit": False, "overlap_events": True}
# fp32 partitions: one aligned, two not (padded to 512 elements on disk),
# all >= 1 MiB so that ZeRO-3's swappable_tensor() would send them to NVMe.
SIZES = (1 << 18, (1 << 18) + 1000, 300001)


def random_fp32(n, seed):
    """n float32 values with every bit pattern possible (NaNs included)."""
    g = torch.Generator().manual_seed(seed)
    bits = torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32,
                         generator=g)
    return bits.view(torch.float32)


def same_bits(a, b):
    return a.dtype == b.dtype and torch.equal(a.view(torch.int32),
                                              b.view(torch.int32))


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def tensor_bytes(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def live_pinned():
    gc.collect()
    s = nvswap.pinned_stats()
    return s["live_allocations"], s["bytes_in_use"]


# ---------------------------------------------------------------- real DeepSpeed


@pytest.fixture(scope="module")
def ds_comm(tmp_path_factory):
    """DeepSpeed's comm layer on a one-rank gloo group (the swapper names
    its swap folder after dist.get_rank(), and DeepSpeedConfig asks for
    the world size). TORCH_EXTENSIONS_DIR names a directory that stays
    absent unless DeepSpeed JIT-builds an op."""
    try:
        import deepspeed
        from deepspeed import comm as dist
    except Exception as e:  # ImportError, or a DeepSpeed that cannot start here
        pytest.skip(f"DeepSpeed is not importable here ({type(e).__name__}: "
                    f"{e}); make test installs it from PyPI for the PyPI "
                    "interpreter")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCH_EXTENSIONS_DIR",
                  str(tmp_path_factory.mktemp("torch") / "extensions"))
        # Run-time patch: DeepSpeed's TorchBackend JIT-compiles its
        # shared-memory allreduce op (C++) whenever the op table
        # says it is compatible. One rank does no collective, and a
        # test of the I/O path must not need a C++ toolchain, so the
        # table says no for this fixture's lifetime.
        mp.setitem(deepspeed.ops.__compatible_ops__, "deepspeed_shm_comm",
                   False)
        ours = not torch.distributed.is_initialized()
        if ours:
            store = tempfile.mkdtemp(prefix="nvswap-pg-")
            dist.init_distributed(dist_backend="gloo",
                                  init_method=f"file://{store}/store",
                                  rank=0, world_size=1, verbose=False,
                                  auto_mpi_discovery=False)
        assert dist.get_rank() == 0
        yield dist
        if ours:
            dist.destroy_process_group()
            shutil.rmtree(store, ignore_errors=True)


def ds_config(nvme_path):
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig({
        "train_batch_size": 1,
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "nvme", "nvme_path": nvme_path,
                              "buffer_count": 4, "buffer_size": 1 << 19},
        },
        "aio": AIO,
    })


def partition(swapper, ds_id, data):
    """A parameter partitioned to NVMe the way ZeRO-3's Init does it
    (partition_parameters.py, _partition_param): ds_tensor is a swap
    buffer from get_buffer() holding this rank's partition."""
    from deepspeed.runtime.swap_tensor.partitioned_param_swapper import \
        PartitionedParamStatus
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    n = data.numel()
    p = torch.nn.Parameter(data.clone())
    p.ds_id = ds_id
    assert swapper.swappable_tensor(numel=n)
    part = torch.empty(0, dtype=p.dtype)
    part.data = swapper.get_buffer(p, n).data
    part.requires_grad = False
    p.ds_tensor = part
    p.ds_tensor.ds_numel = n
    p.ds_tensor.status = PartitionedParamStatus.AVAILABLE
    p.ds_tensor.final_location = OffloadDeviceEnum.nvme
    with torch.no_grad():
        p.ds_tensor.copy_(p.view(-1))
    return p


def test_zero3_param_swapper_runs_on_nvswap(ds_comm, diskdir):
    from deepspeed.runtime.swap_tensor.partitioned_param_swapper import (
        AsyncPartitionedParameterSwapper, PartitionedParamStatus)

    assert not nvswap.deepspeed.installed()
    nvswap.deepspeed.install()
    try:
        s = AsyncPartitionedParameterSwapper(ds_config(diskdir), torch.float32)
        # DeepSpeed's aio_handle is nvswap's, and so are both handles
        assert s.aio_handle is nvswap.aio_handle
        for h in (s.aio_read_handle, s.aio_write_handle):
            assert type(h) is nvswap.aio_handle
            assert type(h).__module__ == "nvswap"
            assert (h.get_block_size(), h.get_queue_depth(),
                    h.get_intra_op_parallelism()) == (1 << 20, 8, 2)
        # its 4 swap buffers: one new_cpu_locked_tensor from nvswap's pool
        assert s.numel_alignment == 512
        assert s.buffers.numel() == 4 * (1 << 19)
        assert s.aio_read_handle.is_pinned(s.buffers)
        assert s.aio_write_handle.is_pinned(s.buffers)

        want = [random_fp32(n, seed) for seed, n in enumerate(SIZES)]
        params = [partition(s, i, w) for i, w in enumerate(want)]
        aligned = [s._io_aligned_numel(n) for n in SIZES]
        assert aligned == [1 << 18, 263168, 300032]

        # swap out: one async_pwrite per parameter to its own file, then
        # wait() == 3 (DeepSpeed asserts it), then the buffers go back
        s.swap_out_and_release(params)
        ws = s.aio_write_handle.stats()
        assert (ws["ops_completed"], ws["ops_failed"]) == (3, 0)
        assert ws["bytes_written"] == 4 * sum(aligned)
        assert ws["bytes_read"] == 0
        assert ws["bounced_requests"] == 0  # locked: no staging copy
        assert ws["files_opened"] == 3
        folder = os.path.join(diskdir, "zero_stage_3", "float32params", "rank0")
        assert sorted(os.listdir(folder)) == [
            f"{i}_param.tensor.swp" for i in range(3)]
        for i, (w, a) in enumerate(zip(want, aligned)):
            p = params[i]
            assert p.ds_tensor.status == PartitionedParamStatus.NOT_AVAILABLE
            assert p.ds_tensor.numel() == 1  # DeepSpeed's invalid_buffer
            path = s.get_path(p, must_exist=True)
            assert path == os.path.join(folder, f"{i}_param.tensor.swp")
            # the partition, then the zero padding of the fresh buffer
            assert file_bytes(path) == tensor_bytes(w) + bytes(4 * (a - w.numel()))

        # nothing stale can pass for the data read back
        s.buffers.view(torch.int32).fill_(-1)

        # swap in: buffers assigned, one async_pread each, wait() == 3
        s.swap_in(params, async_op=True)
        assert [p.ds_tensor.status for p in params] == \
            [PartitionedParamStatus.INFLIGHT] * 3
        assert s.pending_reads == 3
        s.synchronize_reads()
        assert s.pending_reads == 0
        for p, w in zip(params, want):
            assert p.ds_tensor.status == PartitionedParamStatus.AVAILABLE
            assert p.ds_tensor.shape == w.shape
            assert same_bits(p.ds_tensor, w)
            assert s.aio_read_handle.is_pinned(p.ds_tensor)
        rs = s.aio_read_handle.stats()
        assert (rs["ops_completed"], rs["ops_failed"]) == (3, 0)
        assert (rs["bytes_read"], rs["bytes_written"]) == (4 * sum(aligned), 0)
        assert rs["bounced_requests"] == 0

        # an update written back over the same files, read again
        for p in params:
            with torch.no_grad():
                p.ds_tensor.neg_()
        s.swap_out_and_release(params)
        assert s.aio_write_handle.stats()["ops_completed"] == 6
        s.buffers.view(torch.int32).fill_(-1)
        s.swap_in(params, async_op=False)
        for p, w in zip(params, want):
            assert same_bits(p.ds_tensor, w.neg())
        assert s.aio_read_handle.stats()["ops_completed"] == 6
        assert s.aio_read_handle.stats()["bytes_read"] == 8 * sum(aligned)

        # the swap buffers are one allocation of nvswap's pool: freeing
        # them returns exactly their bytes
        s.remove_partition_and_release_buffers(params)
        nbytes = s.buffers.numel() * 4
        live, used = live_pinned()
        assert s.aio_read_handle.free_cpu_locked_tensor(s.buffers) is True
        assert live_pinned() == (live - 1, used - nbytes)
        # nvswap stood in for the async_io op: nothing was JIT-built
        assert not os.path.exists(os.environ["TORCH_EXTENSIONS_DIR"])
    finally:
        nvswap.deepspeed.uninstall()


# ---------------------------------------------------------------- stub DeepSpeed

# The parts of DeepSpeed's package layout install() looks in, with what
# DeepSpeed answers on a machine without the libaio headers: the op is
# not compatible and loading it would start a JIT build.
STUB = {
    "deepspeed/__init__.py": '__version__ = "0.0.0+nvswap-stub"\n',
    "deepspeed/ops/__init__.py": "",
    "deepspeed/ops/op_builder/__init__.py":
        "from .async_io import AsyncIOBuilder\n",
    "deepspeed/ops/op_builder/async_io.py": '''
class AsyncIOBuilder:
    NAME = "async_io"

    def is_compatible(self, verbose=False):
        return False

    def load(self, verbose=True):
        raise RuntimeError("stub DeepSpeed: would JIT-build async_io")
''',
    "deepspeed/ops/aio/__init__.py":
        "from ..op_builder import AsyncIOBuilder\n",
}


@pytest.fixture
def stub_deepspeed(tmp_path):
    """The STUB package imported as `deepspeed` (any real DeepSpeed's
    modules are set aside and put back afterwards)."""
    for rel, text in STUB.items():
        f = tmp_path / "stub" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    assert not nvswap.deepspeed.installed()
    aside = {k: sys.modules.pop(k) for k in list(sys.modules)
             if k == "deepspeed" or k.startswith("deepspeed.")}
    sys.path.insert(0, str(tmp_path / "stub"))
    try:
        import deepspeed

        assert deepspeed.__version__ == "0.0.0+nvswap-stub"
        yield deepspeed
    finally:
        nvswap.deepspeed.uninstall()
        sys.path.remove(str(tmp_path / "stub"))
        for k in [k for k in sys.modules
                  if k == "deepspeed" or k.startswith("deepspeed.")]:
            del sys.modules[k]
        sys.modules.update(aside)


def test_stub_deepspeed_loads_nvswap(stub_deepspeed):
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from deepspeed.ops.op_builder.async_io import AsyncIOBuilder as cls

    assert AsyncIOBuilder is cls
    with pytest.raises(RuntimeError, match="JIT-build"):
        AsyncIOBuilder().load()
    assert nvswap.deepspeed.install() == [AsyncIOBuilder]
    assert AsyncIOBuilder().is_compatible() is True
    assert AsyncIOBuilder().load(verbose=False) is nvswap
    from deepspeed.ops.aio import AsyncIOBuilder as aio_builder

    assert aio_builder().load() is nvswap
    nvswap.deepspeed.uninstall()
    assert AsyncIOBuilder().is_compatible() is False
    with pytest.raises(RuntimeError, match="JIT-build"):
        AsyncIOBuilder().load()


def test_swapper_call_sequence_on_stub_deepspeed(stub_deepspeed, diskdir):
    """What AsyncPartitionedParameterSwapper does with its aio handle,
    step by step, on the handle DeepSpeed's builder gives after install()."""
    from deepspeed.ops.op_builder import AsyncIOBuilder

    nvswap.deepspeed.install()
    # _configure_aio: the handle class from the builder, two handles
    aio_handle = AsyncIOBuilder().load(verbose=False).aio_handle
    assert aio_handle is nvswap.aio_handle
    read_h, write_h = (aio_handle(**AIO) for _ in range(2))
    assert type(read_h).__module__ == "nvswap"
    assert isinstance(write_h, nvswap.aio_handle)

    # swap buffers: new_cpu_locked_tensor x N from nvswap's pinned pool,
    # sized to the partitions aligned to 512 fp32 elements (2 KiB)
    want = [random_fp32(n, seed) for seed, n in enumerate(SIZES)]
    aligned = [-(-n // 512) * 512 for n in SIZES]
    example = torch.empty(0, dtype=torch.float32)
    live, used = live_pinned()
    out_bufs = [write_h.new_cpu_locked_tensor(a, example) for a in aligned]
    assert live_pinned() == (live + 3, used + 4 * sum(aligned))
    for b, a, w in zip(out_bufs, aligned, want):
        assert (b.dtype, b.numel()) == (torch.float32, a)
        assert write_h.is_pinned(b) and read_h.is_pinned(b)
        assert not b.view(torch.int32).any()  # zero-filled
        b.narrow(0, 0, w.numel()).copy_(w)

    # swap_out_tensors: async_pwrite x N to per-parameter files, wait() == N
    paths = [os.path.join(diskdir, f"{i}_param.tensor.swp")
             for i in range(len(SIZES))]
    for b, path in zip(out_bufs, paths):
        assert write_h.async_pwrite(b, path, 0) == 0
    assert write_h.wait() == 3
    assert write_h.wait() == 0
    for path, w, a in zip(paths, want, aligned):
        assert file_bytes(path) == tensor_bytes(w) + bytes(4 * (a - w.numel()))

    # swap_in_tensors: async_pread x N into other locked buffers, wait() == N
    in_bufs = [read_h.new_cpu_locked_tensor(a, example) for a in aligned]
    for b in in_bufs:
        b.view(torch.int32).fill_(-1)
    for b, path in zip(in_bufs, paths):
        assert read_h.async_pread(b, path, 0) == 0
    assert read_h.wait() == 3
    for b, w in zip(in_bufs, want):
        assert same_bits(b.narrow(0, 0, w.numel()), w)
        assert not b.narrow(0, w.numel(), b.numel() - w.numel()) \
            .view(torch.int32).any()

    ws, rs = write_h.stats(), read_h.stats()
    assert (ws["ops_completed"], ws["bytes_written"], ws["bytes_read"]) == \
        (3, 4 * sum(aligned), 0)
    assert (rs["ops_completed"], rs["bytes_read"], rs["bytes_written"]) == \
        (3, 4 * sum(aligned), 0)
    assert ws["bounced_requests"] == rs["bounced_requests"] == 0

    # free_cpu_locked_tensor: every buffer back to the pool
    assert live_pinned() == (live + 6, used + 8 * sum(aligned))
    for b in out_bufs + in_bufs:
        assert write_h.free_cpu_locked_tensor(b) is True
        assert b.numel() == 0
    assert live_pinned() == (live, used)
    read_h.close()
    write_h.close()
