#!/usr/bin/env bash
# A sanitizer canary: run nvs-canary MODE, which commits one deliberate
# defect, and require the sanitizer's report. Prints "1 passed,
# 0 failed" (counted by scripts/run-tests.sh) or says why the sanitizer
# run cannot be trusted here and how to fix that.
#   run.sh CANARY_EXE MODE "EXPECTED REPORT TEXT"
set -u
exe=$1 mode=$2 want=$3
out=$("$exe" "$mode" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -qF -- "$want" <<<"$out"; then
	echo "canary $mode: reported ($want), exit $rc"
	echo "1 passed, 0 failed"
	exit 0
fi
echo "canary $mode: the deliberate defect was NOT reported (exit $rc):"
echo "$out" | head -20
case $mode in
leak)
	cat <<MSG
Leak checking is unavailable here, so the leak checks of this run prove
nothing. LeakSanitizer does not work under ptrace (strace, gdb, some CI
runners and sandboxes), and detect_leaks=0 in ASAN_OPTIONS or LSAN_OPTIONS
turns it off. Now: ASAN_OPTIONS='${ASAN_OPTIONS:-}' LSAN_OPTIONS='${LSAN_OPTIONS:-}'
TracerPid: $(awk '/TracerPid/ {print $2}' /proc/self/status).
Run make test outside the tracer or sandbox, with detect_leaks=1 (the
Makefile sets it).
MSG
	;;
overflow)
	echo "AddressSanitizer did not catch a heap overflow: is this tree built with -Db_sanitize=address? ASAN_OPTIONS='${ASAN_OPTIONS:-}'" ;;
ub)
	echo "UndefinedBehaviorSanitizer did not stop on signed overflow: halt_on_error=1 must be in UBSAN_OPTIONS (now '${UBSAN_OPTIONS:-}') and the tree built with -Db_sanitize=undefined." ;;
race)
	echo "ThreadSanitizer missed a plain data race: TSAN_OPTIONS='${TSAN_OPTIONS:-}' (halt_on_error=1 needed); TSan needs a kernel that lets it map its shadow (vm.mmap_rnd_bits <= 28 on some kernels)." ;;
esac
echo "0 passed, 1 failed"
exit 1
