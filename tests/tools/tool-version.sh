#!/usr/bin/env bash
# Every tool answers --version with its name and the library's version
# (exit 0, nothing on stderr), and lists --version in its --help.
set -uo pipefail
version=${1:?usage: tool-version.sh VERSION TOOL...}
shift
fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}
for tool in "$@"; do
	name=$(basename "$tool")
	out=$("$tool" --version 2>"${TMPDIR:-/tmp}/tool-version.$$")
	rc=$?
	err=$(cat "${TMPDIR:-/tmp}/tool-version.$$")
	rm -f "${TMPDIR:-/tmp}/tool-version.$$"
	[ "$rc $out" = "0 $name $version" ] ||
		bad "$name --version: exit $rc, '$out' (want '$name $version')"
	[ -z "$err" ] || bad "$name --version wrote to stderr: $err"
	# (the whole text first: grep -q would stop reading at the line, and
	# pipefail would count the tool's SIGPIPE)
	help=$("$tool" --help 2>&1)
	grep -q -- '^  --version  *print the version and exit$' <<<"$help" ||
		bad "$name --help does not list --version"
done
[ $fail -eq 0 ] && echo "--version: $# tools, ok"
exit $fail
