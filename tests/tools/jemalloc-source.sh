#!/usr/bin/env bash
# scripts/jemalloc-source.sh away from Debian (issue 48): with no apt-get
# or dpkg on PATH it takes jemalloc's own release and says so once; a
# tarball whose SHA-256 is not the release's is refused naming both, a
# missing one and an unknown NVSWAP_JEMALLOC_ROUTE too, before anything
# is built. (The build itself from the release: make a cache directory
# with NVSWAP_CACHE_DIR and NVSWAP_JEMALLOC_TARBALL set; about a minute.)
set -uo pipefail
root=${1:?usage: jemalloc-source.sh SOURCE_ROOT}
script=$root/scripts/jemalloc-source.sh
fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}
work=$(mktemp -d "${TMPDIR:-/tmp}/nvs-jesrc-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
# A PATH with what the build needs and no apt-get, dpkg or dpkg-query.
mkdir "$work/bin"
for t in bash gcc make ar readelf tar bzip2 sha256sum cut grep sed mkdir \
	mktemp rm mv cp cat printf uname env python3 dirname basename \
	sort head tail ls; do
	p=$(command -v "$t") && ln -s "$p" "$work/bin/$t"
done
run() { # ENV... : the script's exit status and stderr in $rc, $err
	err=$(env -i HOME="$HOME" PATH="$work/bin" \
		NVSWAP_CACHE_DIR="$work/cache" "$@" "$script" 2>&1 >"$work/out")
	rc=$?
}
# Not the release: a tarball of 3 bytes.
printf 'abc' >"$work/fake.tar.bz2"
want=ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
run NVSWAP_JEMALLOC_TARBALL="$work/fake.tar.bz2"
[ "$rc" -eq 1 ] || bad "a wrong tarball: exit $rc, not 1: $err"
grep -q "from jemalloc's 5.3.0 release (no Debian source package here" \
	<<<"$err" || bad "without apt-get it does not say it takes the release: $err"
[ "$(grep -c "release (no Debian source package here" <<<"$err")" -eq 1 ] ||
	bad "the route is not said once: $err"
grep -q "$work/fake.tar.bz2: SHA-256 $want is not jemalloc 5.3.0's release (2db82d1e" \
	<<<"$err" || bad "a wrong tarball is not named with both hashes: $err"
[ ! -s "$work/out" ] || bad "a refused build printed a library: $(cat "$work/out")"
ls "$work/cache"/jemalloc-* >/dev/null 2>&1 &&
	bad "a refused build left a cache entry: $(ls "$work/cache")"
ls -d "$work/cache"/.build-* >/dev/null 2>&1 &&
	bad "a refused build left its work directory: $(ls -a "$work/cache")"

run NVSWAP_JEMALLOC_TARBALL="$work/none.tar.bz2"
[ "$rc" -eq 1 ] && grep -q "NVSWAP_JEMALLOC_TARBALL=$work/none.tar.bz2: no such file" \
	<<<"$err" || bad "a missing tarball: exit $rc: $err"

run NVSWAP_JEMALLOC_ROUTE=ports
[ "$rc" -eq 1 ] &&
	grep -q "NVSWAP_JEMALLOC_ROUTE=ports: debian, upstream or auto" <<<"$err" ||
	bad "an unknown route: exit $rc: $err"
[ $fail -eq 0 ] && echo "jemalloc-source: the release route and its refusals, ok"
exit $fail
