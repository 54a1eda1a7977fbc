#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Make .gpu-bundle/ in the repository root: everything a machine with a
# GPU but without internet or -dev packages (Ubuntu 24.04, glibc >= 2.36,
# gcc, meson, ninja, Python 3.12) needs to build nvswap and run its GPU
# checks with scripts/gpu-device.sh. Run here, on Debian 12 or 13, with
# the packages of `make deps` installed; carry the folder to the device
# next to the working tree (docs/gpu.md).
#
#   include/        headers: libaio, liburing, jansson, criterion, uthash
#   lib/            libaio, liburing, jansson (.so + .so.N): the library's
#                   run-time dependencies, safe on LD_LIBRARY_PATH
#   lib/criterion/  libcriterion and every non-glibc library it needs
#                   (from ldd), each with RUNPATH $ORIGIN: the tests only
#   lib/pkgconfig/  liburing.pc, jansson.pc, criterion.pc with
#                   prefix=${pcfiledir}/../..: relocatable, shared
#                   linking only (no Requires.private, Libs.private:
#                   criterion's name .pc files and .a the device lacks),
#                   headers as -isystem: -Werror is for nvswap's code
#   jemalloc/       libjemalloc_pic.a (debug info stripped), include/,
#                   debian-version, as meson's -Djemalloc_pic= expects
#   wheels/         meson-python, pyproject-metadata, packaging, pytest and
#                   its pure-Python dependencies, pip (run from its wheel
#                   where the interpreter has none: uv venvs), numpy
#                   (NVSWAP_BUNDLE_NUMPY=0 leaves it out)
#   bin/fio         fio, static, built from source without optional
#                   engines (FIO_SRC: a fio source tree, or a git
#                   directory whose tag $FIO_TAG is used; none: no fio)
#   MANIFEST        what is in it and where it came from
#
# Usage: scripts/gpu-bundle.sh [OUTDIR]   (default .gpu-bundle)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-.gpu-bundle}
py=${NVSWAP_BUNDLE_PYTHON:-$(command -v python3)}
fio_src=${FIO_SRC:-/work/.mirror/axboe+fio/repo}
fio_tag=${FIO_TAG:-fio-3.33}
limit_mib=40

say() { echo "gpu-bundle: $*" >&2; }
die() {
	say "$*"
	exit 1
}
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
libdir=/usr/lib/$multiarch

for p in libaio-dev liburing-dev libjansson-dev libcriterion-dev uthash-dev; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		die "$p is not installed (make deps installs it)"
done
command -v patchelf >/dev/null || die "needs patchelf: apt-get install patchelf"

rm -rf "$out"
mkdir -p "$out"/{include,lib/criterion,lib/pkgconfig,jemalloc/lib,wheels,bin}
out=$(cd "$out" && pwd)
man=$out/MANIFEST
{
	echo "nvswap GPU bundle, made $(date -u +%FT%TZ) on" \
		"$(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version |
			head -1)"
	echo "from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
} >"$man"

# ---- headers
cp /usr/include/libaio.h /usr/include/liburing.h /usr/include/jansson.h \
	/usr/include/jansson_config.h /usr/include/uthash.h \
	/usr/include/utlist.h /usr/include/utarray.h /usr/include/utstring.h \
	"$out/include/"
cp -r /usr/include/liburing /usr/include/criterion "$out/include/"

# ---- the library's own run-time dependencies (+ the .so for linking)
for l in libaio liburing libjansson; do
	cp -P "$libdir/$l.so" "$libdir/$l".so.* "$out/lib/"
done
for p in libaio-dev liburing-dev libjansson-dev libcriterion-dev uthash-dev; do
	dpkg-query -W -f='${Package} ${Version}\n' "$p" >>"$man"
done

# ---- criterion and its closure, each finding the others by $ORIGIN
cp -P "$libdir/libcriterion.so" "$libdir"/libcriterion.so.* \
	"$out/lib/criterion/"
# glibc and the compiler's runtime: the device has its own, newer.
system_lib='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|ld-linux-x86-64|libgcc_s|libstdc\+\+|linux-vdso)\.so'
ldd "$libdir/libcriterion.so" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
	while read -r name path; do
		echo "$name" | grep -qE "$system_lib" && continue
		cp -L "$path" "$out/lib/criterion/$name"
		echo "criterion needs $name ($(dpkg -S "$(readlink -f "$path")" 2>/dev/null |
			cut -d: -f1 | head -1))" >>"$man"
	done
for f in "$out"/lib/criterion/*.so.*; do
	[ -L "$f" ] && continue
	chmod u+w "$f"
	patchelf --set-rpath '$ORIGIN' "$f"
done

# ---- relocatable .pc files
for pc in liburing jansson criterion; do
	sub=
	[ $pc = criterion ] && sub=/criterion
	sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' \
		-e "s|^libdir=.*|libdir=\${prefix}/lib$sub|" \
		-e 's|^includedir=.*|includedir=${prefix}/include|' \
		-e 's|-I\${includedir}|-isystem ${includedir}|g' \
		-e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
		-e '/^Requires.private:/d' -e '/^Libs.private:/d' \
		"$libdir/pkgconfig/$pc.pc" >"$out/lib/pkgconfig/$pc.pc"
done
# Nothing may point back at this machine's /usr.
if grep -n '/usr' "$out"/lib/pkgconfig/*.pc; then
	die "a .pc file above still names /usr"
fi

# ---- the private jemalloc's input, as meson.build expects it
je=$(scripts/jemalloc-source.sh)
jedir=$(dirname "$(dirname "$je")")
cp "$je" "$out/jemalloc/lib/"
strip --strip-debug "$out/jemalloc/lib/libjemalloc_pic.a"
cp -r "$jedir/include" "$out/jemalloc/"
# Debian's source package, or jemalloc's release where there is none
ver=$jedir/debian-version
[ -f "$ver" ] || ver=$jedir/upstream-version
cp "$ver" "$out/jemalloc/"
[ -f "$jedir/build-info" ] && cp "$jedir/build-info" "$out/jemalloc/"
echo "jemalloc $(cat "$ver") from $jedir (debug info stripped)" >>"$man"

# ---- wheels for Python 3.12, no dependencies resolved on the device
wheels=(meson-python pyproject-metadata packaging pytest pluggy iniconfig
	pygments pip)
[ "${NVSWAP_BUNDLE_NUMPY:-1}" = 1 ] && wheels+=(numpy)
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	--implementation cp --abi cp312 --abi none \
	--platform manylinux2014_x86_64 --platform any \
	-d "$out/wheels" "${wheels[@]}" >&2 ||
	die "pip download of ${wheels[*]} failed"
(cd "$out/wheels" && ls) | sed 's/^/wheel /' >>"$man"

# ---- fio, static, for the disk reference
fio_built=no
if [ -n "$fio_src" ] && [ -e "$fio_src" ]; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	if [ -x "$fio_src/configure" ]; then
		cp -r "$fio_src/." "$tmp/"
	else
		git --git-dir="$fio_src" archive "$fio_tag" | tar -x -C "$tmp"
	fi
	say "building fio ($fio_tag) static in $tmp"
	if (cd "$tmp" && ./configure --build-static --disable-native \
		--disable-numa --disable-rdma --disable-rados --disable-rbd \
		--disable-http --disable-gfapi --disable-libnfs --disable-lex \
		--disable-pmem --disable-xnvme --disable-libzbc \
		--disable-tcmalloc --disable-dfs &&
		make -j"$(nproc)" fio) >"$tmp/build.log" 2>&1; then
		cp "$tmp/fio" "$out/bin/fio"
		strip "$out/bin/fio"
		fio_built=yes
		echo "fio $("$out/bin/fio" --version) static (libaio, io_uring," \
			"psync engines)" >>"$man"
	else
		tail -20 "$tmp/build.log" >&2
		say "fio did not build (above): the bundle has no fio"
	fi
else
	say "no fio source (FIO_SRC=$fio_src): the bundle has no fio"
fi
[ $fio_built = yes ] || echo "no fio" >>"$man"

size=$(du -sm "$out" | cut -f1)
du -sh "$out"/* | sed 's/^/  /' >&2
echo "size ${size} MiB" >>"$man"
[ "$size" -lt "$limit_mib" ] ||
	die "$out is $size MiB, over $limit_mib MiB (NVSWAP_BUNDLE_NUMPY=0?)"
say "$out: ${size} MiB (carry it: ${out#"$root"/})"
