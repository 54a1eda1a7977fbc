#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Build and check nvswap on a GPU machine without internet or -dev
# packages, from .gpu-bundle/ (scripts/gpu-bundle.sh makes it): the C
# build, meson test --suite gpu, the Python package for the machine's
# torch interpreter and its pytest -m gpu tests, nvswap-report, and the
# GPU benchmark (bench/gpu_stage.c) with fio's figures beside it. Every
# stage runs whatever the one before did, with a time limit; the logs go
# to $OUT (build.log, test-gpu.log, pytest-gpu.log, report.txt,
# bench.txt, bench.json, summary.txt) and a summary table is printed last.
#
# Usage, from the repository root:
#   scripts/gpu-device.sh            on the device (docs/gpu.md)
#   scripts/gpu-device.sh --local    here, without a GPU: the same from the
#                                    bundle, pkg-config seeing only it, a
#                                    venv of Python 3.12 with meson in
#                                    build-gpu/venv; the GPU stages skip
#   scripts/gpu-device.sh --dry-run  print the settings and stop
# Environment: OUT (default build-gpu/out), GPU_PYTHON (default
# /opt/torch/.venv/bin/python3), GPU_BENCH_SIZE (2G), GPU_BENCH_REPS (5),
# GPU_BENCH_DIR (nvme_swap, on the repository's disk, never /tmp),
# GPU_BENCH_ARGS (more bench options), GPU_DEADLINE_S (540: stages
# are cut so that the whole run ends by then).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=device
case ${1:-} in
--local) mode=local ;;
--dry-run) mode=dry ;;
"") ;;
*)
	echo "usage: $0 [--local | --dry-run]" >&2
	exit 2
	;;
esac
start=$SECONDS
deadline=${GPU_DEADLINE_S:-540}
B=$root/.gpu-bundle
bdir=$root/build-gpu
OUT=${OUT:-$bdir/out}
mkdir -p "$OUT" "$bdir"
OUT=$(cd "$OUT" && pwd)
size=${GPU_BENCH_SIZE:-2G}
reps=${GPU_BENCH_REPS:-5}
bench_dir=${GPU_BENCH_DIR:-$root/nvme_swap}
summary=$OUT/summary.txt
: >"$summary"

row() { printf '%-16s %-8s %s\n' "$1" "$2" "$3" | tee -a "$summary"; }
left() { echo $((deadline - (SECONDS - start))); }
# A stage's time limit: its own, or what is left before the deadline less
# @reserve seconds kept for the stages after it.
limit() { # OWN RESERVE
	local l=$(($(left) - $2))
	[ "$l" -gt "$1" ] && l=$1
	[ "$l" -lt 10 ] && l=10
	echo "$l"
}

if [ ! -d "$B/lib/pkgconfig" ]; then
	echo "no bundle at $B: run scripts/gpu-bundle.sh where the packages" \
		"are (docs/gpu.md), and carry .gpu-bundle" | tee -a "$summary"
	exit 1
fi

# ---- the environment: the bundle first
export PKG_CONFIG_PATH=$B/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LIBRARY_PATH=$B/lib:$B/lib/criterion${LIBRARY_PATH:+:$LIBRARY_PATH}
# As system headers (-isystem), as /usr/include would be: their warnings
# are not ours to fail on.
export C_INCLUDE_PATH=$B/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
# Only libaio, liburing and jansson: safe under torch. Criterion's
# closure (zlib, OpenSSL, libffi...) is added for meson test alone.
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# meson.build refuses an include directory inside the source tree given
# by absolute path: the private jemalloc's input is copied out of it.
jedir=${NVSWAP_CACHE_DIR:-${HOME:-/root}/.cache/nvswap}/gpu-bundle-jemalloc
rm -rf "$jedir" && mkdir -p "$(dirname "$jedir")" && cp -r "$B/jemalloc" "$jedir"
jemalloc=$jedir/lib/libjemalloc_pic.a
if [ $mode = local ]; then
	# Prove the build needs nothing from this machine's .pc files.
	export PKG_CONFIG_LIBDIR=$B/lib/pkgconfig
	py312=${GPU_PYTHON:-$(ls "$HOME"/.pyenv/versions/3.12*/bin/python3.12 \
		2>/dev/null | tail -1)}
	py312=${py312:-$(command -v python3.12)}
	venv=$bdir/venv
	if [ ! -x "$venv/bin/python3" ]; then
		"$py312" -m venv "$venv" &&
			"$venv/bin/pip" install -q meson ninja >/dev/null ||
			echo "local: could not make $venv with meson" >&2
	fi
	PY=$venv/bin/python3
else
	PY=${GPU_PYTHON:-/opt/torch/.venv/bin/python3}
fi
pybin=$(dirname "$PY")
export PATH=$pybin:$PATH # meson and ninja beside the interpreter
# cuFile and the CUDA runtime where the loader does not already find them
# (the pinned arena registers its memory through libcudart).
for lib in libcufile.so.0 libcudart.so.13 libcudart.so.12; do
	ldconfig -p 2>/dev/null | grep -q "$lib " && continue
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
		"$("$PY" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cu13/lib"; do
		if [ -e "$d/$lib" ]; then
			[ $lib = libcufile.so.0 ] && export NVSWAP_CUFILE=$d/$lib
			[ $lib != libcufile.so.0 ] && cudart_dir=$d
			break
		fi
	done
done
{
	echo "mode $mode, $(uname -srm), $(. /etc/os-release 2>/dev/null &&
		echo "$PRETTY_NAME"), $(nproc) cores"
	echo "python $PY ($("$PY" --version 2>&1)), meson $(meson --version 2>&1)," \
		"ninja $(ninja --version 2>&1), gcc $(gcc -dumpfullversion 2>&1)"
	echo "bundle $(tail -1 "$B/MANIFEST"), NVSWAP_CUFILE=${NVSWAP_CUFILE:-}" \
		"cudart_dir=${cudart_dir:-}"
	command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader 2>&1 | head -2
} | tee "$OUT/build.log"
[ $mode = dry ] && exit 0

# ---- a VM without a udev database. cuFile's handle registration looks up
# the filesystem's block device in udev's database, also in compatibility
# mode; where udevd never ran (a Firecracker VM: /run/udev/data is empty)
# every cuFileHandleRegister fails with CU_FILE_HANDLE_NOT_REGISTERED and
# cufile.log says "udev property not found: ID_FS_USAGE" and "failed to
# allocate file object". Write the entry udev would have written for the
# disk under the repository, only where it is missing, and say so.
if [ $mode = device ] && command -v findmnt >/dev/null; then
	majmin=$(findmnt -no MAJ:MIN -T "$root" | head -1 | tr -d ' ')
	fstype=$(findmnt -no FSTYPE -T "$root" | head -1)
	udev=/run/udev/data/b$majmin
	if [ -n "$majmin" ] && [ ! -e "$udev" ]; then
		mkdir -p /run/udev/data &&
			printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\nE:DEVTYPE=disk\n' \
				"$fstype" >"$udev" &&
			echo "udev: no database entry for $majmin ($fstype):" \
				"wrote $udev for cuFile" | tee -a "$OUT/build.log"
	fi
fi

# ---- 1. the C library, tools, benchmarks and tests
setup_args=(-Djemalloc_pic="$jemalloc" -Dfuzz=false -Dexamples=false
	-Dtools=true -Dtests=true -Dpython=disabled)
t0=$SECONDS
{
	[ -f "$bdir/c/build.ninja" ] ||
		meson setup "$bdir/c" "${setup_args[@]}"
	timeout "$(limit 240 200)" ninja -C "$bdir/c" -j"$(nproc)"
} >>"$OUT/build.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
	row build ok "$((SECONDS - t0)) s"
else
	row build FAILED "rc $rc after $((SECONDS - t0)) s; build.log ends:"
	tail -15 "$OUT/build.log" | tee -a "$summary"
fi

# ---- 2. meson test --suite gpu
t0=$SECONDS
if [ $rc -ne 0 ]; then
	row "meson test gpu" skipped "no build"
elif ! meson test -C "$bdir/c" --list --suite gpu 2>/dev/null | grep -q .; then
	meson test -C "$bdir/c" --list --suite gpu >"$OUT/test-gpu.log" 2>&1
	row "meson test gpu" empty "no test in suite gpu yet"
else
	LD_LIBRARY_PATH=$B/lib/criterion:$LD_LIBRARY_PATH${cudart_dir:+:$cudart_dir} \
		timeout "$(limit 120 180)" meson test -C "$bdir/c" --suite gpu \
		--print-errorlogs --num-processes 1 >"$OUT/test-gpu.log" 2>&1
	trc=$?
	res=$(grep -E '^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):' \
		"$OUT/test-gpu.log" | tr -s ' ' | tr '\n' ' ')
	row "meson test gpu" "$([ $trc -eq 0 ] && echo ok || echo FAILED)" \
		"rc $trc: $res"
	cp "$bdir/c/meson-logs/testlog.txt" "$OUT/test-gpu.log" 2>/dev/null
fi

# ---- 3. nvswap-report
if [ -x "$bdir/c/tools/nvswap-report" ]; then
	LD_LIBRARY_PATH=$LD_LIBRARY_PATH${cudart_dir:+:$cudart_dir} \
		timeout 60 "$bdir/c/tools/nvswap-report" --nvme-path "$root" \
		>"$OUT/report.txt" 2>&1
	row report "rc $?" "$(grep -E '^gpu ' "$OUT/report.txt" | head -1 | cut -c1-90)"
fi

# ---- 4. the benchmark, and fio with the same block size and depth
t0=$SECONDS
mkdir -p "$bench_dir"
bench=$bdir/c/bench/nvswap-bench-gpu-stage
if [ -x "$bench" ]; then
	LD_LIBRARY_PATH=$LD_LIBRARY_PATH${cudart_dir:+:$cudart_dir} \
		timeout "$(limit 200 150)" "$bench" --dir "$bench_dir" \
		--size "$size" --reps "$reps" --json "$OUT/bench.json" \
		${GPU_BENCH_ARGS:-} >"$OUT/bench.txt" 2>&1
	brc=$?
	case $brc in
	0) row bench ok "$((SECONDS - t0)) s" ;;
	77) row bench skipped "$(head -1 "$OUT/bench.txt" | cut -c1-100)" ;;
	*) row bench FAILED "rc $brc: $(grep -E 'FAILED|rror' "$OUT/bench.txt" | head -2 | tr '\n' ' ' | cut -c1-200)" ;;
	esac
else
	row bench skipped "not built"
	brc=1
fi
fio=$B/bin/fio
if [ -x "$fio" ] && { [ $mode = device ] || [ "${GPU_FIO:-}" = 1 ]; }; then
	t0=$SECONDS
	{
		echo
		echo "fio $("$fio" --version): io_uring, O_DIRECT, 1 MiB" \
			"blocks, depth 128, $size, $reps repeats each"
		for rw in write read; do
			for r in $(seq "$reps"); do
				timeout "$(limit 40 120)" "$fio" --name=ref \
					--filename="$bench_dir/fio-ref.dat" \
					--rw=$rw --bs=1M --iodepth=128 \
					--ioengine=io_uring --direct=1 \
					--size="$size" --numjobs=1 \
					--output-format=json 2>&1 |
					"$PY" -c '
import json, sys
try:
    d = json.load(sys.stdin)
    j = d["jobs"][0][sys.argv[1]]
    print("fio %s GB/s %.3f" % (sys.argv[1], j["bw_bytes"] / 1e9))
except Exception as e:
    print("fio %s failed: %s" % (sys.argv[1], e))' $rw
			done
		done
		rm -f "$bench_dir/fio-ref.dat"
	} >>"$OUT/bench.txt" 2>&1
	fio_med=$(for rw in read write; do
		grep "^fio $rw GB/s" "$OUT/bench.txt" | awk '{print $4}' |
			sort -n | awk -v rw=$rw '{v[NR]=$1} END {if (NR) printf "%s %.2f GB/s ", rw, (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'
	done)
	row fio done "medians: ${fio_med:-none} ($((SECONDS - t0)) s)"
fi

# ---- 5. the Python package for $PY, offline
t0=$SECONDS
# pip: the interpreter's, else the bundle's wheel run as is (a venv made
# by uv has none).
if "$PY" -m pip --version >/dev/null 2>&1; then
	pip=("$PY" -m pip)
else
	pip=("$PY" "$(ls "$B"/wheels/pip-*.whl | head -1)/pip")
fi
pytools=$bdir/pytools pysite=$bdir/pysite
rm -rf "$pysite"
{
	# The build's tools and pytest, from the bundle's wheels; numpy
	# only where the interpreter has none.
	whl=()
	for w in meson_python pyproject_metadata packaging pytest pluggy \
		iniconfig pygments; do
		whl+=("$B"/wheels/$w-*.whl)
	done
	"$PY" -c 'import numpy' 2>/dev/null || whl+=("$B"/wheels/numpy-*.whl)
	[ -d "$pytools" ] || "${pip[@]}" install -q --no-index --no-deps \
		--target "$pytools" "${whl[@]}"
	# -Dtools=false: the package's tools (and bench/) are not what the
	# device checks, and their build would eat its time limit
	PYTHONPATH=$pytools timeout "$(limit 200 100)" "${pip[@]}" install \
		--no-index --no-build-isolation --no-deps --target "$pysite" \
		-Csetup-args=-Djemalloc_pic="$jemalloc" \
		-Csetup-args=-Dtools=false \
		-Cbuild-dir="$bdir/py" -v .
} >"$OUT/pybuild.tmp" 2>&1
prc=$?
{
	echo
	echo "==== python package ($PY)"
	cat "$OUT/pybuild.tmp"
} >>"$OUT/build.log"
rm -f "$OUT/pybuild.tmp"
if [ $prc -eq 0 ] && PYTHONPATH=$pysite "$PY" -c 'import nvswap' >/dev/null 2>&1; then
	row "python build" ok "$((SECONDS - t0)) s, $(PYTHONPATH=$pysite "$PY" -c 'import nvswap; print(nvswap.__file__)' 2>&1)"
else
	row "python build" FAILED "rc $prc; see build.log"
	grep -E 'ERROR|rror:' "$OUT/build.log" | tail -5 | tee -a "$summary"
fi

# ---- 6. pytest -m gpu, the installed package (not python/nvswap)
t0=$SECONDS
if [ $prc -eq 0 ]; then
	(cd "$bdir" && PYTHONPATH=$pysite:$pytools \
		LD_LIBRARY_PATH=$LD_LIBRARY_PATH timeout "$(limit 150 5)" \
		"$PY" -m pytest -m gpu -q -rs -p no:cacheprovider \
		"$root/python/tests") >"$OUT/pytest-gpu.log" 2>&1
	qrc=$?
	res=$(tail -1 "$OUT/pytest-gpu.log" | cut -c1-110)
	case $qrc in
	0) row "pytest -m gpu" ok "$res" ;;
	5) row "pytest -m gpu" empty "no test marked gpu ran: $res" ;;
	*) row "pytest -m gpu" FAILED "rc $qrc: $res" ;;
	esac
else
	row "pytest -m gpu" skipped "no package"
fi

# ---- the summary, last: the stages, then the bench's own tables
{
	echo
	echo "== $((SECONDS - start)) s in all; logs in $OUT"
	if [ -f "$OUT/bench.txt" ]; then
		sed -n '/^nvswap /,/^pinned host/p' "$OUT/bench.txt"
		sed -n '/^| path/,$p' "$OUT/bench.txt"
	fi
} >>"$summary"
echo
cat "$summary"
