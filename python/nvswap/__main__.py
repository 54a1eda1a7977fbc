# SPDX-License-Identifier: MIT
"""python -m nvswap: what works on this machine, on one screen.

    python -m nvswap [--nvme-path DIR] [--json]   nvswap-report
    python -m nvswap TOOL [ARGS...]               run a tool: io, report,
                                                  tune or fsck (or its
                                                  full name, nvswap-io...)
"""

import sys

from ._cli import TOOLS, run

USAGE = __doc__.split("\n\n", 1)[1].rstrip() + "\n"


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        sys.stdout.write("usage:\n" + USAGE)
        return 0
    if not argv or argv[0].startswith("-"):
        return run("nvswap-report", argv)
    tool = argv[0] if argv[0].startswith("nvswap-") else "nvswap-" + argv[0]
    if tool not in TOOLS:
        names = ", ".join(t[len("nvswap-"):] for t in TOOLS)
        print(f"python -m nvswap: no tool {argv[0]!r} (one of {names})\n"
              "usage:\n" + USAGE, end="", file=sys.stderr)
        return 2
    return run(tool, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
