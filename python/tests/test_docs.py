# SPDX-License-Identifier: MIT
"""Docs that cannot rot: every fenced python, sh and c block of README.md
and docs/**/*.md runs, with the interpreter under test, in a fresh
directory on /var/tmp ($NVSWAP_TEST_DIR), removed afterwards; a failure
names the file, the line and the block's output.

The marking lives in the Markdown, in the fence's info string after the
language word (GitHub shows only the first word):

  ```python                 runs (no marking: it must run as written,
                            in a fresh directory, with nothing set up
                            for it: what it needs it makes or imports)
  ```python fragment        shows a piece only: not run (a python one
                            must still parse); its first line is a
                            comment saying it is a piece ("# a piece:
                            model and data made before")
  ```python continue        runs after the code block before it in the
                            same file, in the same directory (python:
                            in the same namespace); its first line is
                            a comment saying what it continues
  ```sh needs=gpu           runs where that exists, else skipped saying
                            why: gpu (torch sees a CUDA device), mpi
                            (mpirun), deepspeed, transformers (the
                            package), root, sudo, install (pkg-config
                            finds nvswap), tools (nvswap-report on the
                            block's PATH: the interpreter's bin directory,
                            as in an activated venv, first), outer
                            (make test itself: never
                            inside make test); in a chain, the blocks
                            before the first such one still run
  ```c file=handle.c        also writes the block as handle.c in its
                            directory (for the blocks that continue it)
  ```sh clone               runs in a fresh git clone of this repository
                            (its committed HEAD; one per session, shared
                            by such blocks), on the PyPI interpreter
                            only: once per make test

A reader sees none of these markings (GitHub shows the language word
only), hence the first-line comments; the first code block of each file
is a whole script, neither a piece nor a continuation.

Blocks with no language, ```text, ```console or ```json are output or
data, never run; a block with no language whose first line looks like
code (a "$ " prompt, a command, an import, an #include) is refused:
label it (console for a transcript). python blocks run in one process per chain (exec, so a
traceback names the Markdown file's lines), sh blocks with bash -e, c
blocks are compiled with cc -std=c11 -Wall -Wextra -Werror against
include/ and the build tree's libnvswap (build/, $NVSWAP_BUILD_DIR),
else an installed one (pkg-config), and run. A chain is killed after
TIMEOUT seconds per block (CLONE_TIMEOUT in a clone) and reported.
Blocks that need a GPU are also marked gpu for pytest (make test-gpu).
"""
import importlib.util
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import docblocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT = 120
CLONE_TIMEOUT = 1200
FILES = docblocks.doc_files(ROOT)
BLOCKS = [b for f in FILES for b in docblocks.parse(ROOT, f)]
CHAINS = docblocks.chains(BLOCKS)


def _base():
    base = os.environ.get("NVSWAP_TEST_DIR", "/var/tmp")
    os.makedirs(base, exist_ok=True)
    return base


def _gpu():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _has(mod):
    return importlib.util.find_spec(mod) is not None


def _pkgconfig():
    return shutil.which("pkg-config") and subprocess.run(
        ["pkg-config", "--exists", "nvswap"]).returncode == 0


NEEDS = {
    "gpu": (_gpu, "no CUDA device (torch.cuda.is_available() is False)"),
    "mpi": (lambda: shutil.which("mpirun"), "no mpirun on PATH"),
    "deepspeed": (lambda: _has("deepspeed"),
                  "deepspeed is not installed for this interpreter"),
    "transformers": (lambda: _has("transformers"),
                     "transformers is not installed for this interpreter"),
    "root": (lambda: os.geteuid() == 0, "not root"),
    "sudo": (lambda: shutil.which("sudo"), "no sudo on this machine"),
    "install": (_pkgconfig, "no installed nvswap (pkg-config --exists "
                "nvswap fails; make install PREFIX=... adds one)"),
    "tools": (lambda: shutil.which("nvswap-report",
                                   path=docblocks.sh_path()),
              "the tools are not on PATH beside this interpreter (pip "
              "install . puts them there as console scripts)"),
    "outer": (lambda: False, "it runs make test, which runs this test"),
}


def _debian_interpreter():
    return sys.base_prefix == "/usr"


def _lib():
    """cflags and libs for a c block, or None: the build tree's
    libnvswap.so, else an installed one."""
    inc = ["-I" + str(ROOT / "include")]
    cands = [os.environ.get("NVSWAP_BUILD_DIR"), str(ROOT / "build")]
    for d in filter(None, cands):
        d = os.path.abspath(d)
        if os.path.exists(os.path.join(d, "libnvswap.so")):
            return inc, ["-L" + d, "-Wl,-rpath," + d, "-lnvswap"]
    if _pkgconfig():
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "nvswap"],
                             capture_output=True, text=True).stdout.split()
        libs = [a for a in out if a.startswith("-L")]
        return ([a for a in out if not a.startswith(("-L", "-l"))],
                out + ["-Wl,-rpath," + a[2:] for a in libs])
    return None


@pytest.fixture(scope="module")
def clone():
    """A fresh git clone of this repository, shared by the clone blocks."""
    holder = {}
    yield holder
    if "dir" in holder:
        shutil.rmtree(holder["top"], ignore_errors=True)


def _clone_dir(holder):
    if "dir" not in holder:
        if not (ROOT / ".git").exists():
            pytest.skip(f"{ROOT} is not a git checkout: nothing to clone")
        holder["top"] = tempfile.mkdtemp(prefix="nvswap-docs-clone-",
                                         dir=_base())
        holder["dir"] = os.path.join(holder["top"], "nvswap")
        r = subprocess.run(["git", "clone", "-q", str(ROOT), holder["dir"]],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return holder["dir"]


def _run(chain, cwd, scratch, timeout, root=ROOT):
    lib = _lib() if any(b.lang == "c" for b in chain) else ([], [])
    if lib is None:
        pytest.skip(f"{chain[0].where}: no libnvswap to link a c block "
                    "against (ninja -C build, or an install pkg-config "
                    "finds)")
    spec = {"repo": str(root), "scratch": scratch, "cflags": lib[0],
            "libs": lib[1],
            "blocks": [{"file": b.file, "line": b.line, "lang": b.lang,
                        "text": b.text, "name": b.name}
                       for b in chain]}
    path = os.path.join(scratch, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    p = subprocess.Popen([sys.executable, docblocks.__file__, path],
                         cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        started = [ln for ln in out.splitlines() if ln.startswith("--- ")]
        where = (started[-1][4:].split(" in ")[0] if started else
                 chain[0].where)
        pytest.fail(f"{where}: killed after {timeout} s (timeout); its "
                    f"output:\n{out[-6000:]}", pytrace=False)
    if p.returncode != 0:
        last = out.rstrip().splitlines()[-1:] or ["(no output)"]
        pytest.fail(f"{last[0]}\nthe blocks' output:\n{out[-6000:]}",
                    pytrace=False)
    return out


def test_markings_are_known():
    assert docblocks.problems(BLOCKS) == []


def test_every_doc_has_been_parsed():
    # the fences are balanced: an unclosed one would swallow the rest
    for f in FILES:
        n = sum(1 for ln in (ROOT / f).read_text().splitlines()
                if docblocks._FENCE.match(ln))
        assert n == 2 * len(docblocks.parse(ROOT, f)), f


@pytest.mark.parametrize("block", [
    pytest.param(b, id=b.where) for b in BLOCKS
    if b.lang == "python" and "fragment" in b.flags])
def test_python_fragment_parses(block):
    compile("\n" * block.line + block.text, str(ROOT / block.file), "exec")


@pytest.mark.parametrize("chain", [
    pytest.param(c, id=c[0].where, marks=[pytest.mark.gpu] if any(
        "gpu" in b.needs for b in c) else []) for c in CHAINS])
def test_block_runs(chain, clone):
    # the chain runs up to its first block whose needs are missing
    missing = None
    for i, b in enumerate(chain):
        missing = next((f"{b.where} needs={n}: {NEEDS[n][1]}"
                        for n in b.needs if not NEEDS[n][0]()), None)
        if missing:
            if i == 0:
                pytest.skip(missing)
            missing += f" (the {i} block(s) before it ran)"
            chain = chain[:i]
            break
    in_clone = any("clone" in b.flags for b in chain)
    if in_clone and _debian_interpreter():
        pytest.skip(f"{chain[0].where}: clone blocks run once per make "
                    "test, on the PyPI interpreter (this is Debian's)")
    scratch = tempfile.mkdtemp(prefix="nvswap-docs-", dir=_base())
    try:
        if in_clone:
            cwd = _clone_dir(clone)
            timeout = CLONE_TIMEOUT * len(chain)
        else:
            cwd = os.path.join(scratch, "work")
            os.mkdir(cwd)
            timeout = TIMEOUT * len(chain)
        _run(chain, cwd, scratch, timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if missing:
        pytest.skip(missing)


# ---- the runner itself: what a reader of a failure gets ----

def _fake(d, text):
    root = pathlib.Path(d) / "repo"
    root.mkdir()
    (root / "README.md").write_text(text)
    work = os.path.join(d, "work")
    os.mkdir(work)
    return root, docblocks.chains(docblocks.parse(root, "README.md")), work


def _fails(d, text, timeout=TIMEOUT):
    root, chains, work = _fake(d, text)
    assert len(chains) == 1
    with pytest.raises(pytest.fail.Exception) as ei:
        _run(chains[0], work, d, timeout, root)
    return str(ei.value)


def test_a_failing_python_block_is_named_with_its_output(diskdir):
    msg = _fails(diskdir, "# t\n\n```python\nprint('said before')\n"
                 "raise ValueError('the doc is wrong')\n```\n")
    assert msg.startswith("FAILED: README.md:3 (python): ValueError: "
                          "the doc is wrong\n"), msg
    assert "said before" in msg
    # the traceback names the Markdown file's own line, not the runner's
    assert 'README.md", line 5, in <module>' in msg
    assert "docblocks.py" not in msg


def test_continue_shares_the_namespace_and_the_directory(diskdir):
    msg = _fails(diskdir, "```python\nx = 41\nopen('f', 'w').write('a')\n"
                 "```\n\n```sh continue\ntest -f f\necho sh ran\n```\n\n"
                 "```python continue\nassert x == 41\nx + None\n```\n")
    assert "sh ran" in msg
    assert msg.startswith("FAILED: README.md:11 (python): TypeError"), msg


def test_a_failing_sh_block_is_named(diskdir):
    msg = _fails(diskdir, "```sh\necho one\nfalse\necho never\n```\n")
    assert msg.startswith("FAILED: README.md:1 (sh): exit status 1\n"), msg
    assert "one" in msg and "never" not in msg


def test_a_c_block_that_does_not_compile_names_its_line(diskdir):
    if _lib() is None:
        pytest.skip("no libnvswap to link against (ninja -C build)")
    msg = _fails(diskdir, "```c\n#include <nvswap/nvswap.h>\n\n"
                 "int main(void) { return nvs_no_such_call(); }\n```\n")
    assert msg.startswith("FAILED: README.md:1 (c): does not compile\n")
    assert "README.md:4:" in msg and "nvs_no_such_call" in msg


def test_file_leaves_a_c_block_for_the_blocks_after_it(diskdir):
    if _lib() is None:
        pytest.skip("no libnvswap to link against (ninja -C build)")
    msg = _fails(diskdir, "```c file=x.c\nint main(void) { return 0; }\n"
                 "```\n```sh continue\ngrep -c main x.c\nexit 3\n```\n")
    assert msg.startswith("FAILED: README.md:4 (sh): exit status 3\n"), msg
    assert "\n1\n" in msg


def test_a_hanging_block_is_killed_and_named(diskdir):
    msg = _fails(diskdir, "```python\nprint('ok')\n```\n\n"
                 "```sh continue\necho $$ >pid\nsleep 600\n```\n",
                 timeout=10)
    assert msg.startswith("README.md:5 (sh): killed after 10 s (timeout)"), \
        msg
    with open(os.path.join(diskdir, "work", "pid")) as f:
        pid = int(f.read())
    # The block's shell went with its runner (or waits to be reaped):
    # killed, it may still be running its exit on a loaded machine.
    state = "gone"
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().split(") ")[1][0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z"):
            break
        time.sleep(0.1)
    assert state in ("gone", "Z"), f"pid {pid} still in state {state}"


def test_unknown_markings_are_refused(tmp_path):
    (tmp_path / "README.md").write_text(
        "```c continue\n/* continues nothing */\n```\n"
        "```python fragmnet\n1\n```\n"
        "```sh needs=gpus\n:\n```\n```bash\n:\n```\n"
        "```text fragment\nout\n```\n```python setup=model\n1\n```\n")
    said(docblocks.problems(docblocks.parse(tmp_path, "README.md")), [
        ("README.md:1", "continue, but no runnable block"),
        ("README.md:1", "first code block is a whole script"),
        ("README.md:4", "unknown marking fragmnet"),
        ("README.md:7", "unknown marking needs=gpus"),
        ("README.md:10", "language 'bash'"),
        ("README.md:13", "is not run: marking it means nothing"),
        # a prerequisite run unseen before a block is gone: scripts are
        # whole
        ("README.md:16", "unknown marking setup=model")])


def said(got, want):
    """got (problems()' sentences) is, in order, one per (file:line,
    words) of want, each starting with its place and holding its words."""
    assert len(got) == len(want), got
    for g, (where, words) in zip(got, want):
        assert g.startswith(where + ":") and words in g, (where, words, g)


def test_a_piece_or_a_continuation_says_so_where_it_is_read(tmp_path):
    (tmp_path / "a.md").write_text(
        "```python\nx = 1\n```\n"
        "```python continue\nprint(x)\n```\n"
        "```sh continue\n# Continues the block above\nls\n```\n"
        "```python fragment\nmodel.train()\n```\n"
        "```c fragment\n// a piece: o made before\nf(o);\n```\n"
        "```python fragment\n# train here\nf()\n```\n")
    (tmp_path / "b.md").write_text(
        "```python fragment\n# a piece: m made before\nm()\n```\n")
    said(docblocks.problems(docblocks.parse(tmp_path, "a.md") +
                            docblocks.parse(tmp_path, "b.md")), [
        ("a.md:4", "continue block's first line is a comment with the word "
         "'continue'"),
        ("a.md:11", "fragment block's first line is a comment with the word "
         "'piece'"),
        ("a.md:18", "'piece'"),
        # each file starts over: b.md's first block must be whole too
        ("b.md:1", "first code block is a whole script")])


def test_code_without_a_language_is_refused(tmp_path):
    (tmp_path / "README.md").write_text(
        "```\nimport nvswap\n```\n```\n$ make demo\nout\n```\n"
        "```\n\n#include <nvswap/nvswap.h>\n```\n"
        "```\npip install .\n```\n```\nnvswap/\n  param/\n```\n"
        "```console\n$ make demo\n```\n")
    got = docblocks.problems(docblocks.parse(tmp_path, "README.md"))
    assert [g.split(":", 2)[1] for g in got] == ["1", "4", "8", "12"], got
    assert all("without a language looks like code" in g for g in got)
