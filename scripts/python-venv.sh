#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Make (or complete) the venv of one interpreter under the build
# directory, as make test-python and make demo-hf use it.
#
# Usage: python-venv.sh INTERPRETER VENV_DIR MODE [LOG]
#   MODE debian: --system-site-packages over Debian's python3-torch,
#                -numpy, -pytest and -mesonpy (nothing from PyPI).
#   MODE pypi:   a plain venv; torch==2.13.0 (always pinned: an open
#                range downloads a multi-GB CUDA build), numpy, pytest,
#                meson-python, and the real clients, pinned: deepspeed,
#                transformers and accelerate (with safetensors);
#                NVS_CLIENTS=hf (the Python demos): only the last two,
#                no DeepSpeed.
# Output goes to LOG (default VENV_DIR.log). Exit 1 when the venv cannot
# be made; a client that does not install is only noted (its tests skip
# and say why).
set -uo pipefail
interp=$1 venv=$2 mode=$3 log=${4:-$2.log}
if [ ! -x "$interp" ]; then
	echo "   no interpreter '$interp': set PYPI_PYTHON (make PYPI_PYTHON=...)" \
		"to a CPython 3.10+ with pip and venv"
	exit 1
fi
# A fresh clone has no build directory yet (make demo-hf and demo-infer
# come here before anything is built): make the venv's and the log's.
mkdir -p "$(dirname "$venv")" "$(dirname "$log")" || exit 1
run() { "$@" >>"$log" 2>&1 || {
	echo "   FAILED: $* (see $log)" && tail -30 "$log"
	exit 1
}; }
if [ ! -x "$venv/bin/python" ]; then
	rm -rf "$venv"
	if [ "$mode" = debian ]; then
		run "$interp" -m venv --system-site-packages "$venv"
	else
		echo "   making $venv: torch==2.13.0 and the test packages from PyPI"
		run "$interp" -m venv "$venv"
		run "$venv/bin/pip" install -q torch==2.13.0
		run "$venv/bin/pip" install -q numpy pytest 'meson-python>=0.13' \
			meson ninja
	fi
fi
# The real clients, pinned: DeepSpeed for the drop-in tests
# (python/tests/test_deepspeed*.py), transformers and accelerate for the
# training-recipe tests (test_torch_hf.py) and make demo-hf. torch is
# already there, so pip adds nothing torch.
CLIENTS="deepspeed==0.19.8 transformers==5.23.0 accelerate==1.15.0"
NEED="deepspeed, transformers, accelerate, safetensors"
if [ "${NVS_CLIENTS:-all}" = hf ]; then
	CLIENTS=${CLIENTS#deepspeed==* }
	NEED=${NEED#deepspeed, }
fi
if [ "$mode" = pypi ] && ! "$venv/bin/python" -c "import $NEED" 2>/dev/null; then
	echo "   installing $CLIENTS into $venv"
	"$venv/bin/pip" install -q $CLIENTS >>"$log" 2>&1 ||
		echo "   note: pip install $CLIENTS failed (see $log): their tests skip"
fi
exit 0
