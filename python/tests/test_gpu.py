# SPDX-License-Identifier: MIT
"""CUDA memory from Python: CUDA tensors through the aio calls, gds_handle
(DeepNVMe's, on cuFile) and gpu_info().

Without a CUDA driver (most CI machines) the first part runs: what is
refused, with which errno and sentence, and that CPU tensors are
unaffected. The tests marked gpu need a CUDA device (pytest -m gpu runs
just them) and skip, saying why, without one; the gds_handle ones also
need cuFile (with pip's torch it is site-packages/nvidia/cu*/lib or
nvidia/cufile/lib: this file points NVSWAP_CUFILE at it when unset).
"""
import errno
import glob
import os
import subprocess
import sys
import textwrap

import pytest

import nvswap

MiB = 1 << 20


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def cufile_env():
    """Point NVSWAP_CUFILE at pip's cuFile (torch's CUDA wheels bring it)
    when it is not set: at import, before any test makes nvswap look for
    cuFile in this process (it looks once)."""
    if os.environ.get("NVSWAP_CUFILE"):
        return
    for d in sys.path:
        for lib in sorted(glob.glob(os.path.join(
                d, "nvidia", "*", "lib", "libcufile.so.[0-9]*"))):
            os.environ["NVSWAP_CUFILE"] = lib
            return


cufile_env()


def run_python(code, **env):
    """Run code in a fresh interpreter (the driver is loaded once per
    process) with env added; its stdout."""
    e = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                       env=e, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# ---- without a GPU: what nvswap says ---------------------------------------

NO_DRIVER = "/nonexistent/nvswap-test/libcuda.so.1"


def test_gpu_info_without_a_driver_says_why():
    out = run_python("""
        import nvswap
        i = nvswap.gpu_info()
        print(i["device_count"], i["driver_lib"] == "", i["cufile"])
        print(i["status"])
    """, NVSWAP_LIBCUDA=NO_DRIVER)
    first, status = out.splitlines()
    assert first == "0 True False"
    assert status.startswith(f"no CUDA driver: {NO_DRIVER} could not be "
                             "loaded (")
    assert "set NVSWAP_LIBCUDA to its path" in status


def test_gpu_info_keys_and_types():
    i = nvswap.gpu_info()
    assert set(i) == {"device_count", "driver_version", "driver_lib",
                      "device0", "device0_bytes", "device0_pcie_gen",
                      "device0_pcie_width", "cufile", "nvfs", "cufile_lib",
                      "cufile_mode", "status", "cufile_status"}
    assert isinstance(i["cufile"], bool) and isinstance(i["nvfs"], bool)
    assert i["status"]  # always one sentence
    if i["device_count"] == 0:
        assert i["driver_version"] == 0 or i["driver_lib"]
        assert i["device0"] == "" and i["device0_bytes"] == 0
        assert not i["cufile"]


def test_gds_handle_without_a_driver_raises_enodev():
    out = run_python("""
        import nvswap
        try:
            nvswap.gds_handle()
        except nvswap.Error as e:
            print(type(e).__name__, e.errno)
            print(e.strerror)
        else:
            print("created")
    """, NVSWAP_LIBCUDA=NO_DRIVER)
    first, text = out.splitlines()
    assert first == f"Error {errno.ENODEV}"
    assert text.startswith("nvs_aio_create (use_gds): ")
    assert f"no CUDA driver: {NO_DRIVER} could not be loaded" in text


def test_gds_handle_here_raises_enodev_naming_libcuda():
    info = nvswap.gpu_info()
    if info["device_count"] > 0 or info["driver_lib"]:
        pytest.skip(f"a CUDA driver is present ({info['driver_lib']}): "
                    "see test_gds_handle_without_a_driver_raises_enodev")
    with pytest.raises(nvswap.Error) as ei:
        nvswap.gds_handle(1 << 20, 32, False, False, 1)
    assert ei.value.errno == errno.ENODEV
    assert type(ei.value) is nvswap.Error
    lib = os.environ.get("NVSWAP_LIBCUDA") or "libcuda.so.1"
    assert f"no CUDA driver: {lib} could not be loaded" in str(ei.value)


def test_gpu_off_says_so():
    out = run_python("""
        import nvswap
        print(nvswap.gpu_info()["status"])
        try:
            nvswap.gds_handle()
        except nvswap.Error as e:
            print(e.errno, e.strerror)
    """, NVSWAP_GPU="off")
    status, err = out.splitlines()
    assert status == "GPU support is off (NVSWAP_GPU=off)"
    assert err.startswith(f"{errno.ENODEV} nvs_aio_create (use_gds): ")
    assert err.endswith("GPU support is off (NVSWAP_GPU=off)")


def test_gds_handle_is_an_aio_handle():
    assert issubclass(nvswap.gds_handle, nvswap.aio_handle)
    for m in ("pin_device_tensor", "unpin_device_tensor",
              "new_pinned_device_tensor", "free_pinned_device_tensor",
              "sync_pread", "async_pwrite", "wait", "new_cpu_locked_tensor"):
        assert callable(getattr(nvswap.gds_handle, m)), m
    assert "gds_handle" in nvswap.__all__ and "gpu_info" in nvswap.__all__


def fake_cuda_tensor(torch, n):
    """A CPU tensor that says it is on cuda:0: its memory is host memory,
    which nvswap must refuse rather than take as device memory."""

    class FakeCuda(torch.Tensor):
        @property
        def is_cpu(self):
            return False

        @property
        def device(self):
            return torch.device("cuda", 0)

    return torch.zeros(n, dtype=torch.uint8).as_subclass(FakeCuda)


def test_a_tensor_on_cuda_that_is_host_memory_is_refused(diskdir):
    torch = pytest.importorskip("torch")
    p = os.path.join(diskdir, "f")
    before = os.urandom(8192)
    with open(p, "wb") as f:
        f.write(before)
    t = fake_cuda_tensor(torch, 4096)
    driver = nvswap.gpu_info()["device_count"] > 0
    # Without a driver: nvswap cannot check, ENODEV with the reason. With
    # one: the driver calls it host memory, EINVAL.
    want = (errno.EINVAL, "does not report its memory as device memory") \
        if driver else (errno.ENODEV, "could not be loaded")
    with nvswap.aio_handle() as h:
        calls = [lambda: h.sync_pread(t, p), lambda: h.sync_pwrite(t, p),
                 lambda: h.async_pread(t, p), lambda: h.async_pwrite(t, p),
                 lambda: h.pread(t, p, False, False, 4096),
                 lambda: h.write(t, p, True), lambda: h.submit_read(t, p),
                 lambda: nvswap.aio_write(t, p, MiB, 8, False, False, False),
                 lambda: nvswap.deepspeed_memcpy(t, torch.zeros(4096,
                                                   dtype=torch.uint8))]
        for call in calls:
            with pytest.raises(nvswap.Error) as ei:
                call()
            assert ei.value.errno == want[0]
            assert str(ei.value).startswith(
                f"[Errno {want[0]}] nvswap: a CUDA tensor (4096 bytes at ")
            assert want[1] in str(ei.value)
        st = h.stats()
        assert (h.pending, st["ops_completed"], st["device_bytes"]) == (0, 0, 0)
    assert slurp(p) == before


def test_fake_cuda_tensor_enodev_names_the_driver_library(diskdir):
    pytest.importorskip("torch")
    out = run_python(f"""
        import torch, nvswap
        class FakeCuda(torch.Tensor):
            is_cpu = property(lambda self: False)
            device = property(lambda self: torch.device("cuda", 0))
        t = torch.ones(3, dtype=torch.uint8).as_subclass(FakeCuda)
        try:
            nvswap.aio_handle().sync_pwrite(t, {os.path.join(diskdir, 'f')!r})
        except nvswap.Error as e:
            print(e.errno, e.strerror)
    """, NVSWAP_LIBCUDA=NO_DRIVER)
    assert out.startswith(f"{errno.ENODEV} nvswap: a CUDA tensor (3 bytes ")
    assert f"no CUDA driver: {NO_DRIVER} could not be loaded" in out
    assert not os.path.exists(os.path.join(diskdir, "f"))


def test_calls_on_host_memory_only_refuse_cuda_tensors(diskdir):
    torch = pytest.importorskip("torch")
    t = fake_cuda_tensor(torch, 4096)
    with nvswap.CkptWriter(os.path.join(diskdir, "ck")) as w:
        with pytest.raises(TypeError, match="device 'cuda'; this call "
                           "takes CPU memory only"):
            w.write(t)
        w.abort()
    with nvswap.aio_handle() as h:
        with pytest.raises(TypeError, match="takes CPU memory only"):
            h.free_cpu_locked_tensor(t)


def test_cpu_tensors_are_unchanged(diskdir):
    torch = pytest.importorskip("torch")
    p = os.path.join(diskdir, "f")
    src = torch.frombuffer(bytearray(os.urandom(4096 + 13)), dtype=torch.uint8)
    dst = torch.zeros_like(src)
    with nvswap.aio_handle() as h:
        assert h.sync_pwrite(src, p, 4096) == 1
        assert h.async_pread(dst, p, 4096) == 0
        assert h.wait() == 1
        st = h.stats()
    assert torch.equal(src, dst)
    assert slurp(p)[4096:] == bytes(src.tolist())
    assert (st["device_bytes"], st["gds_bytes"]) == (0, 0)
    assert st["bytes_read"] == st["bytes_written"] == 4096 + 13


# ---- with a CUDA device ----------------------------------------------------


@pytest.fixture
def cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        why = (f"no CUDA device: torch {torch.__version__} (CUDA "
               f"{torch.version.cuda}) finds none")
        print(why)
        pytest.skip(why)
    return torch


@pytest.fixture
def gds(cuda):
    info = nvswap.gpu_info()
    if not info["cufile"]:
        why = f"no cuFile: {info['cufile_status']}"
        print(why)
        pytest.skip(why)
    return cuda


def random_bytes(torch, n, device="cuda"):
    cpu = torch.frombuffer(bytearray(os.urandom(n)), dtype=torch.uint8) \
        if n else torch.empty(0, dtype=torch.uint8)
    return cpu.to(device)


def host_bytes(t):
    """The bytes of tensor t (any device, any dtype), copied to the host."""
    import torch

    return t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


SIZES = [MiB, 4096 + 13, 3]
OFFSETS = [4096, 13]


def make_handle(kind):
    return nvswap.gds_handle(MiB, 32, False, True, 2) if kind == "gds" \
        else nvswap.aio_handle(MiB, 32, False, True, 2)


@pytest.fixture(params=["aio", "gds"])
def handle_kind(request, cuda):
    if request.param == "gds":
        request.getfixturevalue("gds")
    return request.param


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("offset", OFFSETS)
def test_cuda_round_trip_sync(cuda, handle_kind, diskdir, size, offset):
    torch = cuda
    p = os.path.join(diskdir, "f")
    src = random_bytes(torch, size)
    dst = torch.zeros(size, dtype=torch.uint8, device="cuda")
    with make_handle(handle_kind) as h:
        assert h.sync_pwrite(src, p, offset) == 1
        assert h.sync_pread(dst, p, offset) == 1
        st = h.stats()
    data = slurp(p)
    assert len(data) == offset + size
    assert data[:offset] == bytes(offset)
    assert data[offset:] == host_bytes(src)
    assert host_bytes(dst) == host_bytes(src)
    key = "gds_bytes" if handle_kind == "gds" else "device_bytes"
    assert st[key] == 2 * size
    assert st["bytes_read"] == st["bytes_written"] == size


@pytest.mark.gpu
@pytest.mark.parametrize("size", SIZES)
def test_cuda_round_trip_async_and_every_call(cuda, handle_kind, diskdir,
                                              size):
    torch = cuda
    offset = 8192 + 13
    p = os.path.join(diskdir, "f")
    srcs = [random_bytes(torch, size) for _ in range(4)]
    with make_handle(handle_kind) as h:
        assert h.async_pwrite(srcs[0], p, offset) == 0
        assert h.pwrite(srcs[1], p + "1", False, True, offset) == 0
        op = h.submit_write(srcs[2], p + "2", offset)
        assert h.wait() == 3
        assert op.done()
        assert h.write(srcs[3], p + "3", True, offset) == 0  # validated
        for i, s in enumerate(srcs):
            name = p + (str(i) if i else "")
            assert slurp(name)[offset:] == host_bytes(s), name
        dsts = [torch.full((size,), 7, dtype=torch.uint8, device="cuda")
                for _ in range(4)]
        assert h.async_pread(dsts[0], p, offset) == 0
        assert h.pread(dsts[1], p + "1", True, True, offset) == 0
        op = h.submit_read(dsts[2], p + "2", offset, validate=True)
        assert h.wait() == 3
        assert op.done() and op.nbytes == size
        assert h.read(dsts[3], p + "3", True, offset) == 0
    for s, d in zip(srcs, dsts):
        assert host_bytes(d) == host_bytes(s)


@pytest.mark.gpu
def test_kernels_before_the_op_are_seen_and_after_it_see_it(cuda, diskdir):
    # nvswap copies on streams of its own: the binding waits for the
    # tensor's current stream first.
    torch = cuda
    p = os.path.join(diskdir, "f")
    n = 8 * MiB // 4
    with nvswap.aio_handle() as h:
        for k in range(1, 4):
            t = torch.arange(n, dtype=torch.int32, device="cuda") * k
            assert h.sync_pwrite(t, p) == 1
            want = (torch.arange(n, dtype=torch.int32) * k).numpy().tobytes()
            assert slurp(p) == want
            back = torch.empty(n, dtype=torch.int32, device="cuda")
            assert h.sync_pread(back, p) == 1
            assert int((back - t).abs().sum()) == 0


@pytest.mark.gpu
def test_one_shot_aio_read_write_and_memcpy_take_cuda_tensors(cuda, diskdir):
    torch = cuda
    p = os.path.join(diskdir, "f")
    src = random_bytes(torch, MiB + 5)
    assert nvswap.aio_write(src, p, MiB, 16, False, False, True) == 0
    dst = torch.zeros_like(src)
    assert nvswap.aio_read(dst, p, MiB, 16, False, False, True) == 0
    assert host_bytes(dst) == host_bytes(src) == slurp(p)
    cpu = torch.zeros(MiB + 5, dtype=torch.uint8)
    assert nvswap.deepspeed_memcpy(cpu, src) == 0
    assert bytes(cpu.numpy().tobytes()) == host_bytes(src)
    again = torch.zeros_like(src)
    assert nvswap.deepspeed_memcpy(again, cpu) == 0
    assert host_bytes(again) == host_bytes(src)


@pytest.mark.gpu
def test_cuda_dtypes_and_views(cuda, diskdir):
    torch = cuda
    p = os.path.join(diskdir, "f")
    with nvswap.aio_handle() as h:
        for dtype in (torch.float16, torch.bfloat16, torch.float32,
                      torch.int64, torch.complex64):
            src = random_bytes(torch, 64 * 129 * 8).view(dtype)[: 64 * 129]
            src = src.reshape(64, 129)
            assert h.sync_pwrite(src[3:5], p) == 1  # a view at an offset
            assert slurp(p) == host_bytes(src[3:5])
            dst = torch.empty(2, 129, dtype=dtype, device="cuda")
            assert h.sync_pread(dst, p) == 1
            assert host_bytes(dst) == host_bytes(src[3:5])
        with pytest.raises(ValueError, match="not contiguous"):
            h.sync_pwrite(torch.zeros(64, 64, device="cuda").t(), p)


@pytest.mark.gpu
def test_reading_past_eof_into_cuda_is_the_cpu_error(cuda, handle_kind,
                                                     diskdir):
    torch = cuda
    p = os.path.join(diskdir, "f")
    with open(p, "wb") as f:
        f.write(os.urandom(4096))
    errors = []
    with make_handle(handle_kind) as h:
        for device in ("cpu", "cuda"):
            t = torch.zeros(8192, dtype=torch.uint8, device=device)
            for call in (lambda: h.sync_pread(t, p),
                         lambda: (h.async_pread(t, p), h.wait())):
                with pytest.raises(nvswap.Error) as ei:
                    call()
                errors.append((device, type(ei.value), ei.value.errno))
    cpu = [e[1:] for e in errors if e[0] == "cpu"]
    dev = [e[1:] for e in errors if e[0] == "cuda"]
    assert cpu == dev
    assert cpu[0] == (nvswap.Error, errno.EINVAL)


@pytest.mark.gpu
def test_gpu_off_refuses_a_real_cuda_tensor(cuda, diskdir):
    out = run_python(f"""
        import torch, nvswap
        t = torch.ones(4096, dtype=torch.uint8, device="cuda")
        try:
            nvswap.aio_handle().sync_pwrite(t, {os.path.join(diskdir, 'f')!r})
        except nvswap.Error as e:
            print(e.errno, e.strerror)
    """, NVSWAP_GPU="off")
    assert out.startswith(f"{errno.ENODEV} nvswap: a CUDA tensor (4096 ")
    assert "GPU support is off (NVSWAP_GPU=off)" in out
    assert not os.path.exists(os.path.join(diskdir, "f"))


# DeepNVMe's own tests (DeepSpeed tests/unit/ops/aio/test_aio.py) run each
# case over a CPU tensor pinned by torch and one from
# new_cpu_locked_tensor; here also over CUDA tensors.
BUFFERS = ["torch_pinned", "nvswap_locked", "cuda"]


def new_buffer(torch, h, kind, n):
    if kind == "torch_pinned":
        return torch.empty(n, dtype=torch.uint8).pin_memory()
    if kind == "nvswap_locked":
        return h.new_cpu_locked_tensor(n, torch.empty(0, dtype=torch.uint8))
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def free_buffer(h, kind, t):
    if kind == "nvswap_locked":
        assert h.free_cpu_locked_tensor(t)


def ref_file(diskdir, name, n):
    p = os.path.join(diskdir, name)
    data = os.urandom(n)
    with open(p, "wb") as f:
        f.write(data)
    return p, data


IO_SIZE = 4 * MiB + 4096 + 5  # small: gpu-device.sh gives pytest -m gpu ~150 s


@pytest.mark.gpu
@pytest.mark.parametrize("buffer_kind", BUFFERS)
@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("overlap_events", [False, True])
def test_deepnvme_read(cuda, diskdir, buffer_kind, async_op, overlap_events):
    torch = cuda
    p, data = ref_file(diskdir, "ref", IO_SIZE)
    h = nvswap.aio_handle(MiB, 128, False, overlap_events, 2)
    buf = new_buffer(torch, h, buffer_kind, IO_SIZE)
    if async_op:
        assert h.async_pread(buf, p) == 0
        assert h.wait() == 1
    else:
        assert h.sync_pread(buf, p) == 1
    assert host_bytes(buf) == data
    free_buffer(h, buffer_kind, buf)
    h.close()


@pytest.mark.gpu
@pytest.mark.parametrize("buffer_kind", BUFFERS)
@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("overlap_events", [False, True])
def test_deepnvme_write(cuda, diskdir, buffer_kind, async_op, overlap_events):
    torch = cuda
    h = nvswap.aio_handle(MiB, 128, False, overlap_events, 2)
    buf = new_buffer(torch, h, buffer_kind, IO_SIZE)
    data = os.urandom(IO_SIZE)
    buf.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    p = os.path.join(diskdir, "out")
    if async_op:
        assert h.async_pwrite(buf, p) == 0
        assert h.wait() == 1
    else:
        assert h.sync_pwrite(buf, p) == 1
    assert slurp(p) == data
    free_buffer(h, buffer_kind, buf)
    h.close()


@pytest.mark.gpu
@pytest.mark.parametrize("buffer_kind", BUFFERS)
@pytest.mark.parametrize("async_queue", [2, 3])
def test_deepnvme_async_queue(cuda, diskdir, buffer_kind, async_queue):
    torch = cuda
    h = nvswap.aio_handle(MiB, 128, False, True, 2)
    refs = [ref_file(diskdir, f"ref{i}", IO_SIZE - i) for i in
            range(async_queue)]
    bufs = [new_buffer(torch, h, buffer_kind, IO_SIZE - i)
            for i in range(async_queue)]
    for (p, _), b in zip(refs, bufs):
        assert h.async_pread(b, p) == 0
    assert h.wait() == async_queue
    for (_, data), b in zip(refs, bufs):
        assert host_bytes(b) == data
    outs = [os.path.join(diskdir, f"out{i}") for i in range(async_queue)]
    for o, b in zip(outs, bufs):
        assert h.async_pwrite(b, o) == 0
    assert h.wait() == async_queue
    for o, (_, data) in zip(outs, refs):
        assert slurp(o) == data
    for b in bufs:
        free_buffer(h, buffer_kind, b)
    h.close()


# ---- gds_handle: DeepNVMe's GPUDirect Storage handle -----------------------


@pytest.mark.gpu
def test_gds_pin_and_unpin(gds):
    torch = gds
    with nvswap.gds_handle() as h:
        t = torch.zeros(MiB, dtype=torch.uint8, device="cuda")
        assert h.pin_device_tensor(t) is True
        with pytest.raises(nvswap.Error) as ei:
            h.pin_device_tensor(t)  # overlaps its own registration
        assert ei.value.errno == errno.EINVAL
        assert h.unpin_device_tensor(t) is True
        with pytest.raises(nvswap.Error) as ei:
            h.unpin_device_tensor(t)
        assert ei.value.errno == errno.ENOENT
        with pytest.raises(TypeError, match="host memory"):
            h.pin_device_tensor(torch.zeros(16))
        with pytest.raises(TypeError, match="CUDA torch.Tensor"):
            h.pin_device_tensor(bytearray(16))
        empty = torch.empty(0, device="cuda")
        assert h.pin_device_tensor(empty) and h.unpin_device_tensor(empty)


@pytest.mark.gpu
def test_gds_new_and_free_pinned_device_tensor(gds, diskdir):
    torch = gds
    p = os.path.join(diskdir, "f")
    with nvswap.gds_handle(MiB, 32, False, False, 2) as h:
        ex = torch.empty(0, dtype=torch.float16, device="cuda")
        t = h.new_pinned_device_tensor(3 * MiB + 7, ex)
        assert (t.dtype, t.numel(), t.device.type) == (torch.float16,
                                                       3 * MiB + 7, "cuda")
        u = h.new_pinned_device_tensor(100, example_tensor=torch.empty(
            0, dtype=torch.int32))  # a CPU example: the current device
        assert (u.dtype, u.device.type) == (torch.int32, "cuda")
        t.copy_(torch.randn(3 * MiB + 7, dtype=torch.float16))
        assert h.sync_pwrite(t, p, 4096) == 1
        back = h.new_pinned_device_tensor(3 * MiB + 7, ex)
        assert h.async_pread(back, p, 4096) == 0
        assert h.wait() == 1
        assert host_bytes(back) == host_bytes(t) == slurp(p)[4096:]
        assert h.stats()["gds_bytes"] == 2 * t.numel() * 2
        for x in (t, u, back):
            assert h.free_pinned_device_tensor(x) is True
        with pytest.raises(nvswap.Error) as ei:
            h.free_pinned_device_tensor(t)
        assert ei.value.errno == errno.ENOENT


@pytest.mark.gpu
@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("size", SIZES)
def test_gds_round_trip_registered_or_not(gds, diskdir, pinned, size):
    torch = gds
    p = os.path.join(diskdir, "f")
    with nvswap.gds_handle() as h:
        src = random_bytes(torch, size)
        dst = torch.zeros(size, dtype=torch.uint8, device="cuda")
        if pinned:
            assert h.pin_device_tensor(src) and h.pin_device_tensor(dst)
        assert h.sync_pwrite(src, p, 13) == 1
        assert h.async_pread(dst, p, 13) == 0
        assert h.wait() == 1
        assert slurp(p)[13:] == host_bytes(src) == host_bytes(dst)
        if pinned:
            assert h.unpin_device_tensor(src) and h.unpin_device_tensor(dst)
        cpu = torch.zeros(size, dtype=torch.uint8)  # host memory as ever
        assert h.sync_pread(cpu, p, 13) == 1
        assert bytes(cpu.numpy().tobytes()) == host_bytes(src)
