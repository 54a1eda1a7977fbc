#!/usr/bin/env bash
# make install as a user runs it (make test, test-plain): into a scratch
# PREFIX on /var/tmp, then exactly what was installed (headers, the
# library with its soname links, libnvswap.a, nvswap.pc, the four tools,
# nothing else), README's "Using the handle" made whole
# (install/handle_example.c) built with pkg-config alone, shared and
# static, and run; an installed tool run; and a PREFIX that cannot be
# written refused naming it, before anything is built or configured.
# Not a meson test: make install reconfigures build/'s prefix (put back
# at the end), which must not happen under a running meson test.
# Prints "install: N passed, N failed" (and adds it to $NVS_TOTALS).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
pass=0 fail=0 skip=0

ok() {
	echo "install: ok: $1"
	pass=$((pass + 1))
}
bad() {
	echo "install: FAIL: $1"
	shift
	printf '    %s\n' "$@"
	fail=$((fail + 1))
}
# expect NAME EXPECTED ACTUAL
expect() {
	if [ "$2" == "$3" ]; then
		ok "$1"
	else
		bad "$1" "expected:" "$2" "got:" "$3"
	fi
}
option() {
	meson introspect build --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(opts[sys.argv[1]])' "$1"
}

old_prefix=$(option prefix) || exit 1
version=$(meson introspect build --projectinfo |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
# /var/tmp: a real filesystem with O_DIRECT; 0755 so that user nobody
# can reach the unwritable PREFIX below.
tmp=$(mktemp -d /var/tmp/nvswap-install.XXXXXX) || exit 1
chmod 755 "$tmp"
cleanup() {
	meson configure build -Dprefix="$old_prefix" >/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
prefix=$tmp/prefix
unset CPATH C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH PKG_CONFIG_PATH \
	DESTDIR

# ---- make install PREFIX=
out=$(make --no-print-directory install PREFIX="$prefix" 2>&1)
rc=$?
expect "make install PREFIX=$prefix exits 0" 0 "$rc"
[ $rc -eq 0 ] || printf '    %s\n' "$out"
libdir=$prefix/$(option libdir)
pcdir=$libdir/pkgconfig
expect "make install says where it went and how to build against it" \
	"make install: nvswap's headers, library, nvswap.pc and tools are in \
$prefix
build with: PKG_CONFIG_PATH=$pcdir cc prog.c \
\$(pkg-config --cflags --libs nvswap)
run with: LD_LIBRARY_PATH=$libdir (or link with -Wl,-rpath,$libdir); \
the tools find it themselves" \
	"$(grep -E '^(make install|build with|run with):' <<<"$out")"

# ---- what is installed: these files, nothing else
want=$(
	{
		for t in fsck io report tune; do echo "bin/nvswap-$t"; done
		for h in include/nvswap/*.h; do echo "$h"; done
		for f in libnvswap.a libnvswap.so libnvswap.so.0 \
			"libnvswap.so.$version" pkgconfig/nvswap.pc; do
			echo "${libdir#"$prefix/"}/$f"
		done
	} | sort
)
got=$(cd "$prefix" && find . ! -type d | sed 's|^\./||' | sort)
expect "installed: the tools, every public header, the library, nvswap.pc" \
	"$want" "$got"
same=yes
for h in include/nvswap/*.h; do
	cmp -s "$h" "$prefix/$h" || same="no: $h"
done
expect "installed headers are the tree's" yes "$same"
expect "soname links" \
	"libnvswap.so.0 libnvswap.so.$version libnvswap.so.0" \
	"$(readlink "$libdir/libnvswap.so") $(readlink "$libdir/libnvswap.so.0") \
$(readelf -d "$libdir/libnvswap.so.$version" |
		sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"

# ---- pkg-config alone
export PKG_CONFIG_PATH=$pcdir
expect "pkg-config --modversion" "$version" \
	"$(pkg-config --modversion nvswap 2>&1)"
expect "pkg-config --cflags --libs: the prefix only" \
	"-I$prefix/include -L$libdir -lnvswap" \
	"$(echo $(pkg-config --cflags --libs nvswap 2>&1))"
# libnvswap.a carries the private jemalloc: --static adds only the
# system libraries, and no jemalloc.
expect "pkg-config --static --libs: the system libraries, no jemalloc" \
	"-L$libdir -lnvswap -pthread -laio -lm -ldl -luring -ljansson" \
	"$(echo $(pkg-config --static --libs nvswap 2>&1))"
work=$tmp/work
mkdir -p "$work"
cp tests/tools/install/handle_example.c "$work/"
cd "$work" || exit 1
# shellcheck disable=SC2046 # pkg-config's words, as users write it
out=$(cc -o handle_example handle_example.c \
	$(pkg-config --cflags --libs nvswap) 2>&1)
expect "cc handle_example.c \$(pkg-config --cflags --libs nvswap)" \
	"0 " "$? $out"
# shellcheck disable=SC2046
hdrs=$(cc $(pkg-config --cflags nvswap) -M handle_example.c | tr ' \\' '\n\n' |
	grep 'nvswap/nvswap\.h$')
expect "<nvswap/nvswap.h> came from the prefix" \
	"$prefix/include/nvswap/nvswap.h" "$hdrs"
expect "the example resolves libnvswap.so.0 in the prefix" \
	"$libdir/libnvswap.so.0" \
	"$(LD_LIBRARY_PATH=$libdir ldd ./handle_example |
		sed -n 's/^\s*libnvswap\.so\.0 => \(\S*\) .*/\1/p')"
expect "the example runs: its file written and read back, equal" \
	"nvswap $version: wrote 4194304 bytes in 1 op, read them back: equal
exit 0
size 4194304" \
	"$(LD_LIBRARY_PATH=$libdir ./handle_example "$work/swap.bin" 2>&1
		echo "exit $?"
		stat -c 'size %s' "$work/swap.bin" 2>&1)"
rm -f "$work/swap.bin"
# shellcheck disable=SC2046
out=$(cc -static -o handle_static handle_example.c \
	$(pkg-config --cflags --static --libs nvswap) 2>&1)
rc=$?
expect "cc -static handle_example.c \$(pkg-config --static ...)" 0 "$rc"
[ $rc -eq 0 ] || printf '    %s\n' "$out"
expect "the static example runs without the shared library" \
	"nvswap $version: wrote 4194304 bytes in 1 op, read them back: equal
exit 0" \
	"$(./handle_static "$work/swap.bin" 2>&1
		echo "exit $?")"
# README's own example (its "```c file=handle.c" block, as the docs test
# reads it), built and run by README's own commands against the prefix
# (its two "```sh needs=install" blocks), as copied: nothing in the
# environment but PKG_CONFIG_PATH
awk '/^```c file=handle\.c/{on=1; next} on && /^```/{exit} on' \
	"$root/README.md" >handle.c
k=0
while IFS= read -r -d '' block; do
	k=$((k + 1))
	out=$(bash -e -c "$block" 2>&1)
	expect "README's handle.c, built and run by README's block $k" \
		"0 1 write, read: 0" "$? $(tail -1 <<<"$out")"
	[ "$k" -ne 2 ] || expect "README's block 2 links libnvswap statically" \
		"" "$(ldd ./handle 2>&1 | grep libnvswap)"
	rm -f handle swap.bin
done < <(awk '/^```sh needs=install continue/{on=1; b=""; next}
	on && /^```/{on=0; printf "%s%c", b, 0; next} on {b = b $0 "\n"}' \
	"$root/README.md")
expect "README has two install blocks" 2 "$k"
cd "$root" || exit 1

# ---- an installed tool finds its library by itself (RUNPATH)
out=$("$prefix/bin/nvswap-report" --help 2>&1)
expect "installed nvswap-report --help: exit 0, its usage line" \
	"0 usage: nvswap-report [--nvme-path DIR] [--json]" \
	"$? $(head -1 <<<"$out")"
expect "installed nvswap-report finds the installed library" \
	"$libdir/libnvswap.so.0" \
	"$(realpath -ms "$(ldd "$prefix/bin/nvswap-report" |
		sed -n 's/^\s*libnvswap\.so\.0 => \(\S*\) .*/\1/p')")"

# ---- a PREFIX that cannot be written: refused at once, naming it
unset PKG_CONFIG_PATH
out=$(make --no-print-directory install PREFIX=relative/dir 2>&1)
expect "a relative PREFIX is refused" \
	"2 make install: PREFIX relative/dir: not an absolute path \
(e.g. PREFIX=\$HOME/.local)" \
	"$? $(head -1 <<<"$out")"
ro=$tmp/ro
mkdir "$ro"
if ! command -v setpriv >/dev/null; then
	echo "install: SKIP: unwritable PREFIX: no setpriv (util-linux)"
	skip=$((skip + 1))
elif ! setpriv --reuid=nobody --regid=nogroup --clear-groups \
	test -r Makefile -a -x scripts/install.sh; then
	echo "install: SKIP: unwritable PREFIX: user nobody cannot read $root"
	skip=$((skip + 1))
else
	how="run it as a user who can (sudo make install) or choose"
	how+=" another PREFIX=/absolute/path"
	for p in "$ro" "$ro/new/deeper"; do
		if [ "$p" = "$ro" ]; then
			why="cannot write there (Permission denied)"
		else
			why="cannot create it in $ro (Permission denied)"
		fi
		out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups \
			make --no-print-directory install PREFIX="$p" 2>&1)
		expect "make install PREFIX=$p as nobody: refused naming it" \
			"2 make install: PREFIX $p: $why: $how" \
			"$? $(head -1 <<<"$out")"
	done
	expect "... before anything was made or configured" \
		"$prefix" "$(ls -A "$ro")$(option prefix)"
fi

echo "install: $pass passed, $fail failed, $skip skipped"
[ -n "${NVS_TOTALS:-}" ] && echo "install $pass $fail $skip" >>"$NVS_TOTALS"
[ $fail -eq 0 ]
