#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz, built in build-fuzz (make fuzz,
# make test-fuzz). Usage:
#   fuzz.sh run SECONDS   fuzz each target for SECONDS, one after another;
#                         new inputs go to build-fuzz/corpus/TARGET, never
#                         into the tree's tests/fuzz/corpus/TARGET
#   fuzz.sh test SECONDS  replay each target's tree corpus, then fuzz it
#                         for SECONDS (scratch corpus under build-fuzz)
# A crash leaves its input in build-fuzz/crashes/. Prints each target's
# executions and a closing "fuzz: N passed, N failed" (a target passes when
# neither replay nor fuzzing crashed); with $NVS_TOTALS set, appends
# "fuzz PASSED FAILED 0" to it, as scripts/run-tests.sh does.
set -uo pipefail
mode=$1 secs=$2
build=build-fuzz
targets=(fuzz_config fuzz_size fuzz_cli)
# libFuzzer reports and stops at the first ASan/UBSan error; leaks count.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
mkdir -p "$build/crashes" "$build/logs"
pass=0 fail=0 total=0
for t in "${targets[@]}"; do
	exe=$build/tests/fuzz/$t seeds=tests/fuzz/corpus/$t
	opts=(-artifact_prefix="$build/crashes/$t-" -print_final_stats=1
		-timeout=10 -rss_limit_mb=2048)
	case $t in
	fuzz_config) opts+=(-dict=tests/fuzz/config.dict -max_len=8192) ;;
	*) opts+=(-max_len=256) ;;
	esac
	log=$build/logs/$t.log
	ok=1
	if [ "$mode" = test ]; then
		# Replay: every seed once, no mutation.
		if ! "$exe" "${opts[@]}" -runs=0 "$seeds" >"$log.replay" 2>&1; then
			echo "fuzz: $t: replay of $seeds crashed:"
			grep -E 'ERROR|invariant|SUMMARY|Test unit' "$log.replay"
			ok=0
		fi
		out=$build/test-corpus/$t
		rm -rf "$out"
	else
		out=$build/corpus/$t
	fi
	mkdir -p "$out"
	if [ $ok = 1 ]; then
		"$exe" "${opts[@]}" -max_total_time="$secs" "$out" "$seeds" \
			>"$log" 2>&1
		rc=$?
		execs=$(sed -n 's/^stat::number_of_executed_units: //p' "$log")
		total=$((total + ${execs:-0}))
		echo "fuzz: $t: ${execs:-0} executions in ${secs} s," \
			"corpus $(ls "$out" | wc -l) inputs (exit $rc)"
		if [ $rc -ne 0 ]; then
			echo "fuzz: $t: crashed; its log ($log):"
			grep -E 'ERROR|invariant|SUMMARY|Test unit|^    #' "$log" |
				head -40
			ok=0
		fi
	fi
	if [ $ok = 1 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
echo "fuzz: $total executions in all; $(clang --version | head -1)"
echo "fuzz: $pass passed, $fail failed"
[ -n "${NVS_TOTALS:-}" ] && echo "fuzz $pass $fail 0" >>"$NVS_TOTALS"
[ $fail -eq 0 ]
