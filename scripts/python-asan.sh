#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The Python package's pytest suite against the extension that the ASan +
# UBSan tree built (build-asan/python, Debian's /usr/bin/python3 with its
# python3-torch, -numpy and -pytest): the interpreter is not instrumented,
# so libasan is preloaded, with libstdc++ (torch throws C++ exceptions, and
# ASan's __cxa_throw interceptor needs the real one loaded before it).
# Leaks are not checked (CPython keeps objects to exit by design); every
# memory error and undefined behaviour in the extension fails the run.
# Left out: the DeepSpeed, example and docs tests (they start other
# processes, which would inherit the preload), the peak-memory bounds
# (pools, loads), the flat-RSS check (test_keep_torch: ASan's quarantine
# grew it 11 MiB over 50 steps) and the larger-than-memory cgroup run (ASan's shadow memory and
# quarantine are not the library's: under a 640 MiB limit the child is
# OOM-killed).
#
# Usage: python-asan.sh BUILD_DIR INTERPRETER
# Appends "python-asan passed failed skipped" to $NVS_TOTALS when set.
set -uo pipefail
build=$1 interp=$2
cd "$(dirname "$0")/.."
label=python-asan
total() { [ -n "${NVS_TOTALS:-}" ] && echo "$label $1 $2 $3" >>"$NVS_TOTALS"; }

echo "== $label: $interp with $build/python"
if [ ! -f "$build/python/nvswap/__init__.py" ]; then
	echo "   skipped: $build has no Python extension (meson found no" \
		"Python.h for $interp: python3-dev)"
	total 0 0 1
	exit 0
fi
asan=$(gcc -print-file-name=libasan.so)
cxx=$(gcc -print-file-name=libstdc++.so.6)
xml=$PWD/$build/python-asan.junit.xml
scratch=$PWD/$build/python-asan
rm -rf "$scratch" "$xml" && mkdir -p "$scratch"
(cd "$scratch" &&
	PYTHONPATH=$OLDPWD/$build/python LD_PRELOAD="$asan $cxx" \
		ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		"$interp" -m pytest -q -rs -p no:cacheprovider -s \
		--junitxml="$xml" \
		-k "not deepspeed and not examples and not test_docs and not peak_memory and not rss_is_flat and not larger_than_memory" \
		"$OLDPWD/python/tests")
rc=$?
read -r pass fail skip < <("$interp" scripts/junit-totals.py "$xml")
[ $rc -ne 0 ] && [ "$fail" -eq 0 ] && fail=1
echo "== $label: $pass passed, $fail failed, $skip skipped"
total "$pass" "$fail" "$skip"
exit $rc
