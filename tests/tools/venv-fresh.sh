#!/usr/bin/env bash
# scripts/python-venv.sh as make demo-hf and make demo-infer call it first
# on a fresh clone: the build directory that holds the venv and its log
# does not exist yet. It must make them, not fail writing the log
# ("No such file or directory"). Debian's interpreter, debian mode
# (--system-site-packages: nothing is downloaded).
set -uo pipefail
venv_sh=${1:?usage: venv-fresh.sh PATH/TO/scripts/python-venv.sh}
interp=/usr/bin/python3
if ! "$interp" -c 'import venv, ensurepip' 2>/dev/null; then
	echo "SKIP: $interp has no venv/ensurepip (python3-venv)"
	exit 77
fi
tmp=$(mktemp -d /var/tmp/venv-fresh.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/clone/build/venv-debian
out=$("$venv_sh" "$interp" "$venv" debian 2>&1)
rc=$?
if [ $rc -ne 0 ]; then
	echo "FAIL: python-venv.sh exited $rc with no build directory:"
	echo "$out"
	exit 1
fi
if ! "$venv/bin/python" -c 'import sys; assert sys.prefix != sys.base_prefix'; then
	echo "FAIL: $venv/bin/python is not a venv's interpreter"
	exit 1
fi
if [ ! -e "$venv.log" ]; then
	echo "FAIL: no log at $venv.log"
	exit 1
fi
echo "ok: the venv and its log made under a build directory that did not exist"
