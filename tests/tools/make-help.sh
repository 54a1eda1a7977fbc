#!/usr/bin/env bash
# make help prints the Makefile's list of targets, and that list is
# true: every "make X" in it, and every "make X" README names, is a
# target of the Makefile, listed by make help.
set -uo pipefail
root=${1:?usage: make-help.sh SOURCE_ROOT}
fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}
out=$(make -s -C "$root" --no-print-directory help 2>&1)
rc=$?
[ $rc -eq 0 ] || bad "make help exit $rc: $out"
first=${out%%$'\n'*}
[[ $first == "nvswap: "* ]] || bad "make help's first line: $first"
grep -q '^#' <<<"$out" && bad "make help prints comment marks"
listed=$(grep -o 'make [a-z][a-z-]*' <<<"$out" | sed 's/^make //' | sort -u)
[ -n "$listed" ] || bad "make help names no target"
named=$(grep -o 'make [a-z][a-z-]*' "$root/README.md" | sed 's/^make //' |
	sort -u)
for t in $listed; do
	[ "$t" = make ] && continue
	grep -q "^$t:" "$root/Makefile" ||
		bad "make help lists 'make $t', which the Makefile lacks"
done
for t in $named; do
	[ "$t" = make ] && continue
	grep -qx "$t" <<<"$listed" ||
		bad "README names 'make $t', which make help does not list"
done
[ $fail -eq 0 ] && echo "make help: $(wc -l <<<"$listed") targets, ok"
exit $fail
