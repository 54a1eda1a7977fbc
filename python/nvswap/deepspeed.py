# SPDX-License-Identifier: MIT
"""Run DeepSpeed's NVMe offload (ZeRO-Infinity) on nvswap.

    import nvswap.deepspeed
    nvswap.deepspeed.install()      # before deepspeed.initialize()

After install(), DeepSpeed's ``AsyncIOBuilder().load()`` returns the
``nvswap`` module (whose ``aio_handle``, ``aio_read``, ``aio_write`` and
``deepspeed_memcpy`` are DeepNVMe's API) and ``is_compatible()`` is True,
so DeepSpeed's swap-tensor runtime, ``ds_io`` and the DeepNVMe checkpoint
writer run on nvswap with no op build, no libaio headers and no CUDA.
``GDSBuilder().load()`` returns the same module, whose ``gds_handle`` is
DeepNVMe's (cuFile for CUDA tensors); its ``is_compatible()`` is True
where nvswap finds a CUDA device and cuFile (``nvswap.gpu_info()``).
``PinMemoryBuilder().load().pin_handle()`` (DeepSpeed >= 0.19.5's pinned
swap buffers) is nvswap.deepspeed.pin_handle on the same pinned pool.
``uninstall()`` puts DeepSpeed's own builders back.

What changes for DeepSpeed: a failed read or write raises nvswap.Error
(an OSError) at the call or at ``wait()`` instead of returning -1,
asserting or being ignored; ``wait()`` with nothing pending returns 0;
any buffer size works with any ``intra_op_parallelism``; unpinned
tensors are staged through pinned memory inside the handle.
"""

import sys

__all__ = ["install", "uninstall", "installed", "pin_handle"]

# (class, attribute) -> the original value, for uninstall().
_saved = {}
_saved_ops = {}


def _nvswap_module():
    import nvswap

    return nvswap


def _original(cls, attr):
    """The method install() replaced on cls or its nearest patched base."""
    for klass in cls.__mro__:
        if (klass, attr) in _saved:
            old = _saved[(klass, attr)]
            if old is not None:
                return old
            # inherited: the next class up the MRO that is not ours
            for base in klass.__mro__[1:]:
                if attr in base.__dict__ and base.__dict__[attr] not in \
                        (_load, _load_pin, _is_compatible):
                    return base.__dict__[attr]
    return None


def _load(self, verbose=True):
    # GDSBuilder subclasses the CUDA AsyncIOBuilder: nvswap has its
    # gds_handle too. Any other subclass keeps its own op.
    if getattr(self, "NAME", "async_io") not in ("async_io", "gds"):
        return _original(type(self), "load")(self, verbose)
    return _nvswap_module()


def _gds_usable():
    """Whether a gds_handle can be made here: a CUDA device and cuFile."""
    try:
        info = _nvswap_module().gpu_info()
    except Exception:
        return False
    return info["device_count"] > 0 and info["cufile"]


def _is_compatible(self, verbose=False):
    name = getattr(self, "NAME", "async_io")
    if name == "gds":
        return _gds_usable()
    if name not in ("async_io", "pin_memory"):
        return _original(type(self), "is_compatible")(self, verbose)
    return True


class pin_handle:
    """DeepSpeed's pin_memory op on nvswap's pinned pool.

    DeepSpeed >= 0.19.5 allocates its pinned swap buffers through
    ``PinMemoryBuilder().load().pin_handle()``; install() makes that
    return this class, so those buffers and the aio_handle's share one
    registry (each recognizes the other's as pinned). Freeing empties
    the tensor (its memory returns to the pool when no view of it is
    left) instead of leaving it pointing at freed memory.
    """

    def __init__(self):
        import weakref

        # base address -> weak reference to the tensor made there
        self._made = weakref.WeakValueDictionary()

    def new_cpu_locked_tensor(self, num_elem, example_tensor):
        import nvswap

        esize = example_tensor.element_size()
        n = int(num_elem) * esize
        if n == 0:
            import torch

            return torch.empty(0, dtype=example_tensor.dtype)
        t = nvswap._nvswap._tensor_from(nvswap.pinned_buffer(n),
                                        example_tensor.dtype)
        t.zero_()
        self._made[t.data_ptr()] = t
        return t

    def free_cpu_locked_tensor(self, locked_tensor):
        import nvswap

        self._made.pop(locked_tensor.data_ptr(), None)
        return nvswap._nvswap.free_locked_tensor(locked_tensor)

    def free_cpu_locked_tensor_by_ptr(self, address):
        t = self._made.pop(int(address), None)
        if t is None:
            return False
        import nvswap

        return nvswap._nvswap.free_locked_tensor(t)

    def is_pinned(self, buffer):
        import nvswap

        return nvswap._nvswap.is_pinned(buffer)


class _PinMemoryOp:
    """What PinMemoryBuilder().load() returns after install()."""

    pin_handle = pin_handle


def _load_pin(self, verbose=False):
    if getattr(self, "NAME", "pin_memory") != "pin_memory":
        return _original(type(self), "load")(self, verbose)
    return _PinMemoryOp


def _builder_classes(name="AsyncIOBuilder"):
    """Every builder class of that name a DeepSpeed installation may hand out."""
    found = []

    def add(obj):
        if isinstance(obj, type) and obj not in found:
            found.append(obj)

    for modname in ("deepspeed.ops.op_builder.async_io",
                    "deepspeed.ops.op_builder.pin_memory",
                    "deepspeed.ops.op_builder.gds",
                    "deepspeed.ops.op_builder.cpu.async_io",
                    "deepspeed.ops.op_builder.cpu.pin_memory",
                    "deepspeed.ops.op_builder.cpu",
                    "deepspeed.ops.op_builder",
                    "deepspeed.ops.aio",
                    "op_builder.async_io",
                    "op_builder"):
        try:
            __import__(modname)
        except Exception:  # absent in this release or for this accelerator
            continue
        add(getattr(sys.modules[modname], name, None))
    try:
        from deepspeed.accelerator import get_accelerator

        add(get_accelerator().get_op_builder(name))
    except Exception:
        pass
    return found


def install():
    """Make DeepSpeed's AsyncIOBuilder load nvswap; returns the classes patched.

    Call it before DeepSpeed creates its swappers (before
    deepspeed.initialize()). Idempotent. Raises ImportError when
    DeepSpeed is not installed, RuntimeError when no AsyncIOBuilder
    class could be found in it.
    """
    import deepspeed  # noqa: F401 - ImportError says what is missing

    classes = _builder_classes()
    if not classes:
        raise RuntimeError(
            "nvswap.deepspeed.install: no AsyncIOBuilder class in this "
            f"DeepSpeed ({getattr(deepspeed, '__version__', '?')})")
    pin_classes = _builder_classes("PinMemoryBuilder")
    # GDSBuilder defines its own is_compatible (and inherits load).
    gds_classes = [c for c in _builder_classes("GDSBuilder")
                   if c not in classes]
    for cls in classes + pin_classes + gds_classes:
        load = _load_pin if cls in pin_classes else _load
        for attr, new in (("load", load), ("is_compatible", _is_compatible)):
            if (cls, attr) not in _saved:
                _saved[(cls, attr)] = cls.__dict__.get(attr)
            setattr(cls, attr, new)
    # The table DeepSpeed's tests and ds_report consult. Read from the
    # module's dict: newer releases compute it lazily (a module
    # __getattr__ that probes every op), which install() must not start.
    for modname in ("deepspeed.ops", "deepspeed.git_version_info"):
        mod = sys.modules.get(modname)
        d = vars(mod) if mod is not None else {}
        table = d.get("__compatible_ops__", d.get("compatible_ops"))
        if isinstance(table, dict):
            ops = {"async_io": True, "pin_memory": True}
            if "gds" in table or gds_classes:
                ops["gds"] = _gds_usable()
            for op, ok in ops.items():
                key = (id(table), op)
                if key not in _saved_ops:
                    _saved_ops[key] = (table, op, table.get(op))
                table[op] = ok
    return classes


def uninstall():
    """Undo install(): DeepSpeed's own builder methods come back."""
    for (cls, attr), old in list(_saved.items()):
        if old is None:
            try:
                delattr(cls, attr)
            except AttributeError:
                pass
        else:
            setattr(cls, attr, old)
    _saved.clear()
    for table, op, old in _saved_ops.values():
        if old is None:
            table.pop(op, None)
        else:
            table[op] = old
    _saved_ops.clear()


def installed():
    """True while install() is in effect."""
    return bool(_saved)
