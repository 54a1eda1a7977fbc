#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Build the libjemalloc_pic.a that scripts/jemalloc-private.sh turns into
# nvswap's private jemalloc, from Debian's own source package of the
# installed libjemalloc-dev, with Debian's configure options plus
# --disable-initial-exec-tls. Where that route is closed (no apt-get or
# dpkg, no libjemalloc-dev: any other distribution, or a Debian without
# the package), from jemalloc's own 5.3.0 release instead, its SHA-256
# pinned (byte for byte Debian's .orig tarball), downloaded from GitHub
# or taken from NVSWAP_JEMALLOC_TARBALL (a copy, for a machine offline);
# the build says once which route it took. NVSWAP_JEMALLOC_ROUTE=debian
# or upstream forces one. Prints the path of the .a on stdout (its
# header is in ../include/jemalloc/jemalloc.h, the Debian version in
# ../debian-version or the release in ../upstream-version, the source
# tarball in ../src/); progress goes to stderr, and a build's start (with
# its expected duration) and end also to the terminal (see tell()).
#
# Why: Debian's libjemalloc_pic.a uses initial-exec TLS (about 2.6 KB),
# which marks libnvswap.so STATIC_TLS: a dlopen after the process started
# (ctypes, a Python extension) then fails with "cannot allocate memory in
# static TLS block" once glibc's small surplus is used up. Built with the
# default TLS model, jemalloc's thread data is allocated on first use in
# each thread instead.
#
# Built once per Debian version, architecture and flags, then cached in
#   ${NVSWAP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/nvswap}/jemalloc-VER-ARCH-HASH/
# (rm -rf that directory to force a rebuild). The source comes through
# apt-get source with deb-src entries derived from this machine's deb
# entries, in a private directory: the system's apt setup is not touched,
# and root is not needed. Two builds at once are safe: each works in its
# own temporary directory and the first complete one is renamed into
# place.
#
# Usage: jemalloc-source.sh
set -euo pipefail

# Bump when the recipe below changes what gets built.
recipe=1

say() { echo "jemalloc-source: $*" >&2; }
# The cold build's notice and its end. Also on the terminal when stderr
# is not one: meson setup's run_command and pip's build backend both
# capture stderr and show it only at the end (pip: nothing but
# "Preparing metadata ... still running"), so a user would otherwise
# stare at minutes of silence. /dev/tty opens only with a controlling
# terminal (never in CI or cron, where stderr reaches the log anyway).
tell() {
	say "$*"
	[ -t 2 ] || { echo "nvswap: $*" >/dev/tty; } 2>/dev/null || true
}
die() {
	say "$*"
	exit 1
}
need() { # COMMAND PACKAGE
	command -v "$1" >/dev/null ||
		die "needs $1 (Debian: apt-get install -y --no-install-recommends" \
			"$2; elsewhere the package that has it)"
}

need gcc gcc
need make make
need ar binutils
need readelf binutils
need tar tar
need bzip2 bzip2

# jemalloc's own release: the source where Debian's is out of reach.
UPSTREAM_VER=5.3.0
UPSTREAM_URL=https://github.com/jemalloc/jemalloc/releases/download/$UPSTREAM_VER/jemalloc-$UPSTREAM_VER.tar.bz2
UPSTREAM_SHA256=2db82d1e7119df3e71b7640219b6dfe84789bc0537983c3b7ac4f7189aecfeaa
route=${NVSWAP_JEMALLOC_ROUTE:-auto}
if [ "$route" = auto ]; then
	route=upstream
	if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null &&
		dpkg-query -W -f='${Status}' libjemalloc-dev 2>/dev/null |
		grep -q ' installed$'; then
		route=debian
	fi
fi
case $route in
debian | upstream) ;;
*) die "NVSWAP_JEMALLOC_ROUTE=$route: debian, upstream or auto" ;;
esac

sha256() { # FILE: its SHA-256 in hex
	if command -v sha256sum >/dev/null; then
		sha256sum "$1" | cut -d' ' -f1
	else
		python3 -c 'import hashlib, sys
print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"
	fi
}
fetch() { # URL FILE
	if command -v curl >/dev/null; then
		curl -fsSL --retry 2 -o "$2" "$1"
	elif command -v wget >/dev/null; then
		wget -q -O "$2" "$1"
	else
		python3 -c 'import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as r, \
        open(sys.argv[2], "wb") as f:
    shutil.copyfileobj(r, f)' "$1" "$2"
	fi
}

if [ "$route" = upstream ]; then
	src_pkg=jemalloc src_ver=$UPSTREAM_VER
	case $(uname -m) in
	x86_64) arch=amd64 ;;
	i?86) arch=i386 ;;
	aarch64) arch=arm64 ;;
	ppc64le) arch=ppc64el ;;
	*) arch=$(uname -m) ;;
	esac
	gnu_type=$(gcc -dumpmachine) multiarch=
	cflags="-g -O2" cppflags="" ldflags=""
else
need dpkg-query dpkg
need apt-get apt
need apt-config apt
need sha256sum coreutils

src_pkg=$(dpkg-query -W -f='${source:Package}' libjemalloc-dev 2>/dev/null) ||
	die "libjemalloc-dev is not installed: apt-get install -y libjemalloc-dev"
src_ver=$(dpkg-query -W -f='${source:Version}' libjemalloc-dev)
[[ -n $src_pkg && -n $src_ver ]] ||
	die "libjemalloc-dev is not installed: apt-get install -y libjemalloc-dev"

# What debian/rules and dh_auto_configure would use on this host.
if command -v dpkg-architecture >/dev/null; then
	arch=$(dpkg-architecture -qDEB_HOST_ARCH)
	gnu_type=$(dpkg-architecture -qDEB_HOST_GNU_TYPE)
	multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
else
	arch=$(dpkg --print-architecture)
	gnu_type=$(gcc -dumpmachine)
	multiarch=$gnu_type
fi
if command -v dpkg-buildflags >/dev/null; then
	# The path maps name the current directory; the build adds its own.
	flags() {
		dpkg-buildflags --get "$1" |
			sed -E 's/ ?-f(file|debug)-prefix-map=[^ ]*//g'
	}
	cflags=$(flags CFLAGS)
	cppflags=$(flags CPPFLAGS)
	ldflags=$(flags LDFLAGS)
else
	say "dpkg-buildflags missing (package dpkg-dev): building with -g -O2"
	cflags="-g -O2" cppflags="" ldflags=""
fi
fi # the Debian route
# debian/rules (5.3.0-1 and 5.3.0-3 alike), then ours.
conf=(--build="$gnu_type" --prefix=/usr --libdir="/usr/lib/$multiarch"
	--with-version=VERSION --with-lg-hugepage=21)
case $arch in
i386 | amd64 | x32) conf+=(--with-lg-page=12) ;;
*) conf+=(--with-lg-page=16) ;;
esac
case $arch in
i386 | amd64) conf+=(--enable-prof) ;;
powerpc) cppflags+=" -maltivec" ;;
esac
# The reason for this build; and the C++ operators, which
# jemalloc-private.sh drops anyway (no g++ needed).
conf+=(--disable-initial-exec-tls --disable-cxx)

# (The Debian route's key is what it was before the upstream route.)
up=$([ "$route" = debian ] || echo "upstream route")
key=$(printf '%s\n' "recipe $recipe" $up "$src_pkg $src_ver $arch" \
	"${conf[*]}" "$cflags" "$cppflags" "$ldflags" \
	"$(gcc -dumpfullversion) $(gcc -dumpmachine)" | sha256 /dev/stdin)
cache=${NVSWAP_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:?set NVSWAP_CACHE_DIR}/.cache}/nvswap}
final="$cache/jemalloc-${src_ver//:/_}-$arch-${key:0:12}"
lib="$final/lib/libjemalloc_pic.a"

if [ -d "$final" ]; then
	[[ -f $lib && -f $final/include/jemalloc/jemalloc.h ]] ||
		die "$final is incomplete: rm -rf it and run again"
	say "cached: $final"
	echo "$lib"
	exit 0
fi

if ! mkdir -p "$cache" || ! work=$(mktemp -d "$cache/.build-jemalloc-XXXXXX")
then
	die "cannot write to $cache: set NVSWAP_CACHE_DIR to a writable directory"
fi
trap 'rm -rf "$work"' EXIT
say "building $src_pkg $src_ver ($arch) in $work"
started=$SECONDS
srcdir="$work/src"
mkdir "$work/dl"
if [ "$route" = upstream ]; then
	tell "building the private jemalloc from jemalloc's $UPSTREAM_VER" \
		"release (no Debian source package here: no apt-get, dpkg or" \
		"libjemalloc-dev; once: 1 to 3 minutes on 2 cores, cached in" \
		"$cache)"
	tarball=${NVSWAP_JEMALLOC_TARBALL:-}
	if [ -z "$tarball" ]; then
		tarball="$work/dl/jemalloc-$UPSTREAM_VER.tar.bz2"
		say "downloading $UPSTREAM_URL"
		fetch "$UPSTREAM_URL" "$tarball" ||
			die "cannot download $UPSTREAM_URL: fetch it where you" \
				"can and set NVSWAP_JEMALLOC_TARBALL to its path" \
				"(or, on Debian, apt-get install libjemalloc-dev)"
	fi
	[ -f "$tarball" ] || die "NVSWAP_JEMALLOC_TARBALL=$tarball: no such file"
	got=$(sha256 "$tarball")
	[ "$got" = "$UPSTREAM_SHA256" ] ||
		die "$tarball: SHA-256 $got is not jemalloc $UPSTREAM_VER's" \
			"release ($UPSTREAM_SHA256)"
	mkdir "$srcdir"
	tar -xjf "$tarball" -C "$srcdir" --strip-components=1
else
tell "building the private jemalloc from Debian's source package" \
	"(once: 1 to 3 minutes on 2 cores, cached in $cache)"

# ---- deb-src entries from the deb entries apt uses here
sl=/etc/apt/sources.list sp=/etc/apt/sources.list.d/
eval "$(apt-config shell sl Dir::Etc::SourceList/f sp Dir::Etc::SourceParts/d)"
apt="$work/apt"
mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial"
# One-line format: each "deb" line again as "deb-src".
for f in "$sl" "$sp"*.list; do
	[ -f "$f" ] || continue
	sed -nE 's/^[[:space:]]*deb(-src)?([[:space:]])/deb-src\2/p' "$f"
done | sort -u >"$apt/sources.list"
# deb822: each enabled stanza whose Types has deb, with Types: deb-src.
n=0
for f in "$sp"*.sources; do
	[ -f "$f" ] || continue
	n=$((n + 1))
	awk '
		function flush() {
			if (types ~ /(^|[ \t])deb([ \t]|$)/ && !off)
				printf "%s\n", stanza
			stanza = ""; types = ""; off = 0
		}
		/^[ \t]*$/ { flush(); next }
		/^[Tt]ypes:/ {
			types = $0; sub(/^[^:]*:/, "", types)
			$0 = "Types: deb-src"
		}
		/^[Ee]nabled:[ \t]*[Nn]o/ { off = 1 }
		{ stanza = stanza $0 "\n" }
		END { flush() }
	' "$f" >"$apt/parts/$n.sources"
done
[ -s "$apt/sources.list" ] || grep -qs . "$apt/parts/"*.sources ||
	die "no deb entries in $sl or $sp to derive deb-src entries from"

aptopts=(-o "Dir::Etc::SourceList=$apt/sources.list"
	-o "Dir::Etc::SourceParts=$apt/parts"
	-o "Dir::State::Lists=$apt/lists"
	-o "Dir::Cache=$apt/cache")
# As root, apt downloads as user _apt, who cannot enter our directory.
[ "$(id -u)" -eq 0 ] && aptopts+=(-o APT::Sandbox::User=root)
say "apt-get update (source indexes, private lists in $apt)"
# A repository without sources, or out of reach, fails the update but not
# necessarily the download below, which says what is missing.
apt-get "${aptopts[@]}" -q update >"$work/update.log" 2>&1 ||
	say "apt-get update reported errors (continuing):" \
		"$(grep -E '^(E|W):' "$work/update.log" | head -5)"
(cd "$work/dl" && apt-get "${aptopts[@]}" -q source --download-only \
	"$src_pkg=$src_ver") >&2 || {
	sed 's/^/  update: /' "$work/update.log" >&2
	cat "$apt/sources.list" "$apt/parts/"*.sources 2>/dev/null |
		sed 's/^/  deb-src: /' >&2
	die "apt-get source $src_pkg=$src_ver failed with the deb-src" \
		"entries above (derived from $sl and $sp); a version no" \
		"longer in the archive is on snapshot.debian.org"
}

# ---- unpack with Debian's patches
dsc=$(echo "$work/dl/"*.dsc)
if command -v dpkg-source >/dev/null && [ -f "$dsc" ]; then
	# No signature check: apt-get source checked every file against the
	# archive's signed index.
	dpkg-source --no-check -x "$dsc" "$srcdir" >&2
else
	say "dpkg-source missing (package dpkg-dev): tar and patch"
	need patch patch
	orig=$(echo "$work/dl/"*.orig.tar.*)
	deb=$(echo "$work/dl/"*.debian.tar.*)
	[[ -f $orig && -f $deb ]] ||
		die "expected one .orig.tar and one .debian.tar in $work/dl"
	case "$orig $deb" in *.bz2*) need bzip2 bzip2 ;; esac
	case "$orig $deb" in *.xz*) need xz xz-utils ;; esac
	mkdir "$srcdir"
	tar -xf "$orig" -C "$srcdir" --strip-components=1
	tar -xf "$deb" -C "$srcdir"
	if [ -f "$srcdir/debian/patches/series" ]; then
		sed -e 's/#.*//' -e '/^[[:space:]]*$/d' \
			"$srcdir/debian/patches/series" | while read -r p _; do
			say "applying $p"
			patch -d "$srcdir" -p1 -s -N --no-backup-if-mismatch \
				<"$srcdir/debian/patches/$p"
		done
	fi
fi
[ -x "$srcdir/configure" ] ||
	die "$srcdir has no configure script (autoconf would be needed)"
# The options above are debian/rules' as of 5.3.0-1 and 5.3.0-3: stop on
# a revision whose rules name one this script does not know.
known=" --with-version=VERSION --with-lg-page=12 --with-lg-page=16"
known+=" --with-lg-hugepage=21 --enable-prof --disable-doc "
grep -oE -- '--(with|enable|disable)-[a-z0-9-]+(=[^ )]+)?' \
	"$srcdir/debian/rules" | sort -u | while read -r o; do
	case $known in
	*" $o "*) ;;
	*) die "debian/rules of $src_ver passes $o to configure, which" \
		"scripts/jemalloc-source.sh does not know: add it there" ;;
	esac
done
tarball=$(ls "$work/dl/"*.orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -1 || true)
[ -f "$tarball" ] || die "no .orig.tar in $work/dl to keep"
fi # the Debian route

# ---- configure and build the static PIC library only. The shipped
# configure is used as is: Debian regenerates it, but its configure.ac
# patch (hurd.patch) concerns GNU/Hurd only.
say "configure ${conf[*]}"
(cd "$srcdir" && env -u CC -u CFLAGS -u CPPFLAGS -u LDFLAGS -u EXTRA_CFLAGS \
	CC=gcc CFLAGS="$cflags -ffile-prefix-map=$srcdir=." \
	CPPFLAGS="$cppflags" LDFLAGS="$ldflags" \
	./configure "${conf[@]}") >"$work/configure.log" 2>&1 || {
	tail -30 "$work/configure.log" >&2
	die "configure failed (log above)"
}
say "make -j2 lib/libjemalloc_pic.a"
make -C "$srcdir" -j2 lib/libjemalloc_pic.a >"$work/make.log" 2>&1 || {
	tail -30 "$work/make.log" >&2
	die "make failed (log above)"
}

# Initial-exec or local-exec TLS access left would defeat the purpose.
ie=$(readelf -rW "$srcdir/lib/libjemalloc_pic.a" |
	grep -E '(^|[^D])TP(OFF|REL)|TLS_?IE|TLS_?LE|GOTIE' | head -3 || true)
[ -z "$ie" ] || die "static TLS relocations left in the build: $ie"

out="$work/out"
mkdir -p "$out/lib" "$out/include/jemalloc"
cp "$srcdir/lib/libjemalloc_pic.a" "$out/lib/"
cp "$srcdir/include/jemalloc/jemalloc.h" "$out/include/jemalloc/"
# The source it was built from, kept: a rebuild needs no network.
mkdir "$out/src"
cp "$tarball" "$out/src/"
if [ "$route" = debian ]; then
	printf '%s\n' "$src_ver" >"$out/debian-version"
else
	printf '%s release, SHA-256 %s\n' "$src_ver" "$UPSTREAM_SHA256" \
		>"$out/upstream-version"
fi
{
	echo "$src_pkg $src_ver ($arch), recipe $recipe, $route source"
	echo "configure ${conf[*]}"
	echo "CFLAGS=$cflags"
	echo "CPPFLAGS=$cppflags"
	echo "LDFLAGS=$ldflags"
	gcc --version | head -1
} >"$out/build-info"
# Atomic: a concurrent build that finished first keeps its copy.
if mv -T "$out" "$final" 2>/dev/null; then
	tell "private jemalloc built in $((SECONDS - started)) s: $final"
elif [ -f "$lib" ]; then
	say "built, but another build finished first: $final"
else
	die "cannot rename $out to $final"
fi
echo "$lib"
