# SPDX-License-Identifier: MIT
"""Small file helpers the aio tests share (importable: this directory is
on sys.path under pytest's default import mode)."""
import os


def rand(n):
    return os.urandom(n)


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)
