# SPDX-License-Identifier: MIT
"""The fenced code blocks of README.md and docs/*.md, and their runner.

test_docs.py documents the marking and runs the blocks; this module
parses the Markdown (parse(), chains()) and, run as a script
(python docblocks.py SPEC.json), runs one chain of blocks in the
current directory with the interpreter that runs it: python blocks in
one namespace, sh blocks with bash -e, c blocks compiled with cc -std=c11
against the public headers and libnvswap, then run. It prints each
block's file and line before its output and, when a block fails,
"FAILED: <file>:<line> (<lang>): <why>" as its last line, exit status 1.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import traceback

CODE = ("python", "sh", "c")
# Info-string words of blocks that are not code: output, diagrams, data.
NOT_CODE = ("", "text", "console", "json")
FLAGS = ("fragment", "continue", "clone")
# The first line of a block without a language word that would be code
# (a shell prompt or command, a Python import, a C include): such a
# block must say what it is, so that code is never left unrun unseen.
LOOKS_LIKE_CODE = re.compile(
    r"^(\$ |# |import \w|from \S+ import |#include|(sudo|pip|pip3|python3?"
    r"|make|cc|gcc|meson|ninja|git|apt-get|mpirun|torchrun|nvswap-\w+) )")
NEEDS = ("gpu", "mpi", "deepspeed", "transformers", "root", "sudo",
         "install", "tools", "outer")

# What a block that is not a whole script says in its first line, where
# a reader sees it (the fence's info string is not shown once rendered):
# a comment naming it a piece, or saying what it continues.
SAYS = {"fragment": "piece", "continue": "continue"}
_COMMENT = {"python": ("#",), "sh": ("#",), "c": ("/*", "//")}

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


class Block:
    """One fenced block: file (relative to the repo), line (of the
    opening fence, 1-based), lang, flags, needs, name (file=), text."""

    def __init__(self, file, line, lang, words, text):
        self.file, self.line, self.lang, self.text = file, line, lang, text
        self.flags, self.needs, self.bad = set(), [], []
        self.name = None
        for w in words:
            key, eq, val = w.partition("=")
            if not eq and w in FLAGS:
                self.flags.add(w)
            elif key == "needs" and val:
                self.needs += val.split(",")
            elif key == "file" and val and "/" not in val and not self.name:
                self.name = val
            else:
                self.bad.append(w)
        self.bad += [f"needs={n}" for n in self.needs if n not in NEEDS]

    @property
    def where(self):
        return f"{self.file}:{self.line}"

    @property
    def code(self):
        return self.lang in CODE

    def says(self, word):
        """Whether the block's first line is a comment with word in it."""
        first = next((ln.strip() for ln in self.text.splitlines()
                      if ln.strip()), "")
        return (first.startswith(_COMMENT.get(self.lang, ("#",))) and
                word in first.lower())

    def __repr__(self):
        return f"<{self.where} {self.lang} {sorted(self.flags)}>"


def doc_files(root):
    """README.md and every docs/**/*.md, relative to root."""
    docs = sorted(p.relative_to(root).as_posix()
                  for p in (root / "docs").rglob("*.md"))
    return ["README.md"] + docs


def parse(root, rel):
    """The fenced blocks of root/rel, in order."""
    lines = (root / rel).read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            i += 1
            continue
        indent, fence, info = m.groups()
        words = info.split()
        start, body = i, []
        i += 1
        while i < len(lines):
            c = _FENCE.match(lines[i])
            if (c and c.group(2)[0] == fence[0] and
                    len(c.group(2)) >= len(fence) and not c.group(3).strip()):
                break
            body.append(lines[i][len(indent):] if
                        lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        lang = words[0] if words else ""
        blocks.append(Block(rel, start + 1, lang, words[1:],
                            "\n".join(body) + "\n"))
        i += 1
    return blocks


def problems(blocks):
    """Sentences for every marking the runner would not understand."""
    out, prev = [], None
    for b in blocks:
        if prev is not None and prev.file != b.file:
            prev = None  # the code block before it in its own file
        if not b.code:
            if b.lang not in NOT_CODE:
                out.append(f"{b.where}: language {b.lang!r} is neither "
                           f"code ({', '.join(CODE)}) nor known output "
                           f"({', '.join(repr(x) for x in NOT_CODE)})")
            elif not b.lang and LOOKS_LIKE_CODE.match(
                    next((ln for ln in b.text.splitlines() if ln.strip()),
                         "")):
                out.append(f"{b.where}: a block without a language looks "
                           "like code: label it (python, sh, c; with "
                           "fragment if it is not to run) or text")
            elif b.flags or b.needs or b.bad:
                out.append(f"{b.where}: a {b.lang or 'plain'} block is not "
                           "run: marking it means nothing")
            continue
        if b.bad:
            out.append(f"{b.where}: unknown marking {' '.join(b.bad)} "
                       f"(flags: {', '.join(FLAGS)}; needs=: "
                       f"{', '.join(NEEDS)}; file=NAME)")
        if "fragment" in b.flags and (len(b.flags | set(b.needs)) > 1 or
                                      b.name):
            out.append(f"{b.where}: a fragment is not run: it takes no "
                       "other marking")
        if "continue" in b.flags and (prev is None or
                                      "fragment" in prev.flags):
            out.append(f"{b.where}: continue, but no runnable block "
                       "before it in this file")
        for flag, word in SAYS.items():
            if flag in b.flags and not b.says(word):
                out.append(f"{b.where}: a {flag} block's first line is a "
                           f"comment with the word {word!r} in it (a "
                           "reader does not see the fence's marking)")
        if prev is None and b.flags & set(SAYS):
            out.append(f"{b.where}: the file's first code block is a "
                       "whole script: it is neither a fragment nor a "
                       "continuation")
        prev = b
    return out


def chains(blocks):
    """The runnable blocks grouped: a block marked continue joins the
    chain of the code block before it in the same file."""
    out = []
    for b in blocks:
        if not b.code or "fragment" in b.flags:
            continue
        if "continue" in b.flags and out and out[-1][0].file == b.file:
            out[-1].append(b)
        else:
            out.append([b])
    return out


# ---- the runner (a separate process, the interpreter under test) ----

def _say(*a):
    print(*a, flush=True)


def _python(b, ns, spec):
    # Padded so that a traceback names the Markdown file's own lines.
    path = os.path.join(spec["repo"], b["file"])
    code = "\n" * b["line"] + b["text"]
    try:
        exec(compile(code, path, "exec"), ns)
    except BaseException as e:  # noqa: B902 (SystemExit too)
        if isinstance(e, SystemExit) and not e.code:
            return None
        # the exception from the block's own frames on, not the runner's
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        return f"{type(e).__name__}: {e}"
    return None


# An outer make's (make test's) flags and jobserver are not the reader's.
_MAKE_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")


def sh_path():
    """PATH for an sh block: the interpreter's own bin directory first,
    as in an activated venv (its python3 and the console scripts pip
    installed beside it), then the caller's."""
    return os.pathsep.join([os.path.dirname(sys.executable),
                            os.environ.get("PATH", os.defpath)])


def _sh(b, spec):
    env = {k: v for k, v in os.environ.items() if k not in _MAKE_ENV}
    env["PATH"] = sh_path()
    r = subprocess.run(["bash", "-e", "-c", b["text"]], env=env)
    return f"exit status {r.returncode}" if r.returncode else None


def _c(b, spec):
    base = os.path.join(spec["scratch"], f"block-{b['line']}")
    path = os.path.join(spec["repo"], b["file"])
    with open(base + ".c", "w") as f:
        f.write(f'#line {b["line"] + 1} "{path}"\n' + b["text"])
    if b["name"]:  # file=NAME: for the blocks that continue it
        with open(b["name"], "w") as f:
            f.write(b["text"])
    cmd = (["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", base,
            base + ".c"] + spec["cflags"] + spec["libs"])
    _say("$ " + " ".join(shlex.quote(c) for c in cmd))
    r = subprocess.run(cmd)
    if r.returncode:
        return "does not compile"
    r = subprocess.run([base])
    return f"exit status {r.returncode}" if r.returncode else None


def run(spec):
    """Run the chain in spec in the current directory: 0, or 1 after a
    FAILED line."""
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(
            os.path.abspath(__file__)):
        sys.path.pop(0)  # the docs import the installed package only
    ns = {"__name__": "__main__"}
    for b in spec["blocks"]:
        _say(f"--- {b['file']}:{b['line']} ({b['lang']}) in {os.getcwd()}")
        if b["lang"] == "python":
            why = _python(b, ns, spec)
        elif b["lang"] == "sh":
            why = _sh(b, spec)
        else:
            why = _c(b, spec)
        sys.stdout.flush()
        sys.stderr.flush()
        if why:
            _say(f"FAILED: {b['file']}:{b['line']} ({b['lang']}): {why}")
            return 1
    return 0


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.exit(run(json.load(f)))
