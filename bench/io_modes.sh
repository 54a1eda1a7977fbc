#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# nvswap-io in several modes, interleaved run by run (the disk is shared
# and noisy): GB/s median [min-max] and CPU s/GiB median over REPS, for
# reads and writes of 1 GiB, 3 timed ops after one warm-up op each run.
#   bench/io_modes.sh DIR REPS QD NAME=ARGS...
# e.g. bench/io_modes.sh nvme_swap 5 128 batch= single=--single-submit
set -euo pipefail
dir=$1 reps=$2 qd=$3
shift 3
tool=build/tools/nvswap-io
mkdir -p "$dir"
echo "| op | qd | mode | GB/s median [min-max] | CPU s/GiB median |"
echo "|---|---|---|---|---|"
for op in read write; do
	declare -A gbs=() cpu=()
	for ((i = 0; i < reps; i++)); do
		for m in "$@"; do
			name=${m%%=*} extra=${m#*=}
			args=(--folder "$dir" --io-size 1G --queue-depth "$qd"
				--loops 3 --warmup-loops 1 --json)
			[ "$op" = read ] && args+=(--read)
			# shellcheck disable=SC2206
			args+=($extra)
			read -r g c < <("$tool" "${args[@]}" | python3 -c \
				'import json,sys; j=json.load(sys.stdin); print(j["task_gbs"], j["cpu_sec_per_gib"])')
			gbs[$name]+="$g "
			cpu[$name]+="$c "
		done
	done
	for m in "$@"; do
		name=${m%%=*}
		python3 - "$op" "$qd" "$name" "${gbs[$name]}" "${cpu[$name]}" <<'PY'
import statistics, sys
op, qd, mode, g, c = sys.argv[1:]
g = [float(x) for x in g.split()]
c = [float(x) for x in c.split()]
print(f"| {op} | {qd} | {mode} | {statistics.median(g):.2f} [{min(g):.2f}-{max(g):.2f}] | {statistics.median(c):.4f} |")
PY
	done
done
