# SPDX-License-Identifier: MIT
"""Test harness, not part of the package: with NVSWAP_DS_INSTALL=1 and
this directory on PYTHONPATH, every interpreter (DeepSpeed's
DistributedTest runs each test in a fresh forkserver worker) calls
nvswap.deepspeed.install() as soon as deepspeed.ops.op_builder has been
imported, so DeepSpeed's own unit tests run unchanged on nvswap.

The one run-time patch it applies is that install() itself; DeepSpeed's
CPU accelerator needs no other fix (DeepSpeed >= 0.19.4).
"""
import importlib.abc
import importlib.util
import os
import sys

_TARGET = "deepspeed.ops.op_builder"


class _InstallAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        inner = spec.loader.exec_module

        def exec_module(module):
            inner(module)
            import nvswap.deepspeed

            nvswap.deepspeed.install()

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("NVSWAP_DS_INSTALL") == "1":
    sys.meta_path.insert(0, _InstallAfterImport())
