#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Each shared object nvswap ships can be dlopen()ed after a process has
# started (from Python): not marked STATIC_TLS, no initial-exec TLS
# relocation, and a TLS segment that stays small, since each thread that
# touches it gets its own copy. Usage: check-tls.sh LIB.so...
set -euo pipefail
max_tls=16384
pass=0 fail=0
bad() {
	echo "$lib: $*" >&2
	fail=$((fail + 1))
}
for lib in "$@"; do
	if readelf -dW "$lib" | grep -q 'STATIC_TLS'; then
		bad "DT_FLAGS has STATIC_TLS:" \
			"$(readelf -dW "$lib" | grep 'STATIC_TLS')"
	else
		pass=$((pass + 1))
	fi
	# Dynamic relocations of initial-exec TLS (R_X86_64_TPOFF64,
	# R_AARCH64_TLS_TPREL64, ...); the DTPOFF/DTPREL of dynamic TLS pass.
	ie=$(readelf -rW "$lib" | grep -cE 'R_[A-Z0-9_]*_(TLS_)?(TPOFF|TPREL)' ||
		true)
	if [ "$ie" -ne 0 ]; then
		bad "$ie initial-exec TLS relocations"
	else
		pass=$((pass + 1))
	fi
	memsz=$(readelf -lW "$lib" | awk '$1 == "TLS" { print $6 }')
	size=$((${memsz:-0}))
	if [ "$size" -gt "$max_tls" ]; then
		bad "TLS segment of $size bytes, more than $max_tls per thread"
	else
		pass=$((pass + 1))
	fi
	echo "$lib: TLS segment $size bytes"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
