#!/usr/bin/env bash
# make install, in two halves around the build:
#   install.sh check PREFIX    refuse, in one line and before anything is
#                              built, a PREFIX (under $DESTDIR when set)
#                              this user cannot write or create
#   install.sh install PREFIX  configure build/ for PREFIX, build only
#                              what is installed (not the tests, examples
#                              or benchmarks) and meson install: headers,
#                              libnvswap.so.0.1.0 with its .so.0 and .so
#                              links, libnvswap.a, nvswap.pc, the four
#                              tools; then say how to build against it
# Exit status 2 on a refused PREFIX.
set -euo pipefail
mode=$1 prefix=$2
destdir=${DESTDIR:-}
target=$destdir$prefix

die() {
	echo "make install: PREFIX $prefix: $*" >&2
	exit 2
}
how="run it as a user who can (sudo make install) or choose another"
how+=" PREFIX=/absolute/path"

check() {
	local dir=$target probe err
	case $prefix in
	/*) ;;
	*) die "not an absolute path (e.g. PREFIX=\$HOME/.local)" ;;
	esac
	[ -z "$destdir" ] || case $destdir in
	/*) ;;
	*) die "DESTDIR $destdir is not an absolute path" ;;
	esac
	# The nearest directory that exists: PREFIX itself, or where
	# meson install would create it.
	while [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
	[ -d "$dir" ] || die "$dir is not a directory"
	# A file made and removed at once: the real answer (EROFS on a
	# read-only mount, EACCES, EDQUOT...), not access()'s guess.
	if ! err=$(mktemp -p "$dir" .nvswap-install.XXXXXX 2>&1); then
		err=${err##*: }
		if [ "$dir" = "$target" ]; then
			die "cannot write there ($err): $how"
		fi
		die "cannot create it in $dir ($err): $how"
	fi
	rm -f "$err"
}

install() {
	local libdir pcdir
	local targets
	meson configure build -Dprefix="$prefix" >/dev/null
	# The targets meson installs, and nothing else: make install is not
	# make build (the tests and benchmarks are most of the build).
	# ninja regenerates the install plan for PREFIX on the way.
	targets=$(meson introspect build --targets | python3 -c '
import json, os, sys
for t in json.load(sys.stdin):
    if t.get("installed"):
        for f in t["filename"]:
            print(os.path.relpath(f, os.path.realpath(sys.argv[1])))
' build) || die "meson introspect build --targets failed"
	# shellcheck disable=SC2086 # one word per target
	ninja -C build $targets >/dev/null
	meson install -C build --no-rebuild --quiet
	libdir=$(meson introspect build --buildoptions | python3 -c '
import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(opts["libdir"])')
	case $libdir in /*) ;; *) libdir=$prefix/$libdir ;; esac
	pcdir=$libdir/pkgconfig
	echo "make install: nvswap's headers, library, nvswap.pc and tools" \
		"are in $target"
	# /usr/local's libdir is in ld.so's search path: refresh its cache
	# so that the new soname is found at once.
	if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] &&
		cat /etc/ld.so.conf.d/*.conf 2>/dev/null | grep -qxF "$libdir"; then
		ldconfig
	fi
	case ":$(pkg-config --variable pc_path pkg-config):" in
	*":$pcdir:"*)
		echo "build with: cc prog.c \$(pkg-config --cflags --libs nvswap)"
		;;
	*)
		echo "build with: PKG_CONFIG_PATH=$pcdir cc prog.c" \
			"\$(pkg-config --cflags --libs nvswap)"
		echo "run with: LD_LIBRARY_PATH=$libdir (or link with" \
			"-Wl,-rpath,$libdir); the tools find it themselves"
		;;
	esac
}

case $mode in
check) check ;;
install) install ;;
*)
	echo "usage: install.sh check|install PREFIX" >&2
	exit 2
	;;
esac
