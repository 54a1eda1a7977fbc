#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Make the private jemalloc that libnvswap links: one relocatable object
# built from a libjemalloc_pic.a (scripts/jemalloc-source.sh builds it from
# Debian's source, without initial-exec TLS) in which every global symbol
# X is renamed nvs__je_X.
#
# Why: Debian builds jemalloc without a symbol prefix, so linking it the
# usual way exports malloc, free and operator new from our library and can
# make jemalloc the whole process's allocator (it is, for any program that
# links the static libnvswap.a). Renamed, it can only be reached through
# nvs__je_mallocx & co., coexists with an application's own jemalloc, and
# the version script keeps every nvs__je_ symbol out of libnvswap.so.
# Also dropped: the C++ operators (jemalloc_cpp.pic.o) and the load-time
# constructor (.init_array), so jemalloc initializes on our first call,
# after nvswap has silenced its message hook - the library never prints.
#
# Usage: jemalloc-private.sh LIBJEMALLOC_PIC.A OUTPUT.o
set -euo pipefail
in=$(readlink -f "$1")
out=$(readlink -f "$(dirname "$2")")/$(basename "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
ar x "$in"
rm -f jemalloc_cpp.pic.o
[ -f jemalloc.pic.o ] || {
	echo "jemalloc-private: $in has no jemalloc.pic.o" >&2
	exit 1
}
objcopy --remove-section=.init_array jemalloc.pic.o
ld -r -o combined.o ./*.o
nm -g --defined-only combined.o | awk 'NF == 3 { print $3 " nvs__je_" $3 }' \
	>renames
grep -q '^mallocx nvs__je_mallocx$' renames || {
	echo "jemalloc-private: no mallocx in $in" >&2
	exit 1
}
objcopy --redefine-syms=renames combined.o "$out"
# Nothing unprefixed may remain defined: that would interpose libc.
left=$(nm -g --defined-only "$out" | awk 'NF == 3 && $3 !~ /^nvs__je_/')
if [ -n "$left" ]; then
	echo "jemalloc-private: unprefixed symbols left:" >&2
	echo "$left" >&2
	exit 1
fi
