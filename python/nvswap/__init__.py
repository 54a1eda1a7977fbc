# SPDX-License-Identifier: MIT
"""nvswap: tensors between host memory and NVMe, from Python.

The storage layer of ZeRO-Infinity-style offload, as a C library with
this thin binding (no torch headers: any torch >= 1.13 works, and numpy
arrays or any buffer work without torch).

DeepNVMe compatibility
    aio_handle            DeepSpeed's aio_handle: same methods, argument
                          names, defaults and return values; failures
                          raise nvswap.Error instead of returning -1.
    aio_read, aio_write   DeepSpeed's one-shot module functions.
    gds_handle            DeepSpeed's gds_handle: an aio_handle whose
                          CUDA tensors go through cuFile (GPUDirect
                          Storage), plus pin_device_tensor & co.
    nvswap.deepspeed      install() makes DeepSpeed's AsyncIOBuilder
                          (and GDSBuilder) load nvswap.

Beyond DeepNVMe
    aio_handle.submit_read/submit_write -> Op, a future per op.
    pinned_empty(shape, dtype)  a torch tensor in page-locked memory.
    gpu_info()                  the CUDA driver, device and cuFile as
                                nvswap finds them (docs/gpu-python.md).
    Config                      a checked DeepSpeed-style JSON config.
    parse_size(text)            bytes of a size by the one rule every
                                size keyword follows (64M, 2GiB, 5GB).
    Swapper                     the swap manager: register, prefetch,
                                acquire -> a tensor on the pinned pool
                                buffer, release, evict, stats.
    ParamSwapper, OptimizerSwapper, GradSwapper
                                the layer-wise parameter, sub-group
                                optimizer-state and write-behind gradient
                                swappers over a Swapper.

Checkpoints
    save(obj, path) -> SaveHandle   torch.save's file, written in the
                          background through CkptWriter (O_DIRECT from
                          pinned buffers); handle.wait() re-raises.
    CkptWriter            a write-only file: O_DIRECT, atomic rename.

Errors
    Error         an OSError: .errno, and .strerror = the C library's
                  sentence (call, path, offset, cause).
    ConfigError   Error and ValueError, with .file .line .column .key.

Buffers are contiguous CPU torch tensors, numpy arrays, or any object
with the buffer protocol; reads and writes (aio_handle, gds_handle,
aio_read, aio_write) and deepspeed_memcpy also take contiguous CUDA
tensors, which the swapper and checkpoint calls refuse with TypeError.
A non-contiguous or read-only (for a read) buffer raises ValueError;
nothing is submitted then. Every blocking call releases the GIL, and an
async op keeps its buffer alive until it completes.
"""

from . import _nvswap
from ._nvswap import (
    WAIT_FOREVER,
    ChildProcessError,
    BlockingIOError,
    CkptWriter,
    Config,
    ConfigError,
    Error,
    FileExistsError,
    FileNotFoundError,
    GradSwapper,
    InterruptedError,
    IsADirectoryError,
    NotADirectoryError,
    Op,
    OptimizerSwapper,
    ParamSwapper,
    PermissionError,
    PinnedBuffer,
    Swapper,
    TimeoutError,
    aio_handle,
    aio_read,
    aio_write,
    build_features,
    deepspeed_memcpy,
    gds_handle,
    gpu_info,
    launch,
    pinned_buffer,
    parse_size,
    pinned_stats,
    version,
)

from .checkpoint import SaveHandle, save

__version__ = _nvswap.version()

__all__ = [
    "WAIT_FOREVER",
    "CkptWriter",
    "Config",
    "ConfigError",
    "Error",
    "GradSwapper",
    "Op",
    "OptimizerSwapper",
    "ParamSwapper",
    "PinnedBuffer",
    "SaveHandle",
    "Swapper",
    "aio_handle",
    "aio_read",
    "aio_write",
    "build_features",
    "deepspeed_memcpy",
    "gds_handle",
    "gpu_info",
    "launch",
    "pinned_buffer",
    "pinned_empty",
    "parse_size",
    "pinned_stats",
    "save",
    "version",
]


def pinned_empty(shape, dtype=None):
    """A torch tensor of ``shape`` and ``dtype`` in page-locked memory.

    The memory comes from nvswap's pinned pool (aligned for O_DIRECT, so
    reads and writes on it never bounce) and returns to it when the last
    tensor using it dies. ``dtype`` defaults to torch's default dtype.
    Contents are unspecified, as with torch.empty.
    """
    import torch

    if dtype is None:
        dtype = torch.get_default_dtype()
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    numel = 1
    for d in shape:
        if d < 0:
            raise ValueError(f"nvswap.pinned_empty: negative dimension in {shape}")
        numel *= d
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    return _nvswap._tensor_from(_nvswap.pinned_buffer(nbytes), dtype, shape)
