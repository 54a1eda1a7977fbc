#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Install the Python package into a fresh venv under the build directory,
# the way users install it, and run its pytest suite (python/tests) there.
#
# Usage: python-tests.sh LABEL INTERPRETER VENV_DIR MODE
#   MODE debian: a venv with --system-site-packages over Debian's
#                python3-torch, -numpy, -pytest and -mesonpy, and the package
#                installed offline (pip --no-index --no-build-isolation).
#   MODE pypi:   a plain venv with torch==2.13.0 and the pinned clients
#                from PyPI (scripts/python-venv.sh makes both), then the
#                package as README says: plain pip install . (build
#                isolation: meson-python, meson and ninja from PyPI in
#                pip's own build environment, not the venv's).
# The package is always built from scratch (pip's temporary build
# directory; --no-cache-dir: never a cached wheel of an older tree) and
# reinstalled. The debian venv is made afresh each run (it holds nothing
# but the package); the pypi one keeps its pinned torch and clients.
# Appends "LABEL passed failed skipped" to $NVS_TOTALS when set. Extra
# pytest arguments: $PYTEST_ARGS.
set -uo pipefail
label=$1 interp=$2 venv=$3 mode=$4
cd "$(dirname "$0")/.."
total() { [ -n "${NVS_TOTALS:-}" ] && echo "$label $1 $2 $3" >>"$NVS_TOTALS"; }

echo "== $label: $interp ($mode) in $venv"
if [ ! -x "$interp" ]; then
	echo "   skipped: interpreter $interp not found (set it in the Makefile:" \
		"DEBIAN_PYTHON / PYPI_PYTHON)"
	total 0 0 1
	exit 0
fi
log=$venv.log
: >"$log"
run() { "$@" >>"$log" 2>&1 || {
	echo "== $label: FAILED: $*" && tail -30 "$log"
	total 0 1 0
	exit 1
}; }
[ "$mode" = debian ] && rm -rf "$venv"
scripts/python-venv.sh "$interp" "$venv" "$mode" "$log" || {
	total 0 1 0
	exit 1
}
if [ "$mode" = debian ]; then
	run "$venv/bin/pip" install -q --no-cache-dir --no-index \
		--no-build-isolation --force-reinstall --no-deps .
else
	run "$venv/bin/pip" install -q --no-cache-dir --force-reinstall \
		--no-deps .
fi
"$venv/bin/python" -c 'import sys, nvswap
try:
    import torch; t = "torch " + torch.__version__
except ImportError:
    t = "no torch"
print("   python", sys.version.split()[0], "|", t, "| nvswap", nvswap.__version__, nvswap.__file__)'
xml=$venv.junit.xml
# From the build directory, so that python/nvswap (sources without the
# extension) is not on sys.path: the installed package is what is tested.
# NVS_VENV_MODE: which venv this is (test_extras.py checks the clients
# only where they are installed, the pypi one).
(cd "$venv" && NVS_VENV_MODE=$mode "$venv/bin/python" -m pytest -q -rs \
	-p no:cacheprovider \
	--junitxml="$xml" ${PYTEST_ARGS:-} "$OLDPWD/python/tests")
rc=$?
read -r pass fail skip < <("$venv/bin/python" scripts/junit-totals.py "$xml")
# 5: no test selected (make test-gpu where none is marked gpu yet).
[ $rc -ne 0 ] && [ $rc -ne 5 ] && [ "$fail" -eq 0 ] && fail=1
echo "== $label: $pass passed, $fail failed, $skip skipped"
total "$pass" "$fail" "$skip"
exit $rc
