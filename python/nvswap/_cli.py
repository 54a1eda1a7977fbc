# SPDX-License-Identifier: MIT
"""The console scripts nvswap-io, nvswap-report, nvswap-tune, nvswap-fsck.

Each one replaces the Python process with the C tool of the same name
that the package carries in nvswap/_bin/ (built from tools/, linked on
the same static library as the extension): same arguments, output,
exit status and signals as the tool itself.
"""

import errno
import os
import sys

TOOLS = ("nvswap-io", "nvswap-report", "nvswap-tune", "nvswap-fsck")
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin")


def tool_path(tool):
    """The path of TOOL (one of TOOLS) in this package."""
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}: one of {', '.join(TOOLS)}")
    return os.path.join(BIN, tool)


def run(tool, args):
    """Exec TOOL with ARGS (argv[0] is TOOL's name).

    Returns only when the exec failed: 127, after a sentence on stderr.
    """
    exe = tool_path(tool)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(exe, [tool, *args])
    except OSError as e:
        why = e.strerror
        if e.errno == errno.ENOENT:
            why += (" (this nvswap was built without its tools:"
                    " meson -Dtools=false)")
        print(f"{tool}: cannot run {exe}: {why}", file=sys.stderr)
        return 127


def nvswap_io():
    sys.exit(run("nvswap-io", sys.argv[1:]))


def nvswap_report():
    sys.exit(run("nvswap-report", sys.argv[1:]))


def nvswap_tune():
    sys.exit(run("nvswap-tune", sys.argv[1:]))


def nvswap_fsck():
    sys.exit(run("nvswap-fsck", sys.argv[1:]))
