# SPDX-License-Identifier: MIT
"""The installed type stubs name every public name and method of the
extension, so editors complete all of it (and the stubs stay true)."""
import ast
import pathlib

import nvswap
from nvswap import _nvswap


def stub_names():
    path = pathlib.Path(nvswap.__file__).with_name("_nvswap.pyi")
    assert path.is_file(), f"stubs not installed: {path}"
    tree = ast.parse(path.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            top.add(node.target.id)
        if isinstance(node, ast.ClassDef):
            names = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    names.add(item.target.id)
            for base in node.bases:  # inherited from a stub base class
                if isinstance(base, ast.Name) and base.id in members:
                    names |= members[base.id]
            members[node.name] = names
    return top, members


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_every_public_name_has_a_stub():
    top, _ = stub_names()
    assert public(dir(_nvswap)) - top == set()


def test_every_public_method_has_a_stub():
    _, members = stub_names()
    missing = {}
    for name in public(dir(_nvswap)):
        obj = getattr(_nvswap, name)
        if not isinstance(obj, type) or issubclass(obj, BaseException):
            continue
        gap = public(vars(obj)) - members.get(name, set())
        if gap:
            missing[name] = sorted(gap)
    assert missing == {}
