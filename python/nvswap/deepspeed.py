# SPDX-License-Identifier: MIT
"""Run DeepSpeed's NVMe offload (ZeRO-Infinity) on nvswap.

    import nvswap.deepspeed
    nvswap.deepspeed.install()      # before deepspeed.initialize()

After install(), DeepSpeed's ``AsyncIOBuilder().load()`` returns the
``nvswap`` module (whose ``aio_handle``, ``aio_read``, ``aio_write`` and
``deepspeed_memcpy`` are DeepNVMe's API) and ``is_compatible()`` is True,
so DeepSpeed's swap-tensor runtime, ``ds_io`` and the DeepNVMe checkpoint
writer run on nvswap with no op build, no libaio headers and no CUDA.
``uninstall()`` puts DeepSpeed's own builder back.

What changes for DeepSpeed: a failed read or write raises nvswap.Error
(an OSError) at the call or at ``wait()`` instead of returning -1,
asserting or being ignored; ``wait()`` with nothing pending returns 0;
any buffer size works with any ``intra_op_parallelism``; unpinned
tensors are staged through pinned memory inside the handle.
"""

import sys

__all__ = ["install", "uninstall", "installed"]

# (class, attribute) -> the original value, for uninstall().
_saved = {}
_saved_ops = {}


def _nvswap_module():
    import nvswap

    return nvswap


def _load(self, verbose=True):  # noqa: ARG001 - DeepSpeed's signature
    return _nvswap_module()


def _is_compatible(self, verbose=False):  # noqa: ARG001
    return True


def _builder_classes():
    """Every AsyncIOBuilder class a DeepSpeed installation may hand out."""
    found = []

    def add(obj):
        if isinstance(obj, type) and obj not in found:
            found.append(obj)

    for name in ("deepspeed.ops.op_builder.async_io",
                 "deepspeed.ops.op_builder.cpu.async_io",
                 "deepspeed.ops.op_builder.cpu",
                 "deepspeed.ops.op_builder",
                 "deepspeed.ops.aio",
                 "op_builder.async_io",
                 "op_builder"):
        try:
            __import__(name)
        except Exception:  # absent in this release or for this accelerator
            continue
        add(getattr(sys.modules[name], "AsyncIOBuilder", None))
    try:
        from deepspeed.accelerator import get_accelerator

        add(get_accelerator().get_op_builder("AsyncIOBuilder"))
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
    for cls in classes:
        for attr, new in (("load", _load), ("is_compatible", _is_compatible)):
            if (cls, attr) not in _saved:
                _saved[(cls, attr)] = cls.__dict__.get(attr)
            setattr(cls, attr, new)
    # The table DeepSpeed's tests and ds_report consult.
    for modname in ("deepspeed.ops", "deepspeed.git_version_info"):
        mod = sys.modules.get(modname)
        table = getattr(mod, "__compatible_ops__", None) or \
            getattr(mod, "compatible_ops", None)
        if isinstance(table, dict):
            key = (id(table), "async_io")
            if key not in _saved_ops:
                _saved_ops[key] = (table, table.get("async_io"))
            table["async_io"] = True
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
    for table, old in _saved_ops.values():
        if old is None:
            table.pop("async_io", None)
        else:
            table["async_io"] = old
    _saved_ops.clear()


def installed():
    """True while install() is in effect."""
    return bool(_saved)
