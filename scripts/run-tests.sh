#!/usr/bin/env bash
# Run one build's test suites with meson and add up what Criterion and the
# plain test drivers report. Usage: run-tests.sh BUILD_DIR LABEL SUITE...
# Appends "LABEL passed failed skipped" to $NVS_TOTALS when set.
set -uo pipefail
build=$1 label=$2
shift 2
args=()
for s in "$@"; do args+=(--suite "$s"); done
echo "== $label: meson test -C $build ${args[*]}"
meson test -C "$build" --no-rebuild --print-errorlogs "${args[@]}" >"$build/test-output.txt" 2>&1
rc=$?
grep -E '^ *[0-9]+/[0-9]+ ' "$build/test-output.txt"
log="$build/meson-logs/testlog.txt"
# Criterion's synthesis counts a skipped test as passing; its --verbose
# [SKIP] lines tell them apart.
read -r pass fail skip < <(awk '
	/Synthesis: Tested:/ {
		for (i = 1; i <= NF; i++) {
			if ($i == "Passing:") p += $(i+1)
			if ($i == "Failing:") f += $(i+1)
		}
	}
	/^\[SKIP\] / { s++ }
	/^[0-9]+ passed, [0-9]+ failed/ { p += $1; f += $3 }
	END { print p-s, f+0, s+0 }' "$log")
grep -h '\[SKIP\]' "$log" | sed 's/^/   skipped: /' | sort -u
if [ $rc -ne 0 ]; then
	echo "== $label: FAILED (meson test exit $rc); errors:"
	sed -n '/^=* *[0-9]*\/[0-9]* .*FAIL/,$p' "$build/test-output.txt" | head -150
	[ "$fail" -eq 0 ] && fail=1
fi
echo "== $label: $pass passed, $fail failed, $skip skipped"
[ -n "${NVS_TOTALS:-}" ] && echo "$label $pass $fail $skip" >>"$NVS_TOTALS"
exit $rc
