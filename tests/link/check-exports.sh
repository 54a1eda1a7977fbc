#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library exports its public API (nvs_ and a lowercase letter)
# and nothing else: no jemalloc symbol, no nvs__ internal. Usage: LIB.so
set -euo pipefail
lib=$1
bad=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 != "A" && $3 !~ /^nvs_[a-z][a-z0-9_]*@@?NVSWAP_/ {print $3}')
if [ -n "$bad" ]; then
	echo "unexpected exports from $lib:"
	echo "$bad"
	exit 1
fi
n=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 != "A"' | wc -l)
echo "$lib: $n symbols, all public nvs_ API"
nm -D --defined-only "$lib" | grep ' nvs_pinned_alloc@' >/dev/null
